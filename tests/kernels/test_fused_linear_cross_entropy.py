"""kernels.fused_linear_cross_entropy against autograd of F.cross_entropy(h @ W.T, target): values, gradients,
ignore_index, the all-ignored edge, input checks, and the memory rule (no T×V tensor is ever allocated)."""

import importlib

import pytest
import torch
import torch.nn.functional as F

import course
from course.memory import AllocationRecorder
from course.peak_memory import PeakMemory
from kernels import fused_linear_cross_entropy
from tests.kernels.test_cross_entropy import reference_with_options

flce = importlib.import_module("kernels.fused_linear_cross_entropy")
DEVICE = course.DEVICE
TOL = {torch.float32: 2e-5, torch.float64: 1e-12}


def make(n_tokens, vocab, dim, dtype, seed=0, ignored=()):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n_tokens, dim, generator=g, dtype=dtype)
    W = torch.randn(vocab, dim, generator=g, dtype=dtype) / dim**0.5
    target = torch.randint(0, vocab, (n_tokens,), generator=g)
    target[:1] = vocab - 1  # the last class, where a masked tail would hide an off-by-one
    target[list(ignored)] = -100
    return h.to(DEVICE), W.to(DEVICE), target.to(DEVICE)


def fused_and_reference(h, W, target, upstream=1.0, **kwargs):
    """(loss, dh, dW) of the fused op and of autograd through the unfused PyTorch expression."""
    results = []
    for fn in (lambda h, W: fused_linear_cross_entropy(h, W, target, **kwargs),
               lambda h, W: F.cross_entropy(h @ W.T, target, ignore_index=kwargs.get("ignore_index", -100))):
        leaves = [t.detach().clone().requires_grad_() for t in (h, W)]
        loss = fn(*leaves)
        results.append((loss.detach(), *torch.autograd.grad(loss, leaves, torch.tensor(upstream, dtype=loss.dtype))))
    return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_tokens, vocab, dim, chunk", [
    (1, 7, 3, None),  # one token
    (37, 53, 19, 5),  # prime sizes; 5 does not divide 37
    (100, 1000, 33, 7),  # a chunk that leaves a remainder of 2
    (37, 53, 19, 64),  # a chunk larger than T: one chunk
    (13, 9000, 5, 4),  # a vocabulary longer than one interpreter block (8192)
    (64, 300, 24, None),  # the default chunk
])
def test_matches_autograd_of_torch(n_tokens, vocab, dim, chunk, dtype):
    h, W, target = make(n_tokens, vocab, dim, dtype, ignored=[i for i in (3, 11) if i < n_tokens])
    (loss, dh, dW), (ref_loss, ref_dh, ref_dW) = fused_and_reference(h, W, target, upstream=0.7, chunk=chunk)
    assert loss.dtype == dtype and loss.shape == () and dh.dtype == dtype and dW.dtype == dtype
    torch.testing.assert_close(loss, ref_loss, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(dh, ref_dh, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(dW, ref_dW, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("ignore_index", [-100, -1, 2])  # the default, another negative, a real class
def test_ignored_rows_add_nothing_and_do_not_count_in_the_mean(ignore_index):
    h, W, target = make(11, 17, 6, torch.float64, seed=1)
    target[[1, 4, 5]] = ignore_index
    (loss, dh, dW), (ref_loss, ref_dh, ref_dW) = fused_and_reference(h, W, target, ignore_index=ignore_index, chunk=3)
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(dh, ref_dh)
    torch.testing.assert_close(dW, ref_dW)
    assert dh[[1, 4, 5]].abs().max() == 0
    kept = target != ignore_index
    per_row = F.cross_entropy(h @ W.T, target, ignore_index=ignore_index, reduction="none")
    torch.testing.assert_close(loss, per_row[kept].sum() / kept.sum())  # 8 rows in the mean, not 11


def test_one_valid_row_is_its_own_mean():
    h, W, target = make(6, 10, 4, torch.float64, seed=2, ignored=[0, 1, 2, 4, 5])
    (loss, dh, dW), (ref_loss, ref_dh, ref_dW) = fused_and_reference(h, W, target, chunk=4)
    torch.testing.assert_close((loss, dh, dW), (ref_loss, ref_dh, ref_dW))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_tokens", [5, 0])  # every token ignored; no token at all
def test_all_ignored_gives_nan_loss_and_zero_gradients_as_torch(dtype, n_tokens):
    """The mean over zero rows is 0/0: PyTorch returns NaN with zero gradients, and so does this op."""
    h, W, target = make(n_tokens, 9, 4, dtype, ignored=range(n_tokens))
    (loss, dh, dW), (ref_loss, ref_dh, ref_dW) = fused_and_reference(h, W, target, chunk=2)
    assert torch.isnan(ref_loss) and torch.isnan(loss)
    assert torch.equal(dh, ref_dh) and torch.equal(dW, ref_dW) and not dh.any() and not dW.any()


def test_gradcheck_in_float64():
    h, W, target = make(7, 5, 3, torch.float64, seed=3, ignored=[2])
    h.requires_grad_()
    W.requires_grad_()
    assert torch.autograd.gradcheck(lambda h, W: fused_linear_cross_entropy(h, W, target, chunk=3), (h, W))


def test_a_retained_graph_gives_the_same_gradients_twice():
    h, W, target = make(9, 12, 4, torch.float64, seed=4)
    h.requires_grad_()
    W.requires_grad_()
    loss = fused_linear_cross_entropy(h, W, target, chunk=4)
    first = torch.autograd.grad(2.5 * loss, (h, W), retain_graph=True)
    second = torch.autograd.grad(2.5 * loss, (h, W))
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def test_only_the_gradients_asked_for_are_computed():
    h, W, target = make(9, 12, 4, torch.float64, seed=5)
    W.requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        loss = fused_linear_cross_entropy(h, W, target)
    assert saved == [(12, 4)], saved  # W̄ only: h needs no gradient
    (dW,) = torch.autograd.grad(loss, W)
    torch.testing.assert_close(dW, torch.autograd.grad(F.cross_entropy(h @ W.T, target), W)[0])
    with torch.no_grad(), AllocationRecorder() as rec:
        fused_linear_cross_entropy(h, W, target, chunk=9)
    assert rec.offenders(min_numel=12 * 4) == [("aten.mm", (9, 12))], rec.summary()  # the logits; no W̄


def test_the_default_chunk_keeps_the_chunks_logits_near_the_size_of_h():
    assert flce.default_chunk(4096, 32768, 256) == 32  # 32 × 32768 = 4096 × 256
    assert flce.default_chunk(8192, 128256, 4096) == 512  # ⌈261.6⌉ → the next power of two
    assert flce.default_chunk(10, 100000, 8) == 1
    assert flce.default_chunk(5, 10, 64) == 8  # never past the next power of two above T


def test_never_allocates_a_t_by_v_tensor():
    """T×V = 1M numbers; the fused call's biggest allocation is a chunk's logits or W̄, and its peak is O(T·d + V·d + chunk·V)."""
    n_tokens, vocab, dim = 512, 2048, 16
    h, W, target = make(n_tokens, vocab, dim, torch.float32, seed=6, ignored=[5])
    chunk = flce.default_chunk(n_tokens, vocab, dim)  # 4 rows
    leaves = [t.detach().requires_grad_() for t in (h, W)]
    with AllocationRecorder(ignore=leaves) as rec, PeakMemory() as mem:
        loss = fused_linear_cross_entropy(*leaves, target)
        grads = torch.autograd.grad(loss, leaves)
    assert rec.offenders(min_numel=n_tokens * vocab // 4) == [], rec.summary()
    assert rec.largest_numel <= max(chunk * vocab, vocab * dim, n_tokens * dim), rec.summary()
    f32 = 4
    gradients = (n_tokens * dim + vocab * dim) * f32  # h̄ and W̄ must exist: the tracker saw them
    assert gradients <= mem.peak <= 2 * gradients + chunk * vocab * f32 + 64 * 1024, mem.peak
    # The same tracker on the unfused expression sees the logits, and their gradient beside them.
    ref_leaves = [t.detach().requires_grad_() for t in (h, W)]
    with PeakMemory() as ref_mem:
        ref = F.cross_entropy(ref_leaves[0] @ ref_leaves[1].T, target)
        ref_grads = torch.autograd.grad(ref, ref_leaves)
    assert ref_mem.peak >= 2 * n_tokens * vocab * f32 >= 10 * mem.peak, (ref_mem.peak, mem.peak)
    torch.testing.assert_close((loss, *grads), (ref, *ref_grads), rtol=2e-5, atol=2e-5)


def _raises(error, match, h=None, W=None, target=None, **kwargs):
    good_h, good_W, good_target = make(4, 6, 3, torch.float32)
    with pytest.raises(error, match=match):
        fused_linear_cross_entropy(good_h if h is None else h, good_W if W is None else W,
                                   good_target if target is None else target, **kwargs)


@pytest.mark.parametrize("kind, match, args", [
    (ValueError, r"h must be 2-D \(tokens, features\)", {"h": torch.randn(2, 2, 3)}),
    (ValueError, r"W must be 2-D \(vocabulary, features\)", {"W": torch.randn(18)}),
    (TypeError, "h must be a torch.Tensor, got list", {"h": [[1.0, 2.0, 3.0]] * 4}),
    (ValueError, r"h has 3 features per token but W has 5", {"W": torch.randn(6, 5)}),
    (ValueError, "W has 0 rows", {"W": torch.randn(0, 3)}),
    (TypeError, "W has dtype float64 but h has float32", {"W": torch.randn(6, 3, dtype=torch.float64)}),
    (TypeError, "h has dtype int64", {"h": torch.ones(4, 3, dtype=torch.int64)}),
    (TypeError, "target must be an int64 tensor of class indices, got torch.int32",
     {"target": torch.zeros(4, dtype=torch.int32)}),
    (ValueError, r"target has shape \(5,\) but h has 4 tokens", {"target": torch.zeros(5, dtype=torch.int64)}),
    (ValueError, r"target holds 6, outside \[0, 6\) \(W's rows\) and not ignore_index=-100",
     {"target": torch.tensor([0, 6, 1, -100])}),
    (ValueError, r"target holds -3, outside", {"target": torch.tensor([0, -3, 1, 2])}),
    (ValueError, "W is on meta but h is on (cpu|cuda)", {"W": torch.empty(6, 3, device="meta")}),
    (ValueError, "target is on meta but h is on (cpu|cuda)", {"target": torch.zeros(4, dtype=torch.int64, device="meta")}),
    (ValueError, r"chunk must be a positive int .* got 0", {"chunk": 0}),
    (ValueError, r"chunk must be a positive int .* got 2.5", {"chunk": 2.5}),
    (TypeError, "ignore_index must be an int, got float", {"ignore_index": -100.0}),
])
def test_bad_inputs_get_messages_naming_the_argument(kind, match, args):
    _raises(kind, match, **args)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="half precision needs CUDA (the interpreter mishandles bfloat16)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_against_float32_on_the_gpu(dtype):
    """Logits and their gradient in half precision, statistics and W̄'s sum across chunks in float32."""
    h, W, target = make(300, 5000, 64, torch.float32, seed=7, ignored=[3])
    h, W = h.to(dtype).float(), W.to(dtype).float()  # the same numbers in both runs
    (_, _, _), (ref_loss, ref_dh, ref_dW) = fused_and_reference(h, W, target, chunk=64)
    (loss, dh, dW), _ = fused_and_reference(h.to(dtype), W.to(dtype), target, chunk=64)
    assert loss.dtype == dh.dtype == dW.dtype == dtype
    relative = lambda a, b: (torch.linalg.vector_norm(a.float() - b) / torch.linalg.vector_norm(b)).item()  # noqa: E731
    assert relative(loss, ref_loss) < 1e-2 and relative(dh, ref_dh) < 2e-2 and relative(dW, ref_dW) < 2e-2


# ---- The options a trainer uses: bias, reduction, ce_weight, label_smoothing, z-loss, softcap, return_z_loss ----

# A pairwise set over (bias, ce_weight, label smoothing, z-loss, softcap, float64) × reduction: every pair of values of
# any two factors appears in some row (rows a, ā, b, b̄, … with the six factors' columns coded 000, 001, 010, 100,
# 111, 011). Chunks that leave a remainder, one chunk, and one row per chunk.
PAIRWISE = [
    # reduction, bias, ce_weight, label_smoothing, lse_square_scale, softcap, dtype, (T, V, d, chunk)
    ("mean", False, False, 0.0, 0.0, None, torch.float32, (37, 53, 19, 5)),
    ("mean", True, True, 0.1, 1e-3, 5.0, torch.float64, (37, 53, 19, 5)),
    ("sum", False, False, 0.0, 1e-2, 30.0, torch.float32, (13, 9000, 5, 4)),
    ("sum", True, True, 0.2, 0.0, None, torch.float64, (13, 9000, 5, 4)),
    ("none", False, False, 0.3, 0.0, 3.0, torch.float64, (20, 301, 8, None)),
    ("none", True, True, 0.0, 1e-4, None, torch.float32, (20, 301, 8, 64)),
    ("sum", False, True, 0.0, 0.0, 2.0, torch.float64, (9, 41, 41, 1)),
    ("mean", True, False, 1.0, 1e-3, None, torch.float32, (9, 41, 41, 1)),
]


def _with_options(n_tokens, vocab, dim, dtype, bias, weighted, seed=8):
    h, W, target = make(n_tokens, vocab, dim, dtype, seed=seed, ignored=[i for i in (2, 5) if i < n_tokens])
    g = torch.Generator().manual_seed(seed + 1)
    b = torch.randn(vocab, generator=g, dtype=dtype).to(DEVICE) if bias else None
    w = (torch.rand(vocab, generator=g, dtype=dtype) + 0.1).to(DEVICE) if weighted else None
    return h, W, b, target, w, g


def _reference_lm_head(h, W, b, target, reduction, ce_weight, **opts):
    logits = h @ W.T if b is None else F.linear(h, W, b)
    return reference_with_options(logits, target, reduction, weight=ce_weight, **opts)


@pytest.mark.parametrize("reduction, bias, weighted, eps, z_scale, softcap, dtype, sizes", PAIRWISE)
def test_options_pairwise_match_torch(reduction, bias, weighted, eps, z_scale, softcap, dtype, sizes):
    n_tokens, vocab, dim, chunk = sizes
    h, W, b, target, w, g = _with_options(n_tokens, vocab, dim, dtype, bias, weighted)
    opts = dict(label_smoothing=eps, lse_square_scale=z_scale, softcap=softcap)
    leaves = [t.detach().clone().requires_grad_() for t in (h, W, b) if t is not None]
    ref_leaves = [t.detach().clone().requires_grad_() for t in (h, W, b) if t is not None]
    loss, z_loss = fused_linear_cross_entropy(leaves[0], leaves[1], target, bias=leaves[2] if bias else None,
                                              reduction=reduction, ce_weight=w, return_z_loss=True, chunk=chunk, **opts)
    ref, ref_z = _reference_lm_head(ref_leaves[0], ref_leaves[1], ref_leaves[2] if bias else None, target, reduction,
                                    w, **opts)
    tol = TOL[dtype] * 10
    assert loss.dtype == z_loss.dtype == dtype and loss.shape == ref.shape and z_loss.shape == ref_z.shape
    torch.testing.assert_close((loss, z_loss), (ref, ref_z), rtol=tol, atol=tol)
    # Both outputs carry a gradient (the backward sweeps the chunks again), then the loss alone (scaled in the
    # backward for 'mean' and 'sum').
    up, up_z = (torch.randn(ref.shape, generator=g, dtype=dtype).to(DEVICE) for _ in range(2))
    got = torch.autograd.grad((loss, z_loss), leaves, (up, up_z), retain_graph=True)
    want = torch.autograd.grad((ref, ref_z), ref_leaves, (up, up_z), retain_graph=True)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    torch.testing.assert_close(torch.autograd.grad(loss, leaves, up), torch.autograd.grad(ref, ref_leaves, up),
                               rtol=tol, atol=tol)


def test_gradcheck_with_every_option_float64():
    h, W, b, target, w, _ = _with_options(7, 5, 3, torch.float64, True, True, seed=9)
    leaves = [t.requires_grad_() for t in (h, W, b)]
    opts = dict(ce_weight=w, label_smoothing=0.2, lse_square_scale=0.05, softcap=2.0, return_z_loss=True, chunk=3)
    for reduction in ("mean", "none"):
        assert torch.autograd.gradcheck(
            lambda h, W, b: fused_linear_cross_entropy(h, W, target, bias=b, reduction=reduction, **opts), leaves,
            fast_mode=True)


def test_none_and_z_loss_gradients_never_allocate_a_t_by_v_tensor():
    """'none' and a used z-loss output sweep the chunks again in the backward: chunk × V at a time, never T × V."""
    n_tokens, vocab, dim = 128, 512, 8
    h, W, b, target, _, _ = _with_options(n_tokens, vocab, dim, torch.float32, True, False, seed=10)
    leaves = [t.detach().requires_grad_() for t in (h, W, b)]
    with AllocationRecorder(ignore=leaves) as rec:
        loss, z_loss = fused_linear_cross_entropy(*leaves[:2], target, bias=leaves[2], reduction="none",
                                                  lse_square_scale=1e-3, return_z_loss=True, chunk=16)
        torch.autograd.grad((loss, z_loss), leaves, (torch.ones_like(loss), torch.ones_like(z_loss)))
    assert rec.offenders(min_numel=n_tokens * vocab // 4) == [], rec.summary()


def test_autocast_float16_matmuls_and_a_float32_loss():
    """The issue's crash: under autocast the chunk's logits came out in float16 and torch.mm(..., out=) refused the
    float32 h̄. Now h, W and bias are cast as F.linear casts them, and the loss comes back in float32."""
    h, W, b, target, _, _ = _with_options(24, 300, 16, torch.float32, True, False, seed=11)
    leaves = [t.detach().clone().requires_grad_() for t in (h, W, b)]
    ref_leaves = [t.detach().clone().requires_grad_() for t in (h, W, b)]
    device_type = "cuda" if DEVICE.type == "cuda" else "cpu"
    with torch.autocast(device_type, dtype=torch.float16):
        loss = fused_linear_cross_entropy(*leaves[:2], target, bias=leaves[2], chunk=5)
        ref = F.cross_entropy(F.linear(*ref_leaves), target)
    assert loss.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=2e-3, atol=2e-3)
    grads = torch.autograd.grad(loss, leaves)
    ref_grads = torch.autograd.grad(ref, ref_leaves)
    assert [t.dtype for t in grads] == [torch.float32] * 3
    for got, want in zip(grads, ref_grads):
        assert (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item() < 2e-3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 autocast needs CUDA (the interpreter mishandles bfloat16)")
def test_autocast_bfloat16_on_the_gpu():
    h, W, b, target, _, _ = _with_options(300, 5000, 64, torch.float32, True, False, seed=12)
    leaves = [t.detach().clone().requires_grad_() for t in (h, W, b)]
    ref_leaves = [t.detach().clone().requires_grad_() for t in (h, W, b)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = fused_linear_cross_entropy(*leaves[:2], target, bias=leaves[2], chunk=64, reduction="sum")
        ref = F.cross_entropy(F.linear(*ref_leaves).float(), target, reduction="sum")
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=1e-2, atol=1e-2)
    for got, want in zip(torch.autograd.grad(loss, leaves), torch.autograd.grad(ref, ref_leaves)):
        assert got.dtype == torch.float32
        assert (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item() < 2e-2


@pytest.mark.parametrize("kind, match, args", [
    (ValueError, r"bias must have shape \(6,\), one per row of W; got \(5,\)", {"bias": torch.randn(5)}),
    (TypeError, "bias has dtype float64 but h has float32", {"bias": torch.randn(6, dtype=torch.float64)}),
    (TypeError, "bias must be a torch.Tensor", {"bias": [0.0] * 6}),
    (ValueError, "reduction must be 'mean', 'sum' or 'none', got 'avg'", {"reduction": "avg"}),
    (ValueError, r"ce_weight must have shape \(6,\), one weight per class", {"ce_weight": torch.ones(3)}),
    (TypeError, "ce_weight must be a floating tensor", {"ce_weight": torch.ones(6, dtype=torch.int64)}),
    (ValueError, "ce_weight is on meta but h is on (cpu|cuda)", {"ce_weight": torch.ones(6, device="meta")}),
    (ValueError, r"label_smoothing must be \[0, 1\]", {"label_smoothing": 2.0}),
    (ValueError, "lse_square_scale must be at least 0", {"lse_square_scale": -1.0}),
    (ValueError, "softcap must be a positive number", {"softcap": 0.0}),
])
def test_bad_options_get_messages_naming_the_argument(kind, match, args):
    _raises(kind, match, **args)
