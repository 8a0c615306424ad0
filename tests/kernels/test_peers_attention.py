"""The peers' own attention tests, run against ``kernels.attention`` and ``kernels.attention_varlen``.

Each test below is one upstream test: its parameter grid (or a stated subset of it), its reference and its
tolerances, adapted only in how the op is called, in the device (course.DEVICE: Triton's interpreter on the
CPU) and, on the CPU, in the token counts. Where it comes from:

- Triton (github.com/triton-lang/triton), python/tutorials/06-fused-attention.py at dc6ee3ed2cf9: test_op, its
  grid (Z, H, N_CTX, HEAD_DIM) = (1, 2, 1024, 64), causal, float16; its reference the naive masked softmax; atol
  1e-2, rtol 0 (1e-2 on gfx90a). N_CTX 1024 is cut to 128 on the CPU.
- flash-attention (github.com/Dao-AILab/flash-attention), tests/test_flash_attn.py at 765fbd928364:
  test_flash_attn_output and test_flash_attn_varlen_output, with upstream's helpers generate_random_padding_mask,
  generate_qkv (reduced to the branch the tests use), construct_causal_mask (causal aligned to the bottom-right
  corner) and attention_ref (its dropout arguments dropped), and flash_attn.bert_padding's unpad_input and
  pad_input rewritten with plain indexing. Their tolerance rule: the kernel's largest error against the upcast
  reference is at most twice PyTorch's own (the same reference in the input dtype, its operations reordered),
  for the output and for dQ, dK and dV.

Adaptations, each said where it happens:
- calls: flash_attn_func(q, k, v) takes (b, s, h, d), kernels.attention (b, h, s, d): the tensors are transposed
  into the call and its output back; kv-packed inputs are unbound into k and v first; flash_attn_varlen_func
  becomes kernels.attention_varlen with the same cu_seqlens and max_seqlen.
- grid: upstream's two flash tests each span 5,760 points (kvpacked 2 × dtype 2 × mha_type 3 × causal 2 × d 12
  × seqlen pairs 10 × dropout_p 2), far past what the interpreter runs in a test suite. Both run the same 12
  (FLASH_POINTS), on a GPU too: each d once, each seqlen pair at least once, each mha_type four times, causal 7 and
  kvpacked 6 times, causal with q shorter, longer and as long as k, and off by one either way; each in every dtype
  (below) and dropout_p.
- tokens, on the CPU only: batch_size 16 → 2 and the seqlens cut as CPU_SEQLENS says, keeping each pair's shape
  (q shorter or longer, equal, off by one, a ragged tail or whole 32-row blocks); nheads 9 and every d stay.
- dtype: on a GPU upstream's float16 and bfloat16. On the CPU bfloat16 is listed and skipped, as the other
  peers files skip it (the interpreter has none), and each point runs in one of float16 and float32 (float32
  standing in for bfloat16's range), alternating along FLASH_POINTS and the other way round in the varlen test,
  so each point meets both: running both in both tests doubles the file's time. For float32 inputs the reference
  upcasts to float64 (upstream upcasts 16-bit inputs to float32: the reference is a precision above the input).
- dropout_p 0.17 is listed and skipped: kernels.attention has no dropout.
- backward at every d: upstream skips it for d > 192 on GPUs other than sm80 and sm90; kernels has it everywhere.
"""

import math

import pytest
import torch

import course
from kernels import attention, attention_varlen

DEVICE = course.DEVICE
ON_GPU = torch.device(DEVICE).type == "cuda"
NO_BF16 = pytest.mark.skipif(not ON_GPU, reason="bfloat16 does not run in Triton's CPU interpreter")
NO_DROPOUT = pytest.mark.skip(reason="kernels.attention has no dropout")


def tokens(n: int, cpu_n: int) -> int:
    """An upstream token count, or ``cpu_n`` in the interpreter (every tile is a Python-level step there)."""
    return n if ON_GPU else cpu_n


# ----------------------------------------------------------------------------- Triton: tutorials/06-fused-attention.py


