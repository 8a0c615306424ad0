"""kernels.rope against a plain PyTorch RoPE, both layouts: values and gradients, on the CPU interpreter or a GPU."""

import importlib

import pytest
import torch

import course
from kernels import rope

rope_module = importlib.import_module("kernels.rope")

DEVICE = course.DEVICE
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def reference(x, cos, sin, interleaved=False):
    """RoPE in PyTorch ops: x (..., T, H, D); pairs (2i, 2i + 1) when interleaved, else (i, i + D/2)."""
    t = x.shape[-3]
    c, s = cos[:t, None, :], sin[:t, None, :]  # broadcast over heads
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else x.chunk(2, dim=-1)
    y1, y2 = x1 * c - x2 * s, x2 * c + x1 * s
    return torch.stack((y1, y2), dim=-1).flatten(-2) if interleaved else torch.cat((y1, y2), dim=-1)


def _inputs(shape, dtype, seed, t_max=None):
    """x and ȳ of ``shape`` (..., T, H, D), and cos, sin of t_max (default T) positions × D/2 random angles."""
    g = torch.Generator().manual_seed(seed)
    x, dy = (torch.randn(shape, generator=g, dtype=dtype).to(DEVICE) for _ in range(2))
    theta = 4 * torch.randn(t_max or shape[-3], shape[-1] // 2, generator=g, dtype=dtype).to(DEVICE)
    return x, dy, theta.cos(), theta.sin()


def _both(fn, x, dy):
    x = x.detach().clone().requires_grad_()
    y = fn(x)
    return y, torch.autograd.grad(y, x, dy)[0]


LAYOUTS = [pytest.param(False, id="half-split"), pytest.param(True, id="interleaved")]


@pytest.mark.parametrize("interleaved", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [
    (3, 7, 5, 6),  # (B, T, H, D): D/2 = 3, H and T odd
    (11, 3, 18),  # (T, H, D)
    (2, 2, 5, 3, 10),  # two leading dims
])
def test_forward_and_backward_match_torch(shape, dtype, interleaved):
    x, dy, cos, sin = _inputs(shape, dtype, 0)
    got = _both(lambda x: rope(x, cos, sin, interleaved=interleaved), x, dy)
    want = _both(lambda x: reference(x, cos, sin, interleaved), x, dy)
    for name, g, w in zip(("y", "dx"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, rtol=TOL[dtype], atol=TOL[dtype], msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("interleaved", LAYOUTS)
def test_the_backward_is_the_forward_by_minus_theta(interleaved):
    """x̄ for a random ȳ equals rope(ȳ) with sin negated, and the two layouts differ (the test would see a swap)."""
    x, dy, cos, sin = _inputs((2, 9, 3, 8), torch.float64, 1)
    _, dx = _both(lambda x: rope(x, cos, sin, interleaved=interleaved), x, dy)
    torch.testing.assert_close(dx, reference(dy, cos, -sin, interleaved), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(dx, reference(dy, cos, -sin, not interleaved))
    assert not torch.allclose(dx, reference(dy, cos, sin, interleaved))


@pytest.mark.parametrize("interleaved", LAYOUTS)
def test_gradcheck_float64(interleaved):
    x, _, cos, sin = _inputs((1, 3, 2, 6), torch.float64, 2)  # small: each of 2·36 probes launches the kernel
    assert torch.autograd.gradcheck(lambda x: rope(x, cos, sin, interleaved=interleaved), (x.requires_grad_(),))


def test_heads_beyond_one_block_and_a_longer_table(monkeypatch):
    """Tiles of 8 elements over D/2 = 3 (blocks of 4 pairs): 2 heads a program, the last head block masked; cos and
    sin hold 20 positions of which T = 6 are used."""
    monkeypatch.setattr(rope_module, "INTERPRETER_TILE", 8)
    monkeypatch.setattr(rope_module, "GPU_TILE", 8)
    x, dy, cos, sin = _inputs((2, 6, 5, 6), torch.float64, 3, t_max=20)
    for interleaved in (False, True):
        got = _both(lambda x: rope(x, cos, sin, interleaved=interleaved), x, dy)
        want = _both(lambda x: reference(x, cos, sin, interleaved), x, dy)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_a_b_h_t_d_tensor_goes_in_transposed_with_its_strides():
    """(B, H, T, D) queries as x.transpose(1, 2): no copy needed, the result that of the contiguous tensor."""
    x, dy, cos, sin = _inputs((2, 7, 3, 8), torch.float64, 4)
    bhtd = x.transpose(1, 2).contiguous()  # stored (B, H, T, D)
    strided = bhtd.transpose(1, 2)
    assert not strided.is_contiguous()
    for g, w in zip(_both(lambda x: rope(x, cos, sin), strided, dy.transpose(1, 2).contiguous().transpose(1, 2)),
                    _both(lambda x: reference(x, cos, sin), x, dy)):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device, dtype", [
    pytest.param("cpu", torch.float16, id="cpu-float16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16",
                 marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 runs on a GPU")),
])
def test_autocast_keeps_x_dtype_with_float32_angles(device, dtype):
    """Half x with float32 cos and sin, under autocast: y and x̄ in x's dtype, within half precision of float64."""
    if device != torch.device(DEVICE).type:
        pytest.skip(f"the kernels run on {DEVICE} here")
    x, dy, cos, sin = _inputs((2, 13, 3, 10), torch.float64, 5)
    exact = _both(lambda x: reference(x, cos, sin, True), x, dy)
    with torch.autocast(device, dtype=dtype):
        got = _both(lambda x: rope(x, cos.float(), sin.float(), interleaved=True), x.to(dtype), dy.to(dtype))
    for g, e in zip(got, exact):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), e, rtol=1e-2, atol=1e-2)


def test_no_gradient_reaches_cos_and_sin():
    x, dy, cos, sin = _inputs((1, 4, 2, 6), torch.float64, 6)
    cos.requires_grad_()
    y = rope(x.requires_grad_(), cos, sin)
    dx, dcos = torch.autograd.grad(y, (x, cos), dy, allow_unused=True)
    assert dcos is None and dx.shape == x.shape


@pytest.mark.parametrize("x, cos, kwargs, error, message", [
    ((4, 2, 7), (4, 3), {}, ValueError, "x's head dim D = 7; RoPE rotates pairs of features, so D must be even"),
    ((4, 2, 0), (4, 0), {}, ValueError, "x's head dim D = 0; RoPE rotates pairs of features, so D must be even and ≥ 2"),
    ((), (4, 4), {}, ValueError, "x has shape (); rope takes (..., T, H, D)"),
    ((4, 2, 8), (), {}, ValueError, "cos has shape (); it must be (T_max, D/2)"),
    ((4, 8), (4, 4), {}, ValueError, "x has shape (4, 8); rope takes (..., T, H, D)"),
    ((4, 2, 8), (3, 4), {}, ValueError, "cos has shape (3, 4); it must be (T_max, D/2) with T_max ≥ T = 4 and D/2 = 4"),
    ((4, 2, 8), (4, 8), {}, ValueError, "cos has shape (4, 8); it must be (T_max, D/2)"),
    ((4, 2, 8), (4, 4), {"interleaved": 1}, TypeError, "interleaved must be True (pairs 2i, 2i+1, GPT-J) or False"),
])
def test_arguments_that_do_not_fit_are_refused_naming_them(x, cos, kwargs, error, message):
    with pytest.raises(error) as info:
        rope(torch.zeros(x, device=DEVICE), torch.zeros(cos, device=DEVICE), torch.zeros(cos, device=DEVICE), **kwargs)
    assert message in str(info.value)


def test_sin_unlike_cos_and_integer_x_are_refused():
    with pytest.raises(ValueError, match=r"sin has shape \(5, 4\) but must match cos's \(4, 4\)"):
        rope(torch.zeros(4, 2, 8, device=DEVICE), torch.zeros(4, 4, device=DEVICE), torch.zeros(5, 4, device=DEVICE))
    with pytest.raises(TypeError, match="^x has dtype int64"):
        rope(torch.zeros(4, 2, 8, dtype=torch.int64, device=DEVICE), torch.zeros(4, 4, device=DEVICE),
             torch.zeros(4, 4, device=DEVICE))


HALF = [pytest.param(torch.float16, id="float16"),
        pytest.param(torch.bfloat16, id="bfloat16",
                     marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 runs on a GPU"))]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("interleaved", LAYOUTS)
def test_half_x_within_half_precision_of_float64(dtype, interleaved):
    """y and x̄ within notebook 08's rule for sums of two terms, tol(dtype, 2), of float64 on the same rounded x, ȳ
    and float32 cos, sin."""
    from kernels.precision import backward_tolerance, relative_error

    x, dy, cos, sin = _inputs((2, 9, 3, 12), torch.float32, 7)
    x, dy = x.to(dtype), dy.to(dtype)
    got = _both(lambda x: rope(x, cos, sin, interleaved=interleaved), x, dy)
    want = _both(lambda x: reference(x, cos.double(), sin.double(), interleaved), x.double(), dy.double())
    for name, g, w in zip(("y", "dx"), got, want):
        assert g.dtype == dtype, name
        assert relative_error(g, w) <= backward_tolerance(dtype, 2), (name, relative_error(g, w))
