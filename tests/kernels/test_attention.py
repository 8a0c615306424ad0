"""kernels.attention against scaled_dot_product_attention, causal and not, and its O(T) memory."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import course
from kernels import attention

DEVICE = course.DEVICE
TOL = {torch.float32: 2e-5, torch.float64: 1e-11}


def run_both(shape, dtype, causal, sm_scale=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=g, dtype=dtype).to(DEVICE).requires_grad_() for _ in range(3))
    do = torch.randn(shape, generator=g, dtype=dtype).to(DEVICE)
    o = attention(q, k, v, causal=causal, sm_scale=sm_scale)
    got = (o, *torch.autograd.grad(o, (q, k, v), do))
    qr, kr, vr = (t.detach().clone().requires_grad_() for t in (q, k, v))
    orf = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=sm_scale)
    ref = (orf, *torch.autograd.grad(orf, (qr, kr, vr), do))
    return got, ref


@pytest.mark.parametrize("causal", [False, True])  # a well-known tutorial got only the causal backward right
@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((1, 17, 8), torch.float64),  # batch 1, T below one block
        ((7, 33, 24), torch.float64),  # prime batch, T past a block edge, head dim not a power of two
        ((2, 3, 70, 64), torch.float32),  # 4-D (batch, heads, T, D)
        ((1, 45, 128), torch.float32),  # the largest head dim
        ((3, 1, 5), torch.float64),  # one token: softmax of one score is 1
    ],
)
def test_matches_sdpa(shape, dtype, causal):
    got, ref = run_both(shape, dtype, causal)
    for name, a, b in zip(("o", "dq", "dk", "dv"), got, ref):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=TOL[dtype], atol=TOL[dtype], msg=lambda m, name=name: f"{name}: {m}")


def test_custom_scale():
    got, ref = run_both((2, 19, 16), torch.float64, causal=False, sm_scale=0.3)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_float64(causal):
    # fast_mode checks one random projection of the Jacobian: each interpreted launch costs
    # milliseconds, and the full per-element gradcheck would need hundreds of them.
    q, k, v = (torch.randn(2, 9, 5, dtype=torch.float64, device=DEVICE, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, causal=causal), (q, k, v), fast_mode=True)


class LargestAllocation(TorchDispatchMode):
    """Remember the largest tensor any torch op creates (Triton kernels allocate through torch)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_nothing_t_by_t_is_saved_or_allocated():
    T, D = 160, 16
    q, k, v = (torch.randn(1, T, D, dtype=torch.float32, device=DEVICE, requires_grad=True) for _ in range(3))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        o = attention(q, k, v)
    with LargestAllocation() as mode:
        o = attention(q, k, v)
        o.backward(torch.ones_like(o))
    # Linear terms (q, k, v, O, their gradients, scratch copies) stay far below T×T = 25600.
    assert max(saved) <= T * D, f"saved a tensor of {max(saved)} elements; T×T would be {T * T}"
    assert mode.largest < T * T, f"allocated a tensor of {mode.largest} elements, as much as T×T = {T * T}"


@pytest.mark.parametrize(
    "args, message",
    [
        ((torch.randn(2, 5, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)), "share one shape"),
        ((torch.randn(2, 5, 129),) * 3, "head dim 129 > 128"),
        ((torch.randn(5),) * 3, r"\(\.\.\., T, D\)"),
        ((torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(2, 5, 8), torch.randn(2, 5, 8)), "one dtype"),
    ],
)
def test_bad_inputs_get_clear_messages(args, message):
    with pytest.raises(ValueError, match=message):
        attention(*(a.to(DEVICE) for a in args))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 needs CUDA")
@pytest.mark.parametrize("causal", [False, True])
def test_bfloat16_on_gpu(causal):
    q, k, v = (torch.randn(2, 4, 1000, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    o = attention(q, k, v, causal=causal)
    do = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), do)
    qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
    orf = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
    refs = torch.autograd.grad(orf, (qr, kr, vr), do.float())
    torch.testing.assert_close(o.float(), orf, rtol=2e-2, atol=2e-2)
    for a, b in zip(grads, refs):
        torch.testing.assert_close(a.float(), b, rtol=5e-2, atol=5e-2)
