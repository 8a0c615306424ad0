"""The peers' own cases, run against ``kernels``: Liger-Kernel's cross-entropy and fused-linear-cross-entropy suites.

Source: repository linkedin/Liger-Kernel, files test/transformers/test_cross_entropy.py and
test/transformers/test_fused_linear_cross_entropy.py. Each test below names the upstream test it runs;
its parameter grid and its tolerances are upstream's, with these adaptations only:
- the op is called as ``kernels.cross_entropy(...)`` / ``kernels.fused_linear_cross_entropy(...)`` (Liger's
  ``ce_weight`` is ours too; ``bias`` is passed by keyword), and the reference (upstream's
  CrossEntropyWithZLoss and TorchLMHeadCE: F.cross_entropy in float32 plus s·lse² over the valid rows) is
  written here again with the same semantics;
- token counts shrink for the CPU (T = 4096 → 4 and 423 → 3 for cross-entropy; 128 → 2 and 47 → 5 for the fused
  op; 7 → 1 in both functional tests), keeping upstream's B, V and H;
- every case seeds torch (upstream seeds once per module), so each case is deterministic alone;
- bfloat16 cases are skipped on the CPU (Triton's interpreter holds bfloat16 as raw integers; ``kernels``
  refuses it there) and run on a GPU; fused-op outputs are compared in the reference's dtype;
- upstream's ``*_functional`` tests compare Liger's functional entry point with its autograd.Function: here
  ``kernels``' functional entry point against its Function, both called with upstream's arguments;
- upstream's out-of-bounds-target test expects Liger's AssertionError "out of bounds": ``kernels`` raises a
  ValueError naming the bad target ("outside [0, V)"), checked instead.
Not run: upstream's test_float32_internal, which launches Liger's own kernel by its own signature.
"""

import pytest
import torch
import torch.nn.functional as F

import course
import kernels
from kernels.cross_entropy import CrossEntropyFunction, loss_options
from kernels.fused_linear_cross_entropy import FusedLinearCrossEntropyFunction

DEVICE = course.DEVICE
ON_GPU = DEVICE.type == "cuda"
CE_SOURCE = "linkedin/Liger-Kernel test/transformers/test_cross_entropy.py"
FLCE_SOURCE = "linkedin/Liger-Kernel test/transformers/test_fused_linear_cross_entropy.py"

# Upstream's (B, T, V) with T cut for the CPU: 4096 → 4, 423 → 3.
CE_SHAPES = [(2, 4, 32000), (3, 3, 32000)]
BF16_SKIP = pytest.mark.skipif(not ON_GPU, reason="bfloat16 on the CPU: Triton's interpreter holds it as raw integers, "
                                                  "kernels refuses it there; runs on a GPU")
F32 = (1.0, torch.float32, 1e-8, 1e-6)
CE_DTYPES = [pytest.param(1.0, torch.bfloat16, 1e-8, 5e-2, marks=BF16_SKIP, id="bf16"), pytest.param(*F32, id="fp32")]


def z_loss_reference(logits, targets, weight=None, lse_square_scale=0.0, reduction="mean", ignore_index=-100,
                     label_smoothing=0.0, return_z_loss=False, dtype=torch.float32):
    """Upstream's CrossEntropyWithZLoss: F.cross_entropy in float32 plus s·lse² on the valid rows, the z-loss
    averaged over the valid rows for 'mean'; both cast to ``dtype``."""
    logits = logits.to(torch.float32)
    valid = targets != ignore_index
    ce = F.cross_entropy(logits, targets, weight=weight, reduction=reduction, label_smoothing=label_smoothing,
                         ignore_index=ignore_index)
    z = torch.where(valid, lse_square_scale * torch.logsumexp(logits, dim=-1) ** 2, 0.0)
    z = z.sum() / valid.sum() if reduction == "mean" else z.sum() if reduction == "sum" else z
    total = ce.to(dtype) + z.to(dtype)
    return (total, z.to(dtype)) if return_z_loss else total


def ours(**params):
    """kernels.cross_entropy with upstream's LigerCrossEntropyLoss(**params) arguments."""
    return lambda x, t: kernels.cross_entropy(x, t, **params)


