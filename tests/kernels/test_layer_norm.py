"""kernels.layer_norm and kernels.rms_norm against PyTorch: values and every gradient."""

import pytest
import torch
import torch.nn.functional as F

import course
from kernels import _norm as norm_module
from kernels import layer_norm, rms_norm

DEVICE = course.DEVICE
TOL = {torch.float32: 2e-5, torch.float64: 1e-11}
SHAPES = [
    (1, 3),  # batch 1, a row shorter than any block
    (7, 1151),  # prime batch, odd N
    (2, 3, 8192),  # 3-D input, a power of two
    (5, 16384),  # the longest row one block holds
]


def rms_reference(x, w, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def grads(out, inputs, dy):
    wanted = [t for t in inputs if t is not None]
    return torch.autograd.grad(out, wanted, dy)


def leaf(t):
    return None if t is None else t.detach().clone().requires_grad_()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_torch(shape, dtype, affine):
    if shape[-1] == 16384 and dtype == torch.float32:
        pytest.skip("one dtype is enough for the longest row on the interpreter")
    g = torch.Generator().manual_seed(2)
    n = shape[-1]
    x = (torch.randn(shape, generator=g, dtype=dtype) * 2 + 0.5).to(DEVICE).requires_grad_()
    w = torch.randn(n, generator=g, dtype=dtype).to(DEVICE).requires_grad_() if affine else None
    b = torch.randn(n, generator=g, dtype=dtype).to(DEVICE).requires_grad_() if affine else None
    dy = torch.randn(shape, generator=g, dtype=dtype).to(DEVICE)
    y = layer_norm(x, w, b, 1e-5)
    xr, wr, br = leaf(x), leaf(w), leaf(b)
    yr = F.layer_norm(xr, (n,), wr, br, 1e-5)
    torch.testing.assert_close(y, yr, rtol=TOL[dtype], atol=TOL[dtype])
    for got, ref, name in zip(grads(y, (x, w, b), dy), grads(yr, (xr, wr, br), dy), ("dx", "dw", "db")):
        # w̄ and b̄ sum over every row: scale the tolerance with the number of rows.
        tol = TOL[dtype] * (1 if name == "dx" else max(1, x.numel() // n) ** 0.5)
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES[:3])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_matches_reference(shape, dtype, affine):
    g = torch.Generator().manual_seed(3)
    n = shape[-1]
    x = torch.randn(shape, generator=g, dtype=dtype).to(DEVICE).requires_grad_()
    w = torch.randn(n, generator=g, dtype=dtype).to(DEVICE).requires_grad_() if affine else None
    dy = torch.randn(shape, generator=g, dtype=dtype).to(DEVICE)
    y = rms_norm(x, w, 1e-6)
    xr, wr = leaf(x), leaf(w)
    yr = rms_reference(xr, wr, 1e-6)
    torch.testing.assert_close(y, yr, rtol=TOL[dtype], atol=TOL[dtype])
    for got, ref in zip(grads(y, (x, w), dy), grads(yr, (xr, wr), dy)):
        tol = TOL[dtype] * max(1, x.numel() // n) ** 0.5
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol)


def test_gradcheck_float64():
    x = torch.randn(6, 13, dtype=torch.float64, device=DEVICE, requires_grad=True)
    w = torch.randn(13, dtype=torch.float64, device=DEVICE, requires_grad=True)
    b = torch.randn(13, dtype=torch.float64, device=DEVICE, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: layer_norm(x, w, b), (x, w, b), fast_mode=True)
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w), (x, w), fast_mode=True)


def norm_and_reference(op, x, w, b):
    """(ours, reference) outputs of one op on fresh leaves of the same inputs."""
    xr, wr, br = leaf(x), leaf(w), leaf(b)
    if op == "layer_norm":
        return layer_norm(x, w, b, 1e-5), F.layer_norm(xr, (x.shape[-1],), wr, br, 1e-5), (xr, wr, br)
    return rms_norm(x, w, 1e-6), rms_reference(xr, wr, 1e-6), (xr, wr)


