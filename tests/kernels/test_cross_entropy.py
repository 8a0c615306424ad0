"""kernels.cross_entropy against torch.nn.functional.cross_entropy: value and gradient, ignore_index included."""

import importlib

import pytest
import torch
import torch.nn.functional as F

import course
from kernels import cross_entropy

ce_module = importlib.import_module("kernels.cross_entropy")
DEVICE = course.DEVICE
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def reference(logits, target, reduction, ignore_index):
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction=reduction, ignore_index=ignore_index)
    return flat.reshape(target.shape) if reduction == "none" else flat


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 781),  # batch 1, odd number of classes
        (7, 1823),  # prime batch, not a power of two
        (2, 3, 5),  # 3-D logits, classes on the last axis
        (3, 10000),  # more classes than one interpreter block
    ],
)
def test_matches_torch(shape, reduction, dtype):
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(shape, generator=g, dtype=dtype) * 4).to(DEVICE).requires_grad_()
    target = torch.randint(0, shape[-1], shape[:-1], generator=g).to(DEVICE)
    target.view(-1)[0] = shape[-1] - 1  # the last class, where a masked tail would hide an off-by-one
    loss = cross_entropy(logits, target, reduction=reduction)
    ref_logits = logits.detach().clone().requires_grad_()
    ref = reference(ref_logits, target, reduction, -100)
    upstream = torch.randn(ref.shape, generator=g, dtype=dtype).to(DEVICE)
    (got_grad,) = torch.autograd.grad(loss, logits, upstream)
    (ref_grad,) = torch.autograd.grad(ref, ref_logits, upstream)
    assert loss.shape == ref.shape
    torch.testing.assert_close(loss, ref, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(got_grad, ref_grad, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ignore_index_rows_get_no_loss_and_no_gradient(reduction):
    logits = torch.randn(7, 11, dtype=torch.float64, device=DEVICE, requires_grad=True)
    target = torch.tensor([3, -100, 0, 10, -100, 5, 1], device=DEVICE)
    loss = cross_entropy(logits, target, reduction=reduction)
    ref_logits = logits.detach().clone().requires_grad_()
    ref = F.cross_entropy(ref_logits, target, reduction=reduction)
    torch.testing.assert_close(loss, ref)
    loss.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)
    assert logits.grad[1].abs().max() == 0 and logits.grad[4].abs().max() == 0


def test_saturated_softmax_keeps_a_useful_gradient():
    # Wrong class wins by 1000: an unfused log(softmax) would give log(0) = -inf.
    logits = torch.tensor([[1000.0, 0.0, 0.0]], dtype=torch.float64, device=DEVICE, requires_grad=True)
    target = torch.tensor([1], device=DEVICE)
    loss = cross_entropy(logits, target)
    loss.backward()
    assert torch.isfinite(loss) and loss.item() == pytest.approx(1000.0)
    torch.testing.assert_close(logits.grad, torch.tensor([[1.0, -1.0, 0.0]], dtype=torch.float64, device=DEVICE))


def test_forward_saves_one_scalar_per_row_not_the_probabilities():
    logits = torch.randn(5, 300, dtype=torch.float64, device=DEVICE, requires_grad=True)
    target = torch.randint(0, 300, (5,), device=DEVICE)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        cross_entropy(logits, target)
    shapes = sorted(tuple(t.shape) for t in saved)
    assert shapes == [(5,), (5,), (5, 300)], shapes  # lse, target, logits — no (5, 300) probabilities


def test_gradcheck_float64():
    logits = torch.randn(4, 9, dtype=torch.float64, device=DEVICE, requires_grad=True)
    target = torch.tensor([0, 8, 3, -100], device=DEVICE)
    assert torch.autograd.gradcheck(lambda x: cross_entropy(x, target), (logits,), fast_mode=True)


@pytest.mark.parametrize(
    "logits, target, message",
    [
        (torch.randn(3, 4), torch.tensor([0, 1, 4]), r"outside \[0, 4\)"),
        (torch.randn(3, 4), torch.tensor([0.0, 1.0, 2.0]), "integer tensor"),
        (torch.randn(3, 4), torch.tensor([0, 1]), "one class index per row"),
        (torch.randn(3, 0), torch.tensor([0, 1, 2]), "empty last dimension"),
    ],
)
def test_bad_inputs_get_clear_messages(logits, target, message):
    with pytest.raises((TypeError, ValueError), match=message):
        cross_entropy(logits.to(DEVICE), target.to(DEVICE))


def test_bad_reduction_is_refused():
    with pytest.raises(ValueError, match="reduction must be"):
        cross_entropy(torch.randn(2, 3, device=DEVICE), torch.tensor([0, 1], device=DEVICE), reduction="avg")


# ---- The options a trainer uses: weight, label_smoothing, lse_square_scale (z-loss), softcap, return_z_loss ----


def reference_with_options(logits, target, reduction="mean", ignore_index=-100, weight=None, label_smoothing=0.0,
                           lse_square_scale=0.0, softcap=None):
    """(loss, z-loss) by PyTorch: F.cross_entropy on the (soft-capped) logits plus s·lse² per valid row,
    the z-loss averaged over the valid rows for 'mean' (Liger-Kernel's convention)."""
    z = logits if softcap is None else softcap * torch.tanh(logits / softcap)
    z2, t = z.reshape(-1, z.shape[-1]), target.reshape(-1)
    ce = F.cross_entropy(z2, t, weight=weight, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing)
    valid = t != ignore_index
    zl = torch.where(valid, lse_square_scale * torch.logsumexp(z2, -1) ** 2, 0.0)
    zl = {"none": zl, "sum": zl.sum(), "mean": zl.sum() / valid.sum()}[reduction]
    if reduction == "none":
        ce, zl = ce.reshape(target.shape), zl.reshape(target.shape)
    return ce + zl, zl


# A pairwise set over (weight, label smoothing, z-loss, softcap, float64) × reduction: every pair of values of any
# two factors appears in some row (rows a, ā, b, b̄, … with the five factors' columns coded 000, 001, 010, 100, 111).
PAIRWISE = [
    # reduction, weight, label_smoothing, lse_square_scale, softcap, dtype, shape
    ("mean", False, 0.0, 0.0, None, torch.float32, (7, 1823)),
    ("mean", True, 0.1, 1e-3, 5.0, torch.float64, (7, 1823)),
    ("sum", False, 0.0, 0.0, 5.0, torch.float64, (2, 3, 37)),
    ("sum", True, 0.2, 1e-2, None, torch.float32, (2, 3, 37)),
    ("none", False, 0.0, 1e-3, None, torch.float64, (3, 10000)),
    ("none", True, 1.0, 0.0, 30.0, torch.float32, (3, 10000)),
    ("none", False, 0.3, 0.0, None, torch.float64, (5, 781)),
    ("mean", True, 0.0, 1e-4, 2.0, torch.float32, (5, 781)),
]


def _options_case(reduction, weighted, eps, z_scale, softcap, dtype, shape, seed=3):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(shape, generator=g, dtype=dtype) * 4).to(DEVICE)
    target = torch.randint(0, shape[-1], shape[:-1], generator=g)
    target.view(-1)[0] = shape[-1] - 1  # the last class
    target.view(-1)[1] = -100  # an ignored row
    weight = (torch.rand(shape[-1], generator=g, dtype=dtype) + 0.1).to(DEVICE) if weighted else None
    return logits, target.to(DEVICE), weight, g


