"""kernels.attention as language models train it: grouped-query heads, q and k of different lengths (causal
aligned to the bottom-right corner), packed sequences (cu_seqlens) and head dims up to 256, forward and backward
against PyTorch on the interpreter."""

import importlib

import pytest
import torch
import torch.nn.functional as F

import course
from kernels import attention

attention_module = importlib.import_module("kernels.attention")
attention_varlen = attention_module.attention_varlen

DEVICE = course.DEVICE
TOL = {torch.float32: 3e-5, torch.float64: 1e-11}
NAMES = ("o", "dq", "dk", "dv")


def bottom_right(t_q, t_k):
    """Query i sees key j ≤ i + T_k − T_q (FlashAttention 2's causal mask); SDPA's is_causal is top-left."""
    return torch.ones(t_q, t_k, dtype=torch.bool, device=DEVICE).tril(diagonal=t_k - t_q)


def sdpa(q, k, v, causal, scale=None):
    """The reference for (..., H, T_q, D) q and (..., H_kv, T_k, D) k, v; a query that sees no key gives 0."""
    mask = bottom_right(q.shape[-2], k.shape[-2]) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def sdpa_per_document(q, k, v, cu_q, cu_k, causal):
    """The reference for packed (total, H, D) tensors: SDPA on each document alone."""
    outs = []
    for i in range(len(cu_q) - 1):
        doc_q, doc_k, doc_v = (t[cu[i]:cu[i + 1]].transpose(0, 1) for t, cu in ((q, cu_q), (k, cu_k), (v, cu_k)))
        outs.append(sdpa(doc_q, doc_k, doc_v, causal).transpose(0, 1))
    return torch.cat(outs)


def inputs(q_shape, kv_shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(q_shape, generator=g, dtype=dtype)
    k, v = (torch.randn(kv_shape, generator=g, dtype=dtype) for _ in range(2))
    do = torch.randn(q_shape, generator=g, dtype=dtype)
    return [t.to(DEVICE) for t in (q, k, v)], do.to(DEVICE)


def forward_backward(fn, tensors, do):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    o = fn(*leaves)
    return (o, *torch.autograd.grad(o, leaves, do))


def assert_all_close(got, ref, dtype, where=""):
    for name, a, b in zip(NAMES, got, ref):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        torch.testing.assert_close(a, b, rtol=TOL[dtype], atol=TOL[dtype], msg=lambda m, name=name: f"{name}{where}: {m}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "b, h, h_kv, t_q, t_k, d, dtype",
    [
        (2, 4, 1, 37, 37, 16, torch.float64),  # MQA (G = 4): T past a block edge
        (1, 4, 4, 45, 45, 40, torch.float32),  # G = 1, head dim not a power of two
        (1, 8, 2, 21, 53, 16, torch.float64),  # G = 4, T_q < T_k: the diagonal starts T_k − T_q keys in
        (2, 4, 2, 50, 19, 40, torch.float64),  # T_q > T_k: causal, the first 31 queries see no key
        (1, 2, 2, 33, 33, 256, torch.float32),  # the largest head dim
        (1, 4, 1, 17, 70, 256, torch.float64),  # the largest head dim, G = 4, T_q < T_k
    ],
)
def test_gqa_and_unequal_lengths_match_sdpa(b, h, h_kv, t_q, t_k, d, dtype, causal):
    (q, k, v), do = inputs((b, h, t_q, d), (b, h_kv, t_k, d), dtype)
    got = forward_backward(lambda q, k, v: attention(q, k, v, causal=causal), (q, k, v), do)
    ref = forward_backward(lambda q, k, v: sdpa(q, k, v, causal), (q, k, v), do)
    assert_all_close(got, ref, dtype)


def cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "lengths_q, lengths_k, h, h_kv, d, dtype",
    [
        ([5, 40, 1, 27], None, 4, 1, 16, torch.float64),  # self-attention: boundaries at 5, 45, 46 inside 32-token tiles
        ([33, 31], None, 2, 2, 40, torch.float32),  # G = 1, a document one token past a tile
        ([7, 30, 12], [20, 9, 41], 4, 2, 16, torch.float64),  # T_q ≠ T_k per document, one with T_q > T_k
        ([19, 26], None, 2, 1, 256, torch.float32),  # the largest head dim
    ],
)
def test_packed_sequences_match_sdpa_per_document(lengths_q, lengths_k, h, h_kv, d, dtype, causal):
    lengths_k = lengths_k or lengths_q
    (q, k, v), do = inputs((sum(lengths_q), h, d), (sum(lengths_k), h_kv, d), dtype)
    cu_q, cu_k = cu(lengths_q), cu(lengths_k)
    if lengths_k is lengths_q:  # one cu_seqlens for both, max_seqlen computed
        run = lambda q, k, v: attention_varlen(q, k, v, cu_q, causal=causal)  # noqa: E731
    else:
        run = lambda q, k, v: attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal)  # noqa: E731
    got = forward_backward(run, (q, k, v), do)
    ref = forward_backward(lambda q, k, v: sdpa_per_document(q, k, v, cu_q, cu_k, causal), (q, k, v), do)
    assert_all_close(got, ref, dtype)