@pytest.fixture
def backward_blocks(monkeypatch):
    """Make the backward walk every row in blocks of the given width (None: the real threshold)."""

    def use(block):
        if block is not None:
            monkeypatch.setattr(norm_module, "MAX_BWD_ROW_BYTES", 0)
            monkeypatch.setattr(norm_module, "BWD_COL_BLOCK", block)

    return use


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize(
    "shape, dtype, block",
    [
        ((19, 1151), torch.float64, 256),  # 19 rows over 8 programs (3, 3, …, 1, 0 rows), ragged last block
        ((4, 64), torch.float32, 64),  # a row of exactly one block
        ((2, 9001), torch.float32, None),  # past 8192 float32 elements: the real threshold and block, ragged tail
    ],
)
def test_backward_in_blocks_matches_torch(backward_blocks, op, affine, shape, dtype, block):
    backward_blocks(block)
    launch = norm_module.backward_launch(shape[-1], dtype)
    assert not launch.whole_row and launch.block == (block or norm_module.BWD_COL_BLOCK), launch
    g = torch.Generator().manual_seed(5)
    n = shape[-1]
    x = (torch.randn(shape, generator=g, dtype=dtype) * 2 + 0.5).to(DEVICE).requires_grad_()
    w = torch.randn(n, generator=g, dtype=dtype).to(DEVICE).requires_grad_() if affine else None
    b = torch.randn(n, generator=g, dtype=dtype).to(DEVICE).requires_grad_() if affine and op == "layer_norm" else None
    dy = torch.randn(shape, generator=g, dtype=dtype).to(DEVICE)
    y, yr, ref_inputs = norm_and_reference(op, x, w, b)
    torch.testing.assert_close(y, yr, rtol=TOL[dtype], atol=TOL[dtype])
    wanted = [name for name, t in zip(("dx", "dw", "db"), (x, w, b)) if t is not None]
    for name, got, ref in zip(wanted, grads(y, (x, w, b), dy), grads(yr, ref_inputs, dy), strict=True):
        tol = TOL[dtype] * (1 if name == "dx" else max(1, x.numel() // n) ** 0.5)
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")


def test_gradcheck_float64_in_blocks(backward_blocks):
    backward_blocks(4)  # 13 columns: three full blocks and one of a single element
    x = torch.randn(6, 13, dtype=torch.float64, device=DEVICE, requires_grad=True)
    w = torch.randn(13, dtype=torch.float64, device=DEVICE, requires_grad=True)
    b = torch.randn(13, dtype=torch.float64, device=DEVICE, requires_grad=True)
    launch = norm_module.backward_launch(13, torch.float64)
    assert (launch.block, launch.whole_row) == (4, False), launch
    assert torch.autograd.gradcheck(lambda x, w, b: layer_norm(x, w, b), (x, w, b), fast_mode=True)
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w), (x, w), fast_mode=True)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("block", [None, 16])  # the whole row in one block; walked in blocks of 16
def test_row_strided_views_are_read_through_their_strides(backward_blocks, op, block):
    # Rows 40 and 48 elements apart with 37 used, not copied: a kernel that assumed rows N apart would read the wrong rows.
    backward_blocks(block)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(5, 40, generator=g, dtype=torch.float64).to(DEVICE)[:, :37].detach().requires_grad_()
    w = torch.randn(37, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_()
    b = torch.randn(37, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_() if op == "layer_norm" else None
    dy = torch.randn(5, 48, generator=g, dtype=torch.float64).to(DEVICE)[:, 3:40]
    assert x.stride(0) == 40 and dy.stride(0) == 48
    y, yr, ref_inputs = norm_and_reference(op, x, w, b)
    tol = TOL[torch.float64]
    torch.testing.assert_close(y, yr, rtol=tol, atol=tol)
    for name, got, ref in zip(("dx", "dw", "db"), grads(y, (x, w, b), dy), grads(yr, ref_inputs, dy)):
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")


def test_parameter_gradients_are_bit_reproducible():
    x = torch.randn(301, 37, dtype=torch.float32, device=DEVICE, requires_grad=True)
    w = torch.randn(37, device=DEVICE, requires_grad=True)
    b = torch.randn(37, device=DEVICE, requires_grad=True)
    dy = torch.randn_like(x)
    first = torch.autograd.grad(layer_norm(x, w, b), (w, b), dy)
    second = torch.autograd.grad(layer_norm(x, w, b), (w, b), dy)
    assert all(torch.equal(a, c) for a, c in zip(first, second))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: layer_norm(torch.randn(3, 4, device=DEVICE), torch.randn(5, device=DEVICE)), r"weight must have shape \(4,\)"),
        (lambda: layer_norm(torch.randn(3, 4, device=DEVICE), None, torch.randn(4, 1, device=DEVICE)), r"bias must have shape \(4,\)"),
        (lambda: rms_norm(torch.randn(2, 16385, device=DEVICE)), "longer than the 16384"),
        (lambda: layer_norm(torch.zeros(3, 4, dtype=torch.int32, device=DEVICE)), "dtype int32"),
    ],
)
def test_bad_inputs_get_clear_messages(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="races between programs only show on a GPU")
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_parameter_reduction_has_no_race_on_gpu(op):
    # Many rows, few columns: every program adds into the same few weights, the worst case for a race.
    x = torch.randn(65536, 8, device="cuda", dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, device="cuda", dtype=torch.float64, requires_grad=True)
    dy = torch.randn_like(x)
    if op == "layer_norm":
        got = torch.autograd.grad(layer_norm(x, w, None), w, dy)[0]
        xr, wr = leaf(x), leaf(w)
        ref = torch.autograd.grad(F.layer_norm(xr, (8,), wr), wr, dy)[0]
    else:
        got = torch.autograd.grad(rms_norm(x, w), w, dy)[0]
        xr, wr = leaf(x), leaf(w)
        ref = torch.autograd.grad(rms_reference(xr, wr, 1e-6), wr, dy)[0]
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="half precision needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_on_gpu(dtype):
    x = torch.randn(64, 4096, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(4096, device="cuda", dtype=dtype, requires_grad=True)
    y = layer_norm(x, w, b)
    yr = F.layer_norm(x.float(), (4096,), w.float(), b.float())
    torch.testing.assert_close(y.float(), yr, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(7, 1151), (2, 3, 37)])