@pytest.mark.parametrize("Z, H, N_CTX, HEAD_DIM", [(1, 2, 1024, 64)])
@pytest.mark.parametrize("causal", [True])
def test_op(Z, H, N_CTX, HEAD_DIM, causal, dtype=torch.float16):
    torch.manual_seed(20)
    N_CTX = tokens(N_CTX, 128)
    q = torch.empty((Z, H, N_CTX, HEAD_DIM), dtype=dtype, device=DEVICE).normal_(mean=0.0, std=0.5).requires_grad_()
    k = torch.empty((Z, H, N_CTX, HEAD_DIM), dtype=dtype, device=DEVICE).normal_(mean=0.0, std=0.5).requires_grad_()
    v = torch.empty((Z, H, N_CTX, HEAD_DIM), dtype=dtype, device=DEVICE).normal_(mean=0.0, std=0.5).requires_grad_()
    sm_scale = 0.5
    dout = torch.randn_like(q)
    # reference implementation
    M = torch.tril(torch.ones((N_CTX, N_CTX), device=DEVICE))
    p = torch.matmul(q, k.transpose(2, 3)) * sm_scale
    if causal:
        p[:, :, M == 0] = float("-inf")
    p = torch.softmax(p.float(), dim=-1).half()
    ref_out = torch.matmul(p, v)
    ref_out.backward(dout)
    ref_dv, v.grad = v.grad.clone(), None
    ref_dk, k.grad = k.grad.clone(), None
    ref_dq, q.grad = q.grad.clone(), None
    # kernels.attention in place of the tutorial's _attention.apply(q, k, v, causal, sm_scale)
    tri_out = attention(q, k, v, causal=causal, sm_scale=sm_scale).half()
    tri_out.backward(dout)
    tri_dv, v.grad = v.grad.clone(), None
    tri_dk, k.grad = k.grad.clone(), None
    tri_dq, q.grad = q.grad.clone(), None
    assert torch.allclose(ref_out, tri_out, atol=1e-2, rtol=0)
    # upstream's rtol for the known fp16 GEMM limitation of CDNA2 (gfx90a)
    rtol = 1e-2 if torch.version.hip is not None and "gfx90a" in torch.cuda.get_device_properties(0).gcnArchName else 0.0
    assert torch.allclose(ref_dv, tri_dv, atol=1e-2, rtol=rtol)
    assert torch.allclose(ref_dk, tri_dk, atol=1e-2, rtol=rtol)
    assert torch.allclose(ref_dq, tri_dq, atol=1e-2, rtol=rtol)


# ----------------------------------------------------------------------------- flash-attention: tests/test_flash_attn.py
# The helpers as upstream has them, without what the two tests below do not use.


def generate_random_padding_mask(max_seqlen, batch_size, device, mode="random"):
    assert mode in ["full", "random", "third"]
    if mode == "full":
        lengths = torch.full((batch_size, 1), max_seqlen, device=device, dtype=torch.int32)
    elif mode == "random":
        lengths = torch.randint(max(1, max_seqlen - 20), max_seqlen + 1, (batch_size, 1), device=device)
    else:
        lengths = torch.randint(max_seqlen // 3, max_seqlen + 1, (batch_size, 1), device=device)
    return torch.arange(max_seqlen, device=device).expand(batch_size, max_seqlen) < lengths


def unpad_input(hidden_states, attention_mask):
    """flash_attn.bert_padding.unpad_input: the rows the mask keeps, packed, with their indices and cu_seqlens."""
    seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten()).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    return hidden_states.flatten(0, 1)[indices], indices, cu_seqlens, int(seqlens.max())


def pad_input(hidden_states, indices, batch, seqlen):
    """flash_attn.bert_padding.pad_input: packed rows back to (batch, seqlen, ...), zeros where the mask was off."""
    output = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
    output[indices] = hidden_states
    return output.view(batch, seqlen, *hidden_states.shape[1:])