@pytest.mark.parametrize("reduction, weighted, eps, z_scale, softcap, dtype, shape", PAIRWISE)
def test_options_pairwise_match_torch(reduction, weighted, eps, z_scale, softcap, dtype, shape):
    logits, target, weight, g = _options_case(reduction, weighted, eps, z_scale, softcap, dtype, shape)
    opts = dict(weight=weight, label_smoothing=eps, lse_square_scale=z_scale, softcap=softcap)
    x, x_ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss, z_loss = cross_entropy(x, target, reduction=reduction, return_z_loss=True, **opts)
    ref, ref_z = reference_with_options(x_ref, target, reduction, **opts)
    assert loss.shape == ref.shape and z_loss.shape == ref_z.shape and loss.dtype == dtype
    tol = TOL[dtype] * 10  # sums over up to 10,000 classes in another order
    torch.testing.assert_close((loss, z_loss), (ref, ref_z), rtol=tol, atol=tol)
    # Both outputs carry a gradient: the z-loss term is reached through each.
    up, up_z = (torch.randn(ref.shape, generator=g, dtype=dtype).to(DEVICE) for _ in range(2))
    (got,) = torch.autograd.grad((loss, z_loss), x, (up, up_z))
    (want,) = torch.autograd.grad((ref, ref_z), x_ref, (up, up_z), retain_graph=True)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    # Without return_z_loss: the loss alone, the same value and gradient of that loss.
    x2 = logits.clone().requires_grad_()
    alone = cross_entropy(x2, target, reduction=reduction, **opts)
    torch.testing.assert_close(alone, ref.detach(), rtol=tol, atol=tol)
    torch.testing.assert_close(torch.autograd.grad(alone, x2, up)[0], torch.autograd.grad(ref, x_ref, up)[0],
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("option", [
    {"label_smoothing": 0.1}, {"lse_square_scale": 1e-2}, {"softcap": 3.0}, {"weight": "random"},
    {"weight": "random", "label_smoothing": 0.25},  # how PyTorch weighs the smooth part
])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_each_option_alone_matches_torch_in_float64(option, reduction):
    logits, target, weight, g = _options_case(reduction, option.get("weight") is not None, 0, 0, None, torch.float64, (6, 97))
    opts = {**option, "weight": weight}
    x, x_ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = cross_entropy(x, target, reduction=reduction, **opts)
    ref, _ = reference_with_options(x_ref, target, reduction, **opts)
    up = torch.randn(ref.shape, generator=g, dtype=torch.float64).to(DEVICE)
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(loss, x, up)[0], torch.autograd.grad(ref, x_ref, up)[0],
                               rtol=1e-12, atol=1e-12)