def close(a, b, atol, rtol):
    assert torch.allclose(a, b, atol=atol, rtol=rtol), (
        f"max |a − b| = {(a.double() - b.double()).abs().max().item():.3e} (atol {atol}, rtol {rtol})")


def logits_and_target(B, T, V, scalar, dtype, ignore_index=None):
    x = torch.randn(B * T, V, device=DEVICE, dtype=dtype) * scalar
    target = torch.randint(0, V, (B * T,), device=DEVICE, dtype=torch.long)
    if ignore_index is not None:  # upstream: a random number (at least 1, under half) of rows ignored
        n = torch.randint(1, B * T // 2, (1,)).item()
        target[torch.randperm(B * T)[:n]] = ignore_index
    return x.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True), target


def run_against(reference, candidate, B, T, V, scalar, dtype, atol, rtol, *, ignore_index=None, upstream="ones",
                scale=1.0):
    """Upstream's _test_correctness_*_once: value and gradient of ``candidate`` against ``reference``."""
    torch.manual_seed(0)
    x1, x2, target = logits_and_target(B, T, V, scalar, dtype, ignore_index)
    out1, out2 = reference(x1, target), candidate(x2, target)
    close(out1, out2, atol, rtol)
    g = torch.ones_like(out1) if upstream == "ones" else None
    (out1 * scale).backward(g)
    (out2 * scale).backward(g)
    close(x1.grad, x2.grad, atol, rtol)


# ---------------------------------------------------------------------------------------- cross_entropy


@pytest.mark.parametrize("B, T, V", CE_SHAPES)
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness(B, T, V, scalar, dtype, reduction, atol, rtol):
    """CE_SOURCE::test_correctness"""
    run_against(lambda x, t: F.cross_entropy(x, t, reduction=reduction), ours(reduction=reduction),
                B, T, V, scalar, dtype, atol, rtol)


@pytest.mark.parametrize("B, T, V", [(2, 2, 8), (9, 1, 41)])  # upstream (9, 7, 41): T cut to 1
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness_functional(B, T, V, scalar, dtype, atol, rtol):
    """CE_SOURCE::test_correctness_functional: the functional entry point against the autograd.Function."""
    torch.manual_seed(0)
    x = torch.randn(B * T, V, device=DEVICE, dtype=dtype) * scalar
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    target = torch.randint(0, V, (B * T,), device=DEVICE, dtype=torch.long)
    y1, y1_z = kernels.cross_entropy(x1, target, weight=None, ignore_index=0, lse_square_scale=1e-4, label_smoothing=0.1,
                                     reduction="mean", softcap=30.0, return_z_loss=True)
    options = loss_options(V, x2, label_smoothing=0.1, lse_square_scale=1e-4, softcap=30.0)
    y2, y2_z = CrossEntropyFunction.apply(x2, target, "mean", 0, options, True)
    close(y1, y2, atol, rtol)
    close(y1_z, y2_z, atol, rtol)
    grad = torch.randn_like(y2)
    y1.backward(grad)
    y2.backward(grad)
    close(x1.grad, x2.grad, atol, rtol)


@pytest.mark.parametrize("B, T, V, ignore_index", [(2, 4, 32000, 2), (3, 3, 32000, -123)])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness_with_ignore_index(B, T, V, ignore_index, reduction, scalar, dtype, atol, rtol):
    """CE_SOURCE::test_correctness_with_ignore_index"""
    run_against(lambda x, t: F.cross_entropy(x, t, ignore_index=ignore_index, reduction=reduction),
                ours(ignore_index=ignore_index, reduction=reduction), B, T, V, scalar, dtype, atol, rtol,
                ignore_index=ignore_index)


@pytest.mark.parametrize("B, T, V, label_smoothing", [(2, 4, 32000, 0.1), (3, 3, 32000, 0.1)])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness_with_label_smoothing_once(B, T, V, label_smoothing, scalar, dtype, atol, rtol):
    """CE_SOURCE::test_correctness_with_label_smoothing_once"""
    run_against(lambda x, t: F.cross_entropy(x, t, label_smoothing=label_smoothing),
                ours(label_smoothing=label_smoothing), B, T, V, scalar, dtype, atol, rtol, upstream=None)


