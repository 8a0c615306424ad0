"""kernels.swiglu against F.silu(a) * b: values and gradients, on the CPU interpreter or a GPU."""

import importlib

import pytest
import torch
import torch.nn.functional as F

import course
from kernels import swiglu

swiglu_module = importlib.import_module("kernels.swiglu")

DEVICE = course.DEVICE
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def _pair(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    a, b, dh = ((3 * torch.randn(shape, generator=g, dtype=dtype)).to(DEVICE) for _ in range(3))
    return a, b, dh


def _both(fn, a, b, dh):
    """fn(a, b) and its gradients with respect to a and b, on fresh leaves."""
    a, b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    h = fn(a, b)
    return (h, *torch.autograd.grad(h, (a, b), dh))


def _reference(a, b):
    return F.silu(a) * b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [
    (3, 5, 37),  # 3-D, F a prime
    (2, 3, 2, 1031),  # 4-D, F past one GPU block and not a multiple of any
    (7, 1),  # F = 1: every lane but one masked
])
def test_forward_and_backward_match_torch(shape, dtype):
    a, b, dh = _pair(shape, dtype, 0)
    got, want = _both(swiglu, a, b, dh), _both(_reference, a, b, dh)
    for name, g, w in zip(("h", "da", "db"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, rtol=TOL[dtype], atol=TOL[dtype], msg=lambda m, name=name: f"{name}: {m}")


def test_rows_longer_than_a_block_are_split_across_programs(monkeypatch):
    """Blocks of 16 lanes over F = 37: three programs a row, the last one masked past F."""
    monkeypatch.setattr(swiglu_module, "INTERPRETER_BLOCK", 16)
    monkeypatch.setattr(swiglu_module, "GPU_BLOCK", 16)
    a, b, dh = _pair((4, 37), torch.float64, 1)
    for g, w in zip(_both(swiglu, a, b, dh), _both(_reference, a, b, dh)):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_gradcheck_float64():
    a, b, _ = _pair((3, 19), torch.float64, 2)
    assert torch.autograd.gradcheck(swiglu, (a.requires_grad_(), b.requires_grad_()))


def test_strided_inputs():
    """A transposed a, and b a slice of a wider tensor (its rows 2F apart, as a fused gate-up projection leaves them)."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(29, 6, dtype=torch.float64, generator=g).to(DEVICE).t()
    b = torch.randn(6, 58, dtype=torch.float64, generator=g).to(DEVICE)[:, 29:]
    dh = torch.randn(6, 29, dtype=torch.float64, generator=g).to(DEVICE)
    for got, want in zip(_both(swiglu, a, b, dh), _both(_reference, a, b, dh)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")  # the interpreter's numpy, on purpose
def test_large_gates_stay_finite():
    """σ's e^(−a) overflows for a ≪ 0: silu(a) → 0 and its gradient → 0, not NaN."""
    a = torch.tensor([[-1000.0, -80.0, 0.0, 80.0, 1000.0]], device=DEVICE)
    b, dh = torch.ones_like(a), torch.ones_like(a)
    for got, want in zip(_both(swiglu, a, b, dh), _both(_reference, a, b, dh)):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device, dtype", [
    pytest.param("cpu", torch.float16, id="cpu-float16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16",
                 marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 runs on a GPU")),
])
def test_autocast_and_half_inputs_follow_torch(device, dtype):
    """Under autocast swiglu returns what F.silu(a) * b returns (autocast casts neither): half for half inputs, the
    promoted dtype for a half a and a float32 b; values within half precision of a float64 reference."""
    if device != torch.device(DEVICE).type:
        pytest.skip(f"the kernels run on {DEVICE} here")
    a, b, dh = _pair((5, 301), torch.float64, 4)
    exact = _both(_reference, a, b, dh)
    with torch.autocast(device, dtype=dtype):
        for b_dtype in (dtype, torch.float32):
            got = _both(swiglu, a.to(dtype), b.to(b_dtype), dh.to(b_dtype))
            want = _both(_reference, a.to(dtype), b.to(b_dtype), dh.to(b_dtype))
            assert [t.dtype for t in got] == [t.dtype for t in want], b_dtype
            for g, e in zip(got, exact):
                torch.testing.assert_close(g.double(), e, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("a, b, error, message", [
    ((3, 4), (3, 5), ValueError, "b has shape (3, 5) but must match a's (3, 4)"),
    ((3, 4), (4, 3), ValueError, "b has shape (4, 3) but must match a's (3, 4)"),
    ((3, 0), (3, 0), ValueError, "a has shape (3, 0); swiglu needs a last dimension F ≥ 1"),
    ((), (), ValueError, "a has shape (); swiglu needs a last dimension F ≥ 1"),
])
def test_shapes_that_do_not_fit_are_refused_naming_the_argument(a, b, error, message):
    with pytest.raises(error) as info:
        swiglu(torch.zeros(a, device=DEVICE), torch.zeros(b, device=DEVICE))
    assert message in str(info.value)


@pytest.mark.parametrize("which", ["a", "b"])
def test_integer_inputs_are_refused_naming_the_argument(which):
    args = {"a": torch.zeros(2, 3, device=DEVICE), "b": torch.zeros(2, 3, device=DEVICE)}
    args[which] = torch.zeros(2, 3, dtype=torch.int64, device=DEVICE)
    with pytest.raises(TypeError, match=f"^{which} has dtype int64"):
        swiglu(**args)


HALF = [pytest.param(torch.float16, id="float16"),
        pytest.param(torch.bfloat16, id="bfloat16",
                     marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 runs on a GPU"))]


@pytest.mark.parametrize("dtype", HALF)
def test_half_inputs_within_half_precision_of_float64(dtype):
    """h, ā and b̄ in the half dtype, within notebook 08's rule for no reduction, tol(dtype, 1) = 2·u(dtype) +
    2·u(float32), of float64 on the same rounded inputs."""
    from kernels.precision import backward_tolerance, relative_error

    a, b, dh = (t.to(dtype) for t in _pair((6, 517), torch.float32, 5))
    got = _both(swiglu, a, b, dh)
    want = _both(_reference, *(t.double() for t in (a, b, dh)))
    for name, g, w in zip(("h", "da", "db"), got, want):
        assert g.dtype == dtype, name
        assert relative_error(g, w) <= backward_tolerance(dtype, 1), (name, relative_error(g, w))