def generate_qkv(q, k, v, query_padding_mask, key_padding_mask):
    """Upstream's generate_qkv with both padding masks given and kvpacked=qkvpacked=False (kv-packed inputs are
    unbound by the caller, as upstream's kvpacked branch stacks the same k_unpad and v_unpad)."""
    batch_size, seqlen_q = q.shape[:2]
    seqlen_k = k.shape[1]
    q_unpad, indices_q, cu_seqlens_q, max_seqlen_q = unpad_input(q, query_padding_mask)
    k_unpad, indices_k, cu_seqlens_k, max_seqlen_k = unpad_input(k, key_padding_mask)
    v_unpad = unpad_input(v, key_padding_mask)[0]
    return (
        q_unpad.detach().requires_grad_(), k_unpad.detach().requires_grad_(), v_unpad.detach().requires_grad_(),
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_(),
        lambda t: pad_input(t, indices_q, batch_size, seqlen_q), lambda t: pad_input(t, indices_k, batch_size, seqlen_k),
    )


def construct_causal_mask(seqlen_q, seqlen_k, query_padding_mask=None, key_padding_mask=None, device=None):
    row_idx = torch.arange(seqlen_q, device=device, dtype=torch.long)[:, None]
    col_idx = torch.arange(seqlen_k, device=device, dtype=torch.long)
    sk = seqlen_k if key_padding_mask is None else key_padding_mask.sum(-1)[:, None, None, None]
    sq = seqlen_q if query_padding_mask is None else query_padding_mask.sum(-1)[:, None, None, None]
    return col_idx > row_idx + sk - sq


def attention_ref(q, k, v, query_padding_mask=None, key_padding_mask=None, causal=False, upcast=True,
                  reorder_ops=False):
    """Upstream's attention_ref without dropout: q (b, s_q, h, d), k and v (b, s_k, h_k, d) → output (b, s_q, h, d).
    upcast: compute a precision above the input's (float32 for 16-bit inputs, upstream's; float64 for float32,
    ours), then cast back; reorder_ops: scale k instead of q, to measure the error of reordering alone."""
    dtype_og = q.dtype
    if upcast:
        wide = torch.float64 if dtype_og == torch.float32 else torch.float32
        q, k, v = q.to(wide), k.to(wide), v.to(wide)
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)  # "b s h d -> b s (h g) d"
    v = v.repeat_interleave(q.shape[2] // v.shape[2], dim=2)
    d = q.shape[-1]
    if not reorder_ops:
        scores = torch.einsum("bthd,bshd->bhts", q / math.sqrt(d), k)
    else:
        scores = torch.einsum("bthd,bshd->bhts", q, k / math.sqrt(d))
    if key_padding_mask is not None:
        scores.masked_fill_(~key_padding_mask[:, None, None, :], float("-inf"))
    if causal:
        causal_mask = construct_causal_mask(seqlen_q, seqlen_k, query_padding_mask, key_padding_mask, q.device)
        scores.masked_fill_(causal_mask, float("-inf"))
    attention = torch.softmax(scores, dim=-1)
    if causal:  # Some rows are completely masked out so we fill them with zero instead of NaN
        attention = attention.masked_fill(torch.all(causal_mask, dim=-1, keepdim=True), 0.0)
    output = torch.einsum("bhts,bshd->bthd", attention, v)
    if query_padding_mask is not None:
        output.masked_fill_(~query_padding_mask[:, :, None, None], 0.0)
    return output.to(dtype=dtype_og)


SEQLENS = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024), (1023, 1024),
           (1024, 1023), (2048, 2048)]
# Each pair cut for the interpreter, keeping its shape: q shorter or longer than k, equal, off by one, past a
# 32-row block (the interpreter's) by a ragged tail or by whole blocks.
CPU_SEQLENS = dict(zip(SEQLENS, [(29, 51), (32, 55), (29, 53), (27, 64), (32, 64), (64, 32), (48, 48), (47, 48),
                                 (48, 47), (64, 64)]))