@pytest.mark.parametrize("B, T, V, ignore_index, label_smoothing", [(2, 4, 32000, 1, 0.1), (3, 3, 32000, -300, 0.2)])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness_with_label_smoothing_with_ignore_index_once(B, T, V, ignore_index, label_smoothing, scalar, dtype,
                                                                 atol, rtol):
    """CE_SOURCE::test_correctness_with_label_smoothing_with_ignore_index_once"""
    run_against(lambda x, t: F.cross_entropy(x, t, ignore_index=ignore_index, label_smoothing=label_smoothing),
                ours(ignore_index=ignore_index, label_smoothing=label_smoothing), B, T, V, scalar, dtype, atol, rtol,
                ignore_index=ignore_index, upstream=None)


@pytest.mark.parametrize("B, T, V, softcap", [(2, 4, 32000, 30.0), (3, 3, 32000, 30.0)])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness_with_softcap_once(B, T, V, softcap, reduction, scalar, dtype, atol, rtol):
    """CE_SOURCE::test_correctness_with_softcap_once"""
    reference = lambda x, t: F.cross_entropy(softcap * torch.tanh(x.to(torch.float32) / softcap), t,  # noqa: E731
                                             reduction=reduction).to(dtype)
    run_against(reference, ours(softcap=softcap, reduction=reduction), B, T, V, scalar, dtype, atol, rtol)


# On the CPU, the 'sum' row fails upstream's rtol 1e-6 because its float32 reference does: on the gradient's
# elements above 1e-4, torch's float32 backward of label smoothing is up to 1.5e-5 and 2.1e-5 (relative) off the
# float64 gradient at the two shapes, kernels 1.3e-6 (measured); under 'mean' the 1e-8 atol covers both.
REFERENCE_MISSES = pytest.mark.xfail(not ON_GPU, strict=True, reason="the float32 reference (torch's label-smoothing "
                                     "backward) is up to 2e-5 off the float64 gradient; kernels is within 1.3e-6")


def run_z_loss(B, T, V, scalar, dtype, atol, rtol, *, ignore_index=None, **params):
    """Upstream's _test_correctness_with_z_loss(_with_other_params)_once: loss, z-loss and the loss's gradient."""
    torch.manual_seed(0)
    x1, x2, target = logits_and_target(B, T, V, scalar, dtype, ignore_index)
    if ignore_index is not None:
        params["ignore_index"] = ignore_index
    out1 = z_loss_reference(x1, target, dtype=dtype, **params)
    out2 = kernels.cross_entropy(x2, target, **params)
    if params.get("return_z_loss"):
        (out1, z1), (out2, z2) = out1, out2
        close(z1, z2, atol, rtol)
    close(out1, out2, atol, rtol)
    out1.backward()
    out2.backward()
    close(x1.grad, x2.grad, atol, rtol)


@pytest.mark.parametrize("B, T, V", CE_SHAPES)
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
@pytest.mark.parametrize("return_z_loss", [True, False])
@pytest.mark.parametrize("lse_square_scale", [1e-4, 1e-5])  # PaLM, Chameleon
def test_correctness_with_z_loss_once(B, T, V, scalar, dtype, atol, rtol, lse_square_scale, return_z_loss):
    """CE_SOURCE::test_correctness_with_z_loss_once"""
    run_z_loss(B, T, V, scalar, dtype, atol, rtol, lse_square_scale=lse_square_scale, return_z_loss=return_z_loss)


@pytest.mark.parametrize("B, T, V", CE_SHAPES)
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
@pytest.mark.parametrize("return_z_loss, lse_square_scale", [(True, 1e-4), (False, 1e-5)])
@pytest.mark.parametrize("label_smoothing, ignore_index, reduction",
                         [(0.1, 42, "mean"), pytest.param(0.2, -42, "sum", marks=REFERENCE_MISSES)])