@pytest.mark.parametrize("offset", [1.0, -0.75])  # Gemma's 1 + w, and one that is not 1
@pytest.mark.parametrize("block", [None, 16])  # the whole row in one block; walked in blocks of 16
def test_rms_norm_offset_matches_reference(backward_blocks, shape, dtype, offset, block):
    """y = x̂ ⊙ (offset + w): the forward, x̄ (through offset + w) and w̄ (unchanged in form) match PyTorch."""
    backward_blocks(block)
    g = torch.Generator().manual_seed(6)
    n = shape[-1]
    x = torch.randn(shape, generator=g, dtype=dtype).to(DEVICE).requires_grad_()
    w = (0.1 * torch.randn(n, generator=g, dtype=dtype)).to(DEVICE).requires_grad_()
    dy = torch.randn(shape, generator=g, dtype=dtype).to(DEVICE)
    y = rms_norm(x, w, 1e-6, offset=offset)
    xr, wr = leaf(x), leaf(w)
    yr = F.rms_norm(xr, (n,), offset + wr, 1e-6)
    torch.testing.assert_close(y, yr, rtol=TOL[dtype], atol=TOL[dtype])
    for got, ref, name in zip(grads(y, (x, w), dy), grads(yr, (xr, wr), dy), ("dx", "dw")):
        tol = TOL[dtype] * (1 if name == "dx" else max(1, x.numel() // n) ** 0.5)
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")


def test_rms_norm_offset_gradcheck_float64():
    x = torch.randn(5, 11, dtype=torch.float64, device=DEVICE, requires_grad=True)
    w = torch.randn(11, dtype=torch.float64, device=DEVICE, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w, offset=1.0), (x, w), fast_mode=True)


@pytest.mark.parametrize("call, error, message", [
    (lambda: rms_norm(torch.randn(3, 4, device=DEVICE), None, offset=1.0), ValueError, "weight is None"),
    (lambda: rms_norm(torch.randn(3, 4, device=DEVICE), torch.ones(4, device=DEVICE), offset="1"), TypeError,
     "offset must be a finite float"),
    (lambda: rms_norm(torch.randn(3, 4, device=DEVICE), torch.ones(4, device=DEVICE), offset=float("nan")), TypeError,
     "offset must be a finite float"),
])
def test_bad_offsets_get_clear_messages(call, error, message):
    with pytest.raises(error, match=message):
        call()


# The autocast dtype of each device: float16 on the CPU interpreter, bfloat16 on a GPU.
AUTOCAST = [
    pytest.param("cpu", torch.float16, id="cpu-float16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16",
                 marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="autocast on a GPU needs CUDA")),
]


