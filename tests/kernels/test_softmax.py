"""kernels.softmax against torch.softmax: values and gradients, on the CPU interpreter or a GPU."""

import importlib

import pytest
import torch

import course
from kernels import softmax

# The package exports the function under the module's name; reach the module itself.
softmax_module = importlib.import_module("kernels.softmax")

DEVICE = course.DEVICE
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def assert_close_verbose(got, expected, tol, what):
    err = (got - expected).abs()
    bound = tol * (1 + expected.abs())
    if bool((err > bound).any()):
        idx = tuple(int(i) for i in torch.nonzero(err > bound)[0])
        raise AssertionError(f"{what}: first mismatch at {idx}: expected {expected[idx].item():.6g}, got {got[idx].item():.6g}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 781),  # batch 1, odd row
        (7, 1823),  # prime batch, not a power of two
        (2, 3, 5),  # 3-D input, tiny rows
        (7, 1),  # rows of one element: y = 1, x̄ = 0
        (3, 12000),  # longer than one block: the online max/sum path
    ],
)
def test_forward_and_backward_match_torch(shape, dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g, dtype=dtype) * 3).to(DEVICE).requires_grad_()
    dy = torch.randn(shape, generator=g, dtype=dtype).to(DEVICE)
    y = softmax(x)
    (dx,) = torch.autograd.grad(y, x, dy)
    xr = x.detach().clone().requires_grad_()
    yr = torch.softmax(xr, dim=-1)
    (dxr,) = torch.autograd.grad(yr, xr, dy)
    assert y.shape == x.shape and dx.shape == x.shape
    assert_close_verbose(y, yr, TOL[dtype], "y")
    assert_close_verbose(dx, dxr, TOL[dtype], "dx")


def test_large_logits_do_not_overflow():
    x = torch.tensor([[1000.0, 1001.0, 999.0]], dtype=torch.float32, device=DEVICE)
    assert torch.allclose(softmax(x), torch.softmax(x, -1))


@pytest.mark.parametrize("n", [5, 37])
def test_gradcheck_float64_single_block_and_looped(n, monkeypatch):
    if n == 37:
        monkeypatch.setattr(softmax_module, "MAX_FUSED_BLOCK", 16)  # force the multi-block path
    x = torch.randn(3, n, dtype=torch.float64, device=DEVICE, requires_grad=True)
    assert torch.autograd.gradcheck(softmax, (x,), fast_mode=True)


def test_non_contiguous_input():
    x = torch.randn(9, 6, dtype=torch.float64, device=DEVICE).T  # rows not contiguous
    assert torch.allclose(softmax(x), torch.softmax(x, -1))


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.zeros(3, 4, dtype=torch.int64), "dtype int64"),
        (torch.zeros(3, 0), "empty last dimension"),
        (torch.tensor(1.0), "at least one dimension"),
    ],
)
def test_bad_inputs_get_clear_messages(bad, message):
    with pytest.raises((TypeError, ValueError), match=message):
        softmax(bad.to(DEVICE))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="half precision needs CUDA (the interpreter mishandles bfloat16)")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_on_gpu(dtype):
    x = torch.randn(64, 4099, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    y = softmax(x)
    (dx,) = torch.autograd.grad(y, x, dy)
    xr = x.detach().float().requires_grad_()
    yr = torch.softmax(xr, -1)
    (dxr,) = torch.autograd.grad(yr, xr, dy.float())
    assert torch.allclose(y.float(), yr, atol=2e-2, rtol=2e-2)
    assert torch.allclose(dx.float(), dxr, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("device, dtype", [
    pytest.param("cpu", torch.float16, id="cpu-float16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16",
                 marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="autocast on a GPU needs CUDA")),
])
def test_autocast_follows_torch(device, dtype):
    """Under autocast softmax returns what torch.softmax returns there (float32 on a GPU, the input's dtype on
    the CPU), with its values; the gradient reaches the float32 leaf."""
    if device != torch.device(DEVICE).type:
        pytest.skip(f"the kernels run on {DEVICE} here")
    g = torch.Generator().manual_seed(9)
    x = (3 * torch.randn(9, 1151, generator=g)).to(device).requires_grad_()
    dy = torch.randn(9, 1151, generator=g).to(device)
    with torch.autocast(device, dtype=dtype):
        h = x.to(dtype)  # an activation in the autocast dtype, as a matmul under autocast leaves it
        y, yr = softmax(h), torch.softmax(h, -1)
    assert y.dtype == yr.dtype
    torch.testing.assert_close(y, yr, rtol=1e-2, atol=1e-3)
    (got,), (want,) = torch.autograd.grad(y, x, dy.to(y.dtype)), torch.autograd.grad(yr, x, dy.to(y.dtype))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-3)


def test_autocast_rule_off_the_cpu(monkeypatch):
    """Without a GPU, the GPU rule on meta tensors: with autocast on, float16 and bfloat16 become float32,
    float64, integers and None pass unchanged; on the CPU nothing is cast (its autocast lists leave these ops)."""
    from kernels._common import autocast_to_float32

    monkeypatch.setattr(torch, "is_autocast_enabled", lambda device_type=None: True)
    half, bf16, f64, ids = (torch.empty(2, device="meta", dtype=d) for d in
                            (torch.float16, torch.bfloat16, torch.float64, torch.int64))
    cast = autocast_to_float32(half, None, bf16, f64, ids)
    assert [t.dtype if t is not None else None for t in cast] == [torch.float32, None, torch.float32, torch.float64, torch.int64]
    cpu = torch.empty(2, dtype=torch.float16)
    assert autocast_to_float32(cpu)[0] is cpu
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda device_type=None: False)
    assert autocast_to_float32(half)[0] is half