# 12 of upstream's points as (d, (seqlen_q, seqlen_k), mha_type, causal, kvpacked), the subset the docstring
# describes, a column per axis.
FLASH_POINTS = list(zip(
    [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256],  # upstream's d, each once
    [SEQLENS[i] for i in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 5, 0)],  # every pair; (512, 256) and (113, 203) twice
    ["mha", "mqa", "gqa"] * 4,
    [True, False, True, False, True, True, True, True, True, False, False, False],  # causal at points 0, 2 and 4 to 8
    [False, True, True, False, False, True, True, False, False, True, False, True],  # kvpacked
))


def flash_grid(swap: bool):
    """Upstream's parametrize decorators over FLASH_POINTS × dtype × dropout_p, as pytest params. The dtypes: on a
    GPU upstream's float16 and bfloat16 at every point; in the interpreter bfloat16 (skipped) and one of float16
    and float32 per point, alternating, the other way round in the other test (``swap``): each point meets both."""
    params = []
    for i, (d, seqlens, mha_type, causal, kvpacked) in enumerate(FLASH_POINTS):
        cpu_dtype = (torch.float16, torch.float32)[(i + swap) % 2]
        for dtype in ([torch.float16] if ON_GPU else [cpu_dtype]) + [torch.bfloat16]:
            for dropout_p in (0.0, 0.17):
                marks = [NO_DROPOUT] if dropout_p else []
                marks += [NO_BF16] if dtype == torch.bfloat16 else []
                name = "-".join([f"d{d}", "x".join(map(str, seqlens)), mha_type, "causal" if causal else "full",
                                 "kvpacked" if kvpacked else "kv", str(dtype).removeprefix("torch."), f"p{dropout_p}"])
                params.append(pytest.param(d, seqlens, mha_type, causal, kvpacked, dtype, dropout_p, marks=marks, id=name))
    return pytest.mark.parametrize("d, seqlens, mha_type, causal, kvpacked, dtype, dropout_p", params)


def draw_inputs(seqlens, mha_type, d, dtype, kvpacked):
    """Upstream's sizes, seed and draws: ((batch_size, seqlen_q, seqlen_k), the leaves, the (q, k, v) the ops take).
    Sizes: upstream's on a GPU (where it skips its 2048 pair if the reference would not fit in 16 GiB or less),
    CPU_SEQLENS and batch_size 2 in the interpreter."""
    if ON_GPU and max(seqlens) >= 2048 and torch.cuda.get_device_properties(DEVICE).total_memory <= 16 * 2**30:
        pytest.skip("Reference implementation OOM")
    (seqlen_q, seqlen_k), batch_size = seqlens if ON_GPU else CPU_SEQLENS[seqlens], tokens(16, 2)
    torch.random.manual_seed(0)
    nheads = 9
    nheads_k = nheads if mha_type == "mha" else (1 if mha_type == "mqa" else 3)
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=DEVICE, dtype=dtype, requires_grad=True)
    if kvpacked:
        kv = torch.randn(batch_size, seqlen_k, 2, nheads_k, d, device=DEVICE, dtype=dtype, requires_grad=True)
        return (batch_size, seqlen_q, seqlen_k), (q, kv), (q, *kv.unbind(dim=2))
    k = torch.randn(batch_size, seqlen_k, nheads_k, d, device=DEVICE, dtype=dtype, requires_grad=True)
    v = torch.randn(batch_size, seqlen_k, nheads_k, d, device=DEVICE, dtype=dtype, requires_grad=True)
    return (batch_size, seqlen_q, seqlen_k), (q, k, v), (q, k, v)


def at_most_twice(name, got, ref, pt):
    """Upstream's rule: the kernel's numerical error is at most twice that of a PyTorch implementation."""
    err, pt_err = (got - ref).abs().max().item(), (pt - ref).abs().max().item()
    assert err <= 2 * pt_err, f"{name}: max |kernels − ref| = {err:.3e} > 2 × max |PyTorch − ref| = 2 × {pt_err:.3e}"