def test_a_longer_max_seqlen_only_launches_programs_that_return():
    (q, k, v), do = inputs((30, 2, 16), (30, 2, 16), torch.float64)
    cu_q = cu([12, 18])
    got = forward_backward(lambda q, k, v: attention_varlen(q, k, v, cu_q, max_seqlen_q=100, causal=True), (q, k, v), do)
    ref = forward_backward(lambda q, k, v: sdpa_per_document(q, k, v, cu_q, cu_q, True), (q, k, v), do)
    assert_all_close(got, ref, torch.float64)


def test_the_saved_lse_is_flash_attentions():
    # Packed: L as (H, total_q); a query that sees no key: O = 0 and L = +∞ (FlashAttention's convention).
    (q, k, v), _ = inputs((9, 2, 16), (4, 2, 16), torch.float64)
    o, lse = attention_module.attention_forward(q, k, v, causal=True, cu_seqlens_q=cu([9]), cu_seqlens_k=cu([4]))
    assert lse.shape == (2, 9)
    s = torch.einsum("qhd,khd->hqk", q, k) / 4.0
    expected = s.masked_fill(~bottom_right(9, 4), -float("inf")).logsumexp(-1)
    assert torch.all(expected[:, :5] == -float("inf")) and torch.all(lse[:, :5] == float("inf"))  # queries 0–4 see no key
    torch.testing.assert_close(lse[:, 5:], expected[:, 5:])
    assert torch.all(o[:5] == 0)


@pytest.mark.parametrize("block_m, block_n", [(16, 64), (64, 16), (16, 128), (128, 32)])
def test_other_gpu_blocks_keep_the_masks(monkeypatch, block_m, block_n):
    # The GPU runs other blocks than the interpreter's 32 × 32: BLOCK_M ≠ BLOCK_N moves the diagonal's tiles and
    # the document boundaries inside them.
    monkeypatch.setattr(attention_module, "_blocks", lambda d, dtype: (block_m, block_n, attention_module._block_d(d)))
    lengths_q, lengths_k = [70, 3, 90], [50, 17, 131]
    (q, k, v), do = inputs((sum(lengths_q), 4, 24), (sum(lengths_k), 2, 24), torch.float64)
    cu_q, cu_k = cu(lengths_q), cu(lengths_k)
    got = forward_backward(lambda q, k, v: attention_varlen(q, k, v, cu_q, cu_k, causal=True), (q, k, v), do)
    ref = forward_backward(lambda q, k, v: sdpa_per_document(q, k, v, cu_q, cu_k, True), (q, k, v), do)
    assert_all_close(got, ref, torch.float64, f" (blocks {block_m}×{block_n})")


