"""kernels.linear against PyTorch: y = x w + b and its three gradients, both w̄ strategies, the argument errors."""

import importlib

import pytest
import torch
import torch.nn.functional as F

import course
from kernels import linear
from kernels._common import LaunchTarget

linear_module = importlib.import_module("kernels.linear")  # the module; kernels exports the function

DEVICE = course.DEVICE
TOL = {torch.float16: 2e-3, torch.float32: 2e-5, torch.float64: 1e-12}
# (x's shape, N): no side divides the interpreter's 32-wide tiles; 75 rows make three slices of w̄'s
# reduction, the last one short; 5 rows make one; 80 rows of a 70 × 40 w̄ make two slices of two
# 32-row steps each (the last slice one step).
CASES = [((75, 20), 37), ((3, 25, 37), 19), ((5, 33), 70), ((2, 40, 70), 40)]
STRATEGIES = ["splitk", "atomic"]


def make(x_shape, n, dtype, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = x_shape[-1]
    x = torch.randn(x_shape, generator=g, dtype=dtype).to(DEVICE).requires_grad_()
    w = (torch.randn(k, n, generator=g, dtype=dtype) / k**0.5).to(DEVICE).requires_grad_()
    b = torch.randn(n, generator=g, dtype=dtype).to(DEVICE).requires_grad_() if bias else None
    dy = torch.randn(*x_shape[:-1], n, generator=g, dtype=dtype).to(DEVICE)
    return x, w, b, dy


def grads(y, inputs, dy):
    return torch.autograd.grad(y, [t for t in inputs if t is not None], dy)


def reference(x, w, b, dy):
    """y and the gradients by PyTorch in float64, whatever the inputs' dtype."""
    leaves = [None if t is None else t.detach().double().requires_grad_() for t in (x, w, b)]
    y = F.linear(leaves[0], leaves[1].t(), leaves[2])
    return y, grads(y, leaves, dy.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("x_shape, n", CASES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(x_shape, n, dtype, strategy, bias):
    x, w, b, dy = make(x_shape, n, dtype, bias)
    y = linear(x, w, b, dw_strategy=strategy)
    assert y.shape == (*x_shape[:-1], n) and y.dtype == dtype
    y_ref, grads_ref = reference(x, w, b, dy)
    torch.testing.assert_close(y, y_ref.to(dtype), rtol=TOL[dtype], atol=TOL[dtype])
    for got, ref, name in zip(grads(y, (x, w, b), dy), grads_ref, ("dx", "dw", "db")):
        # w̄ and b̄ sum over every row: the tolerance grows with their number.
        tol = TOL[dtype] * (1 if name == "dx" else (x.numel() // x_shape[-1]) ** 0.5)
        torch.testing.assert_close(got, ref.to(dtype), rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_float16_accumulates_in_float32(strategy):
    x, w, b, dy = make((75, 20), 37, torch.float16)
    y = linear(x, w, b, dw_strategy=strategy)
    y_ref, grads_ref = reference(x, w, b, dy)
    # Rounded once from float32 sums: within a few float16 ulps of the float64 answer.
    torch.testing.assert_close(y.double(), y_ref, rtol=TOL[torch.float16], atol=TOL[torch.float16])
    for got, ref in zip(grads(y, (x, w, b), dy), grads_ref):
        assert got.dtype == torch.float16
        torch.testing.assert_close(got.double(), ref, rtol=4e-3, atol=4e-3 * ref.abs().max().item())


def test_any_strides():
    """w given as the transpose of an (N, K) weight, x a column slice of a transpose: no copy is needed and none is wrong."""
    g = torch.Generator().manual_seed(3)
    x_big = torch.randn(50, 40, generator=g, dtype=torch.float64).to(DEVICE).t()
    x = x_big[:, 5:38].requires_grad_()  # (40, 33), strides (1, 40)
    w = torch.randn(21, 33, generator=g, dtype=torch.float64).to(DEVICE).t().requires_grad_()  # (33, 21), strides (1, 33)
    dy = torch.randn(40, 21, generator=g, dtype=torch.float64).to(DEVICE)
    y = linear(x, w)
    y_ref, grads_ref = reference(x, w, None, dy)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    for got, ref in zip(grads(y, (x, w), dy), grads_ref):
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not linear_module.interpreted(), reason="the interpreter's rule")
def test_the_cases_split_w_bar_into_several_slices_or_one():
    """What the split-K tests above rely on, in the interpreter's 32-row steps."""
    block_m = linear_module._config(torch.float32, dw=True)[0]
    assert linear_module.splits(75, 2, block_m) == (3, 32)
    assert linear_module.splits(5, 3, block_m) == (1, 32)
    assert linear_module.splits(80, 3 * 2, block_m) == (2, 64)


def test_on_an_h100_only_a_layer_with_few_tiles_splits(monkeypatch):
    """132 SMs: w̄ of a 4096² layer has 1024 tiles of 128² and needs no split; a 256² layer has 4 and
    splits to fill the GPU, never into slices of fewer than MIN_ROWS_PER_SPLIT rows."""
    monkeypatch.setattr(linear_module, "interpreted", lambda: False)
    monkeypatch.setattr(linear_module, "launch_target", lambda: LaunchTarget("cuda", 90, 32, 132, 232448))
    assert linear_module.splits(8192, 32 * 32, 128) == (1, 8192)
    assert linear_module.splits(65536, 2 * 2, 128) == (64, 1024)  # 66 wanted, 1024-row slices make 64
    assert linear_module.splits(300, 2 * 2, 128) == (2, 256)  # 300 rows: at most two slices of ≥ 256 requested


def test_every_target_has_tiles_for_every_dtype():
    # _config looks a launch's tiles up by target (kernels._common.target_name) and dtype class: none may be missing.
    from kernels._target import GPUS

    for target in GPUS:
        for kind in ("16-bit", "fp32", "fp64"):
            assert len(linear_module._GPU_CONFIGS[(target, kind)]) == 2, (target, kind)


def test_only_the_gradients_asked_for_are_computed(monkeypatch):
    x, w, b, dy = make((75, 20), 37, torch.float32)
    calls = []
    monkeypatch.setattr(linear_module, "grad_weight", lambda *a, **k: calls.append("w̄") or (None, None))
    (dx,) = torch.autograd.grad(linear(x, w.detach(), b.detach()), (x,), dy)
    assert calls == [] and dx.shape == x.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 runs on a GPU only")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bfloat16_on_a_gpu(strategy):
    x, w, b, dy = make((1000, 384), 320, torch.bfloat16)
    y = linear(x, w, b, dw_strategy=strategy)
    y_ref, grads_ref = reference(x, w, b, dy)
    torch.testing.assert_close(y.double(), y_ref, rtol=2e-2, atol=2e-2)
    for got, ref in zip(grads(y, (x, w, b), dy), grads_ref):
        torch.testing.assert_close(got.double(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())


def test_split_k_w_bar_is_the_same_bits_every_run():
    x, w, b, dy = make((75, 20), 37, torch.float32)
    first = grads(linear(x, w, b), (x, w, b), dy)
    for _ in range(2):
        again = grads(linear(x, w, b), (x, w, b), dy)
        assert all(torch.equal(a, c) for a, c in zip(first, again))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gradcheck_float64(strategy):
    x, w, b, _ = make((2, 3, 5), 4, torch.float64)
    assert torch.autograd.gradcheck(lambda x, w, b: linear(x, w, b, dw_strategy=strategy), (x, w, b))


def test_no_rows():
    x, w, b, _ = make((0, 6), 5, torch.float32)
    y = linear(x, w, b)
    assert y.shape == (0, 5)
    dx, dw, db = torch.autograd.grad(y.sum(), (x, w, b))
    assert dx.shape == (0, 6) and not dw.any() and not db.any()


def test_autocast_casts_like_torch_linear():
    """Under autocast the op computes in the autocast dtype, as F.linear does; gradients reach the float32 leaves."""
    x, w, b, dy = make((75, 20), 37, torch.float32)
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.float16):
        y = linear(x, w, b)
        y_torch = F.linear(x, w.t(), b)
    assert y.dtype == y_torch.dtype == torch.float16
    torch.testing.assert_close(y, y_torch, rtol=2e-3, atol=2e-3)
    got = grads(y, (x, w, b), dy.half())
    want = grads(y_torch, (x, w, b), dy.half())
    for a, c in zip(got, want):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, c, rtol=1e-2, atol=1e-2)


def test_autocast_leaves_float64_alone_as_torch_linear_does():
    x, w, b, _ = make((9, 20), 17, torch.float64)
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.float16):
        y, y_torch = linear(x, w, b), F.linear(x, w.t(), b)
    assert y.dtype == y_torch.dtype == torch.float64
    torch.testing.assert_close(y, y_torch)


@pytest.mark.parametrize("make_args, error, message", [
    (lambda x, w, b: (x[:, :19], w, b), ValueError, "x's last dimension must equal w's first (K = 20"),
    (lambda x, w, b: (x, w[0], b), ValueError, "w must be 2-D"),
    (lambda x, w, b: (x, w, b[:36]), ValueError, "bias must have shape (37,)"),
    (lambda x, w, b: (x, w[:, :0], None), ValueError, "at least one input and one output feature"),
    (lambda x, w, b: (x, w.double(), b), TypeError, "w has dtype float64 but x has float32"),
    (lambda x, w, b: (x, w, b.half()), TypeError, "bias has dtype float16 but x has float32"),
    (lambda x, w, b: (x.bfloat16(), w.bfloat16(), None), TypeError, "x has dtype bfloat16"),
    (lambda x, w, b: (x.tolist(), w, b), TypeError, "x must be a torch.Tensor, got list"),
])
def test_bad_arguments_are_named(make_args, error, message):
    x, w, b, _ = make((6, 20), 37, torch.float32)
    if message.startswith("x has dtype bfloat16") and torch.device(DEVICE).type == "cuda":
        pytest.skip("bfloat16 runs on a GPU")
    with pytest.raises(error) as caught:
        linear(*make_args(x.detach(), w.detach(), b.detach()))
    assert message in str(caught.value)


def test_a_bad_dw_strategy_is_named():
    x, w, b, _ = make((6, 20), 37, torch.float32)
    with pytest.raises(ValueError, match="dw_strategy must be one of 'splitk', 'atomic'; got 'sorted'"):
        linear(x, w, b, dw_strategy="sorted")