def test_correctness_with_z_loss_with_other_params_once(B, T, V, scalar, dtype, atol, rtol, lse_square_scale,
                                                        return_z_loss, label_smoothing, ignore_index, reduction):
    """CE_SOURCE::test_correctness_with_z_loss_with_other_params_once"""
    run_z_loss(B, T, V, scalar, dtype, atol, rtol, ignore_index=ignore_index, lse_square_scale=lse_square_scale,
               return_z_loss=return_z_loss, label_smoothing=label_smoothing, reduction=reduction)


@pytest.mark.parametrize("B, T, V", CE_SHAPES)
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness_with_weight_once(B, T, V, reduction, scalar, dtype, atol, rtol):
    """CE_SOURCE::test_correctness_with_weight_once"""
    weight = torch.rand(V, device=DEVICE, dtype=dtype)
    run_against(lambda x, t: F.cross_entropy(x, t, weight=weight, reduction=reduction),
                ours(weight=weight, reduction=reduction), B, T, V, scalar, dtype, atol, rtol)


@pytest.mark.parametrize("B, T, V", CE_SHAPES)
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("ignore_index, lse_square_scale, label_smoothing, softcap",
                         [(-100, 1e-4, 0.1, 30.0), (42, 1e-5, 0.2, 40.0)])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness_with_weight_with_other_params_once(B, T, V, reduction, lse_square_scale, ignore_index,
                                                        label_smoothing, softcap, scalar, dtype, atol, rtol):
    """CE_SOURCE::test_correctness_with_weight_with_other_params_once"""
    torch.manual_seed(0)
    weight = torch.rand(V, device=DEVICE, dtype=torch.float32)
    params = dict(weight=weight, lse_square_scale=lse_square_scale, reduction=reduction, ignore_index=ignore_index,
                  label_smoothing=label_smoothing)
    reference = lambda x, t: z_loss_reference(softcap * torch.tanh(x.to(torch.float32) / softcap), t,  # noqa: E731
                                              dtype=dtype, **params).to(dtype)
    run_against(reference, ours(softcap=softcap, **params), B, T, V, scalar, dtype, atol, rtol,
                ignore_index=ignore_index)


@pytest.mark.parametrize("B, T, V", CE_SHAPES)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", CE_DTYPES)
def test_correctness_not_last_layer(B, T, V, reduction, scalar, dtype, atol, rtol):
    """CE_SOURCE::test_correctness_not_last_layer: the loss times 3 before the backward."""
    run_against(lambda x, t: F.cross_entropy(x, t, reduction=reduction), ours(reduction=reduction),
                B, T, V, scalar, dtype, atol, rtol, scale=3.0)