def gradients(out, leaves, g, kvpacked):
    """(dq, dk, dv) of out·g with respect to the leaves, a kv leaf's gradient unbound into dk and dv."""
    grads = torch.autograd.grad(out, leaves, g)
    return (grads[0], *grads[1].unbind(2)) if kvpacked else grads


def check_against_reference(out, kernel_grads, q, k, v, leaves, kvpacked, causal, query_padding_mask=None,
                            key_padding_mask=None):
    """Upstream's checks: out_ref (upcast) and out_pt (the input dtype, reordered) from attention_ref, one g for the
    three backward passes (kernel_grads(g) gives the kernel's dq, dk, dv), the rule on the output and each gradient."""
    out_ref = attention_ref(q, k, v, query_padding_mask, key_padding_mask, causal=causal)
    out_pt = attention_ref(q, k, v, query_padding_mask, key_padding_mask, causal=causal, upcast=False, reorder_ops=True)
    g = torch.randn_like(out)
    at_most_twice("output", out, out_ref, out_pt)
    for name, got, ref, pt in zip(("dQ", "dK", "dV"), kernel_grads(g), gradients(out_ref, leaves, g, kvpacked),
                                  gradients(out_pt, leaves, g, kvpacked)):
        at_most_twice(name, got, ref, pt)


@flash_grid(swap=False)
def test_flash_attn_output(d, seqlens, mha_type, causal, kvpacked, dtype, dropout_p):
    _, leaves, (q, k, v) = draw_inputs(seqlens, mha_type, d, dtype, kvpacked)
    # flash_attn_func(q, k, v, dropout_p, causal=causal) on (b, s, h, d) tensors
    out = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal).transpose(1, 2)
    check_against_reference(out, lambda g: gradients(out, leaves, g, kvpacked), q, k, v, leaves, kvpacked, causal)


@flash_grid(swap=True)
def test_flash_attn_varlen_output(d, seqlens, mha_type, causal, kvpacked, dtype, dropout_p):
    (batch_size, seqlen_q, seqlen_k), _, (q, k, v) = draw_inputs(seqlens, mha_type, d, dtype, kvpacked)
    query_padding_mask = generate_random_padding_mask(seqlen_q, batch_size, DEVICE, mode="random")
    key_padding_mask = generate_random_padding_mask(seqlen_k, batch_size, DEVICE, mode="random")
    (q_unpad, k_unpad, v_unpad, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
     q, k, v, pad_q, pad_k) = generate_qkv(q, k, v, query_padding_mask, key_padding_mask)
    if kvpacked:  # upstream's kv_unpad = stack([k_unpad, v_unpad], dim=1) and its kv leaf
        kv_unpad = torch.stack([k_unpad, v_unpad], dim=1).detach().requires_grad_()
        k_unpad, v_unpad = kv_unpad.unbind(dim=1)
        kv = torch.stack([k, v], dim=2).detach().requires_grad_()
        k, v = kv.unbind(dim=2)
        leaves_unpad, leaves = (q_unpad, kv_unpad), (q, kv)
    else:
        leaves_unpad, leaves = (q_unpad, k_unpad, v_unpad), (q, k, v)
    # flash_attn_varlen_func(q_unpad, k_unpad, v_unpad, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    # dropout_p, causal=causal)
    out_unpad = attention_varlen(q_unpad, k_unpad, v_unpad, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 causal=causal)
    out = pad_q(out_unpad)

    def kernel_grads(g):
        """Upstream's: the packed gradients, padded back to (b, s, h, d) (dk and dv with the keys' padding)."""
        grads = torch.autograd.grad(out, leaves_unpad, g)
        if kvpacked:
            return (pad_q(grads[0]), *pad_k(grads[1]).unbind(2))
        return pad_q(grads[0]), pad_k(grads[1]), pad_k(grads[2])

    check_against_reference(out, kernel_grads, q, k, v, leaves, kvpacked, causal, query_padding_mask, key_padding_mask)