@pytest.mark.parametrize("device, dtype", AUTOCAST)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_autocast_follows_torch(device, dtype, op):
    """Under autocast the op returns the dtype PyTorch's op returns (float32 on a GPU, the input's on the CPU),
    with its values; the gradients reach the float32 leaves."""
    if device != torch.device(DEVICE).type:
        pytest.skip(f"the kernels run on {DEVICE} here")
    g = torch.Generator().manual_seed(7)
    x, w, b = (torch.randn(s, generator=g).to(device).requires_grad_() for s in ((9, 37), (37,), (37,)))
    dy = torch.randn(9, 37, generator=g).to(device)
    with torch.autocast(device, dtype=dtype):
        h = x.to(dtype)  # an activation in the autocast dtype, as a matmul under autocast leaves it
        if op == "layer_norm":
            y, yr, leaves = layer_norm(h, w, b), F.layer_norm(h, (37,), w, b), (x, w, b)
        else:
            y, yr, leaves = rms_norm(h, w), F.rms_norm(h, (37,), w, 1e-6), (x, w)
    assert y.dtype == yr.dtype
    torch.testing.assert_close(y, yr, rtol=1e-2, atol=1e-2)
    for got, ref in zip(grads(y, leaves, dy.to(y.dtype)), grads(yr, leaves, dy.to(y.dtype))):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_float32_parameters_of_a_float16_input_get_float32_sums(op):
    """A float16 x with float32 w and b (autocast's mixed case): w̄ and b̄ are float32 sums, rounded once to
    float32, not to x's float16 (an error of 1e-3 of their size)."""
    g = torch.Generator().manual_seed(8)
    h = torch.randn(40, 37, generator=g).to(DEVICE).half()
    w, b = (torch.randn(37, generator=g).to(DEVICE).requires_grad_() for _ in range(2))
    dy = torch.randn(40, 37, generator=g).to(DEVICE).half()
    b = b if op == "layer_norm" else None
    y = layer_norm(h, w, b) if op == "layer_norm" else rms_norm(h, w)
    got = grads(y, (w, b), dy)
    # The same sums in float64, from the same float16 inputs.
    h64, dy64 = h.double(), dy.double()
    hc = h64 - h64.mean(-1, keepdim=True) if op == "layer_norm" else h64
    xhat = hc * torch.rsqrt(hc.pow(2).mean(-1, keepdim=True) + (1e-5 if op == "layer_norm" else 1e-6))
    want = [(dy64 * xhat).sum(0), dy64.sum(0)]
    for a, c in zip(got, want):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), c, rtol=1e-5, atol=1e-5)