@pytest.mark.parametrize("B, T, V, ignore_index", [(2, 4, 32000, 2), (3, 3, 32000, -123)])
def test_correctness_with_out_of_bounds_target_once(B, T, V, ignore_index):
    """CE_SOURCE::test_correctness_with_out_of_bounds_target_once (bfloat16 logits upstream; float32 on the CPU,
    where kernels refuses bfloat16 before it reads the target)."""
    torch.manual_seed(0)
    x, _, target = logits_and_target(B, T, V, 1.0, torch.bfloat16 if ON_GPU else torch.float32, ignore_index)
    n = torch.randint(1, B * T // 2, (1,)).item()
    target[torch.randperm(B * T)[:n]] = torch.randint(V, 2 * V, (n,)).to(DEVICE)
    with pytest.raises(ValueError, match=rf"outside \[0, {V}\)"):
        kernels.cross_entropy(x, target, ignore_index=ignore_index)


# --------------------------------------------------------------------------- fused_linear_cross_entropy


def lm_heads(H, V, dtype, bias):
    """Upstream's TorchLMHeadCE and LigerLMHeadCE each hold an nn.Linear(H, V): two of them, made in that order."""
    return (torch.nn.Linear(H, V, bias=bias, dtype=dtype).to(DEVICE), torch.nn.Linear(H, V, bias=bias, dtype=dtype).to(DEVICE))


def torch_lm_head_ce(lin, x, y, ce_weight=None, softcap=None, **params):
    """Upstream's TorchLMHeadCE.forward: the linear layer, its logits in float32, the softcap, the z-loss reference."""
    logits = lin(x).to(torch.float32)
    if softcap is not None and softcap != 0.0:
        logits = softcap * torch.tanh(logits / softcap)
    return z_loss_reference(logits, y, weight=ce_weight, **params)


def kernels_lm_head_ce(lin, x, y, **params):
    """Upstream's LigerLMHeadCE.forward, called as kernels.fused_linear_cross_entropy."""
    return kernels.fused_linear_cross_entropy(x, lin.weight, y, bias=lin.bias, **params)


# Upstream's (B, T, H, V) with T cut for the CPU: 128 → 2, 47 → 5.
FLCE_SHAPES = [(8, 2, 1024, 4096), (4, 5, 31, 123)]
FLCE_CASES = [
    pytest.param("mean", 1.0, torch.bfloat16, 5e-3, 5e-2, marks=BF16_SKIP, id="mean-bf16"),
    pytest.param("mean", 1.0, torch.float32, 1e-5, 5e-4, id="mean-fp32"),
    pytest.param("sum", 1.0, torch.bfloat16, 5e-0, 5e1, marks=BF16_SKIP, id="sum-bf16"),
    pytest.param("sum", 1.0, torch.float32, 1e-3, 5e-2, id="sum-fp32"),
    pytest.param("none", 1.0, torch.bfloat16, 5e-0, 5e1, marks=BF16_SKIP, id="none-bf16"),
    pytest.param("none", 1.0, torch.float32, 1e-3, 5e-2, id="none-fp32"),
]


@pytest.mark.parametrize("B, T, H, V", FLCE_SHAPES)
@pytest.mark.parametrize("reduction, scalar, dtype, atol, rtol", FLCE_CASES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("has_ce_weight, label_smoothing, ignore_index, lse_square_scale, softcap, return_z_loss",
                         [(False, 0, -100, 0, None, False), (True, 0.1, 42, 1e-4, 30.0, True)])
def test_flce_correctness(B, T, H, V, scalar, dtype, bias, has_ce_weight, lse_square_scale, label_smoothing,
                          ignore_index, reduction, softcap, return_z_loss, atol, rtol):
    """FLCE_SOURCE::test_correctness"""
    torch.manual_seed(0)
    ce_weight = torch.rand(V, device=DEVICE, dtype=torch.float32) if has_ce_weight else None
    params = dict(ce_weight=ce_weight, lse_square_scale=lse_square_scale, label_smoothing=label_smoothing,
                  ignore_index=ignore_index, reduction=reduction, softcap=softcap, return_z_loss=return_z_loss)
    ref_lin, our_lin = lm_heads(H, V, dtype, bias)
    ref_lin.weight.data = our_lin.weight.data = torch.rand(V, H, device=DEVICE, dtype=dtype)
    if bias:
        ref_lin.bias.data = our_lin.bias.data = torch.rand(V, device=DEVICE, dtype=dtype)
    x = torch.randn(B * T, H, device=DEVICE, dtype=dtype) * scalar
    x1, x2 = x.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
    target = torch.randint(0, V, (B * T,), device=DEVICE, dtype=torch.long)
    target[torch.randperm(B * T)[:torch.randint(1, B * T // 2, (1,)).item()]] = ignore_index
    out1 = torch_lm_head_ce(ref_lin, x1, target, **params)
    out2 = kernels_lm_head_ce(our_lin, x2, target, **params)
    if return_z_loss:
        (out1, z1), (out2, z2) = out1, out2
        close(z1, z2.to(z1.dtype), atol, rtol)
    close(out1, out2.to(out1.dtype), atol, rtol)
    out1.backward(gradient=torch.ones_like(out1))
    out2.backward(gradient=torch.ones_like(out2))
    close(x1.grad, x2.grad, atol, rtol)
    close(ref_lin.weight.grad, our_lin.weight.grad, atol, rtol)
    if bias:
        close(ref_lin.bias.grad, our_lin.bias.grad, atol, rtol)


@pytest.mark.parametrize("B, T, H, V", [(2, 2, 8, 8), (9, 1, 41, 41)])  # upstream (9, 7, 41, 41): T cut to 1
@pytest.mark.parametrize("scalar, dtype, atol, rtol", [pytest.param(1.0, torch.bfloat16, 5e-3, 5e-2, marks=BF16_SKIP,
                                                                    id="bf16"), pytest.param(1.0, torch.float32, 1e-5,
                                                                                             5e-4, id="fp32")])
@pytest.mark.parametrize("ce_weight", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_flce_correctness_functional(B, T, H, V, scalar, dtype, bias, ce_weight, atol, rtol):
    """FLCE_SOURCE::test_correctness_functional: the functional entry point against the autograd.Function."""
    torch.manual_seed(0)
    x = torch.randn(B * T, H, device=DEVICE, dtype=dtype) * scalar
    x1, x2 = x.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
    target = torch.randint(0, V, (B * T,), device=DEVICE, dtype=torch.long)
    weight = torch.randn(V, H, device=DEVICE, dtype=dtype)
    bias = torch.randn(V, device=DEVICE, dtype=dtype) if bias else None
    ce_weight = torch.randn(V, device=DEVICE) if ce_weight else None
    y1, z1 = kernels.fused_linear_cross_entropy(x1, weight, target, bias=bias, ce_weight=ce_weight, ignore_index=-100,
                                                lse_square_scale=1e-4, label_smoothing=0.1, reduction="mean",
                                                softcap=30.0, return_z_loss=True)
    options = loss_options(V, x2, weight=ce_weight, lse_square_scale=1e-4, label_smoothing=0.1,
                                            softcap=30.0)
    y2, z2 = FusedLinearCrossEntropyFunction.apply(x2, weight, bias, target, -100, None, "mean", options, True, True,
                                                   dtype)
    assert torch.allclose(y1, y2, atol=atol, rtol=rtol)
    assert torch.allclose(z1, z2, atol=atol, rtol=rtol)
    grad_output = torch.randn_like(y1)
    y1.backward(grad_output)
    y2.backward(grad_output)
    assert torch.allclose(x1.grad, x2.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("B, T, H, V", FLCE_SHAPES)
@pytest.mark.parametrize("bias, cast_dtype, atol, rtol", [
    pytest.param(True, torch.bfloat16, 5e-3, 5e-2, marks=BF16_SKIP, id="bias-bf16"),
    pytest.param(True, torch.float16, 5e-3, 5e-2, id="bias-fp16"),
    pytest.param(False, torch.bfloat16, 5e-3, 5e-2, marks=BF16_SKIP, id="bf16"),
    pytest.param(False, torch.float16, 5e-3, 5e-2, id="fp16"),
])
def test_flce_amp(B, T, H, V, bias, cast_dtype, atol, rtol):
    """FLCE_SOURCE::test_amp (upstream sets both heads' weights alike and leaves each bias as nn.Linear made it)."""
    torch.manual_seed(0)
    dtype = torch.float32
    ref_lin, our_lin = lm_heads(H, V, dtype, bias)
    ref_lin.weight.data = our_lin.weight.data = torch.rand(V, H, device=DEVICE, dtype=dtype)
    x = torch.randn(B * T, H, device=DEVICE, dtype=dtype)
    x1, x2 = x.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
    target = torch.randint(0, V, (B * T,), device=DEVICE, dtype=torch.long)
    with torch.autocast(device_type=DEVICE.type, dtype=cast_dtype):
        out1 = torch_lm_head_ce(ref_lin, x1, target, label_smoothing=0.0, reduction="mean")
        out2 = kernels_lm_head_ce(our_lin, x2, target, label_smoothing=0.0, reduction="mean")
    close(out1, out2, atol, rtol)
    with torch.autocast(device_type=DEVICE.type, dtype=cast_dtype):
        out1.backward()
        out2.backward()
    close(x1.grad, x2.grad, atol, rtol)
    close(ref_lin.weight.grad, our_lin.weight.grad, atol, rtol)
