"""kernels.attention against scaled_dot_product_attention, causal and not, and its O(T) memory (q, k, v of one
shape; test_attention_trained.py has GQA, unequal lengths, packed sequences and head dims to 256)."""

import importlib

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import course
from kernels import attention
from kernels._common import DoesNotFit
from kernels._target import GPUS

attention_module = importlib.import_module("kernels.attention")  # the module; kernels exports the function
TUNED = {"fwd": attention_module._attn_fwd_kernel, "dkdv": attention_module._attn_bwd_dkdv_kernel,
         "dq": attention_module._attn_bwd_dq_kernel}

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
        ((1, 45, 128), torch.float32),  # a large head dim (256: test_attention_trained.py)
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


def gpu_block_shapes():
    """Every (BLOCK_M, BLOCK_N) that some GPU configuration of some kernel uses."""
    tables = attention_module._CONFIGS.values()
    return sorted({(bm, bn) for table in tables for cell in table.values() for bm, bn, *_ in cell})


@pytest.fixture
def interpreter_blocks(monkeypatch):
    """Run the three tiled kernels with other blocks than the interpreter's one configuration;
    returns the (BLOCK_M, BLOCK_N) of every launch that asked."""
    asked = []

    def use(block_m, block_n):
        def blocks(head_dim, dtype):
            asked.append((block_m, block_n))
            return block_m, block_n, attention_module._block_d(head_dim)

        monkeypatch.setattr(attention_module, "_blocks", blocks)
        return asked

    return use


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_m, block_n", gpu_block_shapes())
def test_every_gpu_block_shape_matches_sdpa(interpreter_blocks, block_m, block_n, causal):
    # The GPU runs other blocks than the interpreter: BLOCK_M ≠ BLOCK_N moves the causal bounds.
    asked = interpreter_blocks(block_m, block_n)
    got, ref = run_both((1, 2, 150, 24), torch.float64, causal)  # T = 150 ends inside a block of every size
    assert asked == [(block_m, block_n)] * 4, asked  # forward, preprocess, dK/dV and dQ
    tol = TOL[torch.float64]
    for name, a, b in zip(("o", "dq", "dk", "dv"), got, ref):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m} (blocks {block_m}×{block_n})")


# The cells where no configuration fits the GPU's shared memory, so the host refuses (the compile check found them).
REFUSED = {("dkdv", "sm_75", 256, "16-bit"), ("dkdv", "sm_75", 256, "fp32"), ("dkdv", "sm_75", 128, "fp64"),
           *((kernel, "sm_75", 256, "fp64") for kernel in TUNED),
           *((kernel, target, 256, "fp64") for kernel in ("dq", "dkdv") for target in ("sm_86", "sm_89"))}


def test_every_cell_has_configurations():
    # The pruning looks a launch's cell up by target, head-dim class and dtype class: none may be missing, and only
    # the refused ones are empty.
    for kernel in TUNED:
        for target in GPUS:
            for head_dim_class in (64, 128, 256):
                for dtype_class in ("16-bit", "fp32", "fp64"):
                    cell = attention_module._CONFIGS[kernel].get((target, head_dim_class, dtype_class))
                    assert cell is not None, (kernel, target, head_dim_class, dtype_class)
                    assert bool(cell) == ((kernel, target, head_dim_class, dtype_class) not in REFUSED), (
                        kernel, target, head_dim_class, dtype_class)


def test_a_launch_no_configuration_fits_is_refused_naming_the_gpu_and_what_fits(monkeypatch):
    # A stand-in T4: the host code asks kernels._common.target_name which GPU it launches on.
    monkeypatch.setattr(attention_module, "target_name", lambda: "sm_75")
    refuse = attention_module._refuse
    refuse(TUNED["dkdv"], 128, torch.bfloat16)  # fits: no error
    with pytest.raises(DoesNotFit, match=r"backward \(dK, dV\) at head dim 200 in bfloat16 does not fit this GPU "
                                         r"\(T4, sm_75\).* than the 64 KB a block has there\. Use a head dim of at most "
                                         r"128 or a GPU with more shared memory per block"):
        refuse(TUNED["dkdv"], 200, torch.bfloat16)
    with pytest.raises(DoesNotFit, match=r"head dim 128 in float64 .* Use a head dim of at most 64 or float16 or bfloat16 or"):
        refuse(TUNED["dkdv"], 128, torch.float64)


def cell_of(configs):
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in configs]


@pytest.mark.parametrize("kernel", list(TUNED))
def test_pruning_keeps_the_targets_cell_and_only_blocks_the_sequence_needs(monkeypatch, kernel):
    monkeypatch.setattr(attention_module, "target_name", lambda: "sm_90")
    prune, configs = attention_module._prune(kernel), TUNED[kernel].configs
    q = torch.empty(1, 1, 64, dtype=torch.bfloat16)
    cell = attention_module._CONFIGS[kernel][("sm_90", 64, "16-bit")]
    assert len(configs) > len(cell)
    assert cell_of(prune(configs, {"Q_ptr": q, "seq_len_q": 4096, "seq_len_k": 4096}, BLOCK_D=64)) == cell
    short = cell_of(prune(configs, {"Q_ptr": q, "seq_len_q": 40, "seq_len_k": 24}, BLOCK_D=64))  # blocks of up to 64 rows or keys
    assert short == [c for c in cell if max(c[:2]) <= 64] and 0 < len(short) < len(cell), short
    tiny = cell_of(prune(configs, {"Q_ptr": q, "seq_len_q": 3, "seq_len_k": 2}, BLOCK_D=64))  # no block is short enough: the smallest
    assert tiny == [min(cell, key=lambda c: c[0] * c[1])], tiny


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
        ((torch.randn(2, 5, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 7)), "k and v must share one shape"),
        ((torch.randn(2, 5, 8), torch.randn(2, 6, 7), torch.randn(2, 6, 7)), "share one head dim"),
        ((torch.randn(2, 5, 257),) * 3, "head dim 257 > 256"),
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