def test_gradcheck_with_every_option_float64():
    logits, target, weight, _ = _options_case("mean", True, 0, 0, None, torch.float64, (4, 9))
    opts = dict(weight=weight, label_smoothing=0.2, lse_square_scale=0.05, softcap=2.0)
    x = logits.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: cross_entropy(x, target, return_z_loss=True, **opts), (x,))


def test_softcap_saturates_without_nan():
    logits = torch.tensor([[1e4, -1e4, 0.0, 1e-3]], dtype=torch.float32, device=DEVICE, requires_grad=True)
    target = torch.tensor([1], device=DEVICE)
    loss = cross_entropy(logits, target, softcap=10.0)
    ref, _ = reference_with_options(logits.detach().clone(), target, softcap=10.0)
    (grad,) = torch.autograd.grad(loss, logits)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-6)


def test_autocast_float16_runs_in_float32_as_torch():
    """F.cross_entropy is on autocast's float32 list: half logits are cast up, the loss is float32."""
    g = torch.Generator().manual_seed(5)
    logits = (torch.randn(9, 301, generator=g) * 3).to(torch.float16).to(DEVICE)
    target = torch.randint(0, 301, (9,), generator=g).to(DEVICE)
    x, x_ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    device_type = "cuda" if DEVICE.type == "cuda" else "cpu"
    with torch.autocast(device_type, dtype=torch.float16):
        loss = cross_entropy(x, target, label_smoothing=0.1)
        ref = F.cross_entropy(x_ref, target, label_smoothing=0.1)
    assert loss.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    loss.backward()
    ref.backward()
    assert x.grad.dtype == torch.float16
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-3, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 autocast needs CUDA (the interpreter mishandles bfloat16)")
def test_autocast_bfloat16_on_the_gpu():
    g = torch.Generator().manual_seed(6)
    logits = (torch.randn(64, 5000, generator=g) * 3).to("cuda", torch.bfloat16)
    target = torch.randint(0, 5000, (64,), generator=g).to("cuda")
    x, x_ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = cross_entropy(x, target, lse_square_scale=1e-4, softcap=30.0)
        ref, _ = reference_with_options(x_ref.float(), target, lse_square_scale=1e-4, softcap=30.0)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(x.grad.float(), x_ref.grad.float(), rtol=2e-2, atol=1e-6)


@pytest.mark.parametrize("kwargs, kind, message", [
    ({"label_smoothing": 1.5}, ValueError, r"label_smoothing must be \[0, 1\], got 1.5"),
    ({"label_smoothing": -0.1}, ValueError, "label_smoothing must be"),
    ({"label_smoothing": "0.1"}, TypeError, "label_smoothing must be a number"),
    ({"lse_square_scale": -1e-4}, ValueError, "lse_square_scale must be at least 0"),
    ({"softcap": 0.0}, ValueError, "softcap must be a positive number"),
    ({"softcap": -30.0}, ValueError, "softcap must be a positive number"),
    ({"weight": torch.ones(5)}, ValueError, r"weight must have shape \(4,\), one weight per class"),
    ({"weight": torch.ones(4, dtype=torch.int64)}, TypeError, "weight must be a floating tensor"),
    ({"weight": [1.0] * 4}, TypeError, "weight must be a torch.Tensor"),
    ({"weight": torch.ones(4, device="meta")}, ValueError, "weight is on meta but logits is on (cpu|cuda)"),
])
def test_bad_options_get_messages_naming_the_argument(kwargs, kind, message):
    with pytest.raises(kind, match=message):
        cross_entropy(torch.randn(3, 4, device=DEVICE), torch.tensor([0, 1, 2], device=DEVICE), **kwargs)