def test_gradcheck_gqa_packed_causal_float64():
    # fast_mode: one random projection of the Jacobian (each interpreted launch costs milliseconds).
    g = torch.Generator().manual_seed(1)
    q = torch.randn(11, 4, 8, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_()
    k, v = (torch.randn(13, 2, 8, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_() for _ in range(2))
    cu_q, cu_k = cu([4, 7]), cu([6, 7])
    assert torch.autograd.gradcheck(lambda q, k, v: attention_varlen(q, k, v, cu_q, cu_k, causal=True), (q, k, v),
                                    fast_mode=True)


def packed(total_q=10, total_k=10, h=2, h_kv=2):
    return [torch.randn(total, heads, 8, device=DEVICE) for total, heads in ((total_q, h), (total_k, h_kv), (total_k, h_kv))]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: attention(*(torch.randn(2, n, 5, 8, device=DEVICE) for n in (6, 4, 4))),
         r"q has 6 heads and k, v have 4 \(dim -3\)"),
        (lambda: attention(*(torch.randn(2, n, 5, 8, device=DEVICE) for n in (4, 2, 1))), r"k and v must share one shape"),
        (lambda: attention(torch.randn(2, 4, 5, 8, device=DEVICE), *(torch.randn(3, 2, 5, 8, device=DEVICE),) * 2),
         "batch dims"),
        (lambda: attention(torch.randn(2, 4, 5, 8, device=DEVICE), *(torch.randn(2, 2, 0, 8, device=DEVICE),) * 2),
         "k, v have 0"),
        (lambda: attention(*(torch.randn(1, 2, 5, 257, device=DEVICE),) * 3), "head dim 257 > 256"),
        (lambda: attention_varlen(*packed(h=3, h_kv=2), cu([4, 6])), r"q has 3 heads and k, v have 2 \(dim 1\)"),
        (lambda: attention_varlen(*packed(), cu([4, 6]).long()), "cu_seqlens_q must be an int32 tensor"),
        (lambda: attention_varlen(*packed(), torch.tensor([0, 6, 4, 10], dtype=torch.int32, device=DEVICE)),
         "cu_seqlens_q must increase: document 1 runs from 6 to 4"),
        (lambda: attention_varlen(*packed(), torch.tensor([1, 6, 10], dtype=torch.int32, device=DEVICE)),
         r"cu_seqlens_q\[0\] = 1: it must be 0"),
        (lambda: attention_varlen(*packed(), cu([4, 5])), r"cu_seqlens_q\[-1\] = 9 must be the number of tokens of q, 10"),
        (lambda: attention_varlen(*packed(total_k=12), cu([4, 6])),
         r"cu_seqlens_k\[-1\] = 10 must be the number of tokens of k and v, 12"),
        (lambda: attention_varlen(*packed(total_k=12), cu([4, 6]), cu([12])), "must count the same documents; got 2 and 1"),
        (lambda: attention_varlen(*packed(), cu([4, 6]), max_seqlen_q=5), "max_seqlen_q = 5 is shorter than the longest"),
        (lambda: attention_varlen(torch.randn(2, 5, 2, 8, device=DEVICE), *packed()[1:], cu([4, 6])),
         r"packed q must have shape \(total_tokens, heads, D\)"),
        (lambda: attention_module.attention_forward(*packed(), cu_seqlens_k=cu([4, 6])), "give cu_seqlens_q too"),
    ],
)
def test_bad_arguments_get_clear_messages(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_roofline_counts_gqa_s_smaller_k_and_v():
    from kernels import roofline

    mha, gqa = roofline.attention(4, 32, 4096, 128, True), roofline.attention(4, 32, 4096, 128, True, h_kv=8)
    assert (gqa.fwd_flops, gqa.fwd_bwd_flops) == (mha.fwd_flops, mha.fwd_bwd_flops)
    fewer = 4 * (32 - 8) * 4096 * 128 * 2  # bytes of one bf16 K-shaped tensor the 24 dropped heads would hold
    assert mha.fwd_bytes - gqa.fwd_bytes == 2 * fewer  # k, v read by the forward
    assert mha.fwd_bwd_bytes - gqa.fwd_bwd_bytes == 6 * fewer  # and k, v read, k̄, v̄ written by the backward


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 needs CUDA")
@pytest.mark.parametrize("packed", [False, True])
def test_bfloat16_gqa_causal_on_gpu(packed):
    # The compiled kernels at a Llama-3-like group (G = 4) and D 128, against SDPA in float32.
    g = torch.Generator(device="cuda").manual_seed(0)
    lengths = [300, 1000, 77]
    q = torch.randn(sum(lengths), 8, 128, device="cuda", generator=g)
    k, v = (torch.randn(sum(lengths), 2, 128, device="cuda", generator=g) for _ in range(2))
    do = torch.randn_like(q)
    cu_q = cu(lengths).cuda()
    if packed:
        run = lambda q, k, v: attention_varlen(q, k, v, cu_q, causal=True)  # noqa: E731
    else:  # the middle document alone, batched (1, H, T, D)
        lo, hi = lengths[0], lengths[0] + lengths[1]
        q, k, v, do = (t[lo:hi].transpose(0, 1)[None] for t in (q, k, v, do))
        run = lambda q, k, v: attention(q, k, v, causal=True)  # noqa: E731
    q, k, v, do = (t.bfloat16() for t in (q, k, v, do))
    got = forward_backward(run, (q, k, v), do)
    reference = (lambda q, k, v: sdpa_per_document(q, k, v, cu_q, cu_q, True)) if packed else \
        (lambda q, k, v: sdpa(q, k, v, True))
    ref = forward_backward(reference, [t.float() for t in (q, k, v)], do.float())  # the same rounded inputs, in float32
    for name, a, b in zip(NAMES, got, ref):
        torch.testing.assert_close(a.float(), b, rtol=5e-2, atol=5e-2, msg=lambda m, name=name: f"{name}: {m}")


def test_autocast_casts_like_scaled_dot_product_attention():
    """Under autocast (float16 on the CPU; bfloat16's interpreter is broken) the op runs in the autocast dtype, as SDPA
    does, and the gradients reach the float32 leaves."""
    g = torch.Generator().manual_seed(31)
    q, k, v = (torch.randn(1, 4, 21, 16, generator=g).to(DEVICE).requires_grad_() for _ in range(3))
    kv = [t.detach()[:, :1].clone().requires_grad_() for t in (k, v)]  # grouped-query: one K/V head for four
    dev = torch.device(DEVICE).type
    with torch.autocast(dev, dtype=torch.float16):
        got = attention(q, *kv, causal=True)
        want = F.scaled_dot_product_attention(q, *kv, is_causal=True, enable_gqa=True)
    assert got.dtype == want.dtype == torch.float16
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    dy = torch.randn(got.shape, generator=g).to(DEVICE, torch.float16)
    for a, b in zip(torch.autograd.grad(got, (q, *kv), dy), torch.autograd.grad(want, (q, *kv), dy)):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)
