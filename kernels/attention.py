"""Attention with recompute (FlashAttention-2 style): no T×T tensor is ever stored or allocated.

Forward, for one head with q, k, v of shape (T, D) and scale c = sm_scale (default 1/√D):
    S = c·q kᵀ,  P = softmax(S) row-wise,  O = P v
computed one (BLOCK_M × BLOCK_N) tile of S at a time with an online softmax: a running
row max m and row sum ℓ, the partial output rescaled by exp(m_old − m_new) when m grows.
The forward saves O and one scalar per row, L = m + log ℓ — nothing T×T.

Backward, with the upstream gradient dO:
    D  = rowsum(dO ⊙ O)                       (preprocess; equals rowsum(dP ⊙ P))
    P  = exp(S − L)                           (rebuilt tile by tile from the saved L)
    dV = Pᵀ dO,  dP = dO vᵀ,  dS = P ⊙ (dP − D),  dQ = c·dS k,  dK = c·dSᵀ q
One kernel walks key blocks and accumulates dK and dV over all query blocks; another walks
query blocks and accumulates dQ over all key blocks. Neither writes to memory another
program writes, so no atomics are needed. Causal masking keeps key j ≤ query i.

Limitations: head dim up to 128 (padded to a power of two ≥ 16 inside the kernels);
float32/float64 everywhere, float16/bfloat16 on a GPU; q, k and v share one shape.
Blocks are fixed sizes rather than autotuned.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, acc_torch_dtype, check_floating, interpreted

MAX_HEAD_DIM = 128


@triton.jit
def _attn_fwd_kernel(
    Q_ptr,  # (BH, T, D) queries
    K_ptr,  # (BH, T, D) keys
    V_ptr,  # (BH, T, D) values
    O_ptr,  # (BH, T, D) output
    LSE_ptr,  # (BH, T) saved L = m + log ℓ per query row
    sm_scale,
    seq_len,
    head_dim,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
):
    """O = softmax(c·q kᵀ) v for one block of queries, walking key blocks with an online softmax."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    base = bh * seq_len * head_dim
    rows = start_m + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    d_mask = cols_d < head_dim
    q = tl.load(Q_ptr + base + rows[:, None] * head_dim + cols_d[None, :],
                mask=(rows[:, None] < seq_len) & d_mask[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_M], dtype=ACC)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    # Causal: keys past the last query of this block can never be seen, so stop there.
    hi = tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else seq_len
    for start_n in range(0, hi, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (keys[:, None] < seq_len) & d_mask[None, :]
        k = tl.load(K_ptr + base + keys[:, None] * head_dim + cols_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + base + keys[:, None] * head_dim + cols_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)).to(ACC) * sm_scale  # (BLOCK_M, BLOCK_N): one tile of S, never stored
        valid = keys[None, :] < seq_len
        if CAUSAL:
            valid = valid & (keys[None, :] <= rows[:, None])
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)  # rescale what was summed under the old max
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(ACC)
        m_i = m_new
    o = acc / l_i[:, None]
    row_mask = rows < seq_len
    tl.store(O_ptr + base + rows[:, None] * head_dim + cols_d[None, :], o.to(O_ptr.dtype.element_ty),
             mask=row_mask[:, None] & d_mask[None, :])
    tl.store(LSE_ptr + bh * seq_len + rows, m_i + tl.log(l_i), mask=row_mask)


@triton.jit
def _attn_bwd_preprocess_kernel(
    O_ptr,  # (BH, T, D) forward output
    DO_ptr,  # (BH, T, D) upstream gradient
    Delta_ptr,  # (BH, T) result D = rowsum(dO ⊙ O)
    seq_len,
    head_dim,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
):
    """D = rowsum(dO ⊙ O): the softmax backward's row scalar, computed before touching S."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < seq_len) & (cols_d[None, :] < head_dim)
    offs = bh * seq_len * head_dim + rows[:, None] * head_dim + cols_d[None, :]
    o = tl.load(O_ptr + offs, mask=mask, other=0.0).to(ACC)
    do = tl.load(DO_ptr + offs, mask=mask, other=0.0).to(ACC)
    tl.store(Delta_ptr + bh * seq_len + rows, tl.sum(o * do, axis=1), mask=rows < seq_len)


@triton.jit
def _attn_bwd_dkdv_kernel(
    Q_ptr,  # (BH, T, D)
    K_ptr,  # (BH, T, D)
    V_ptr,  # (BH, T, D)
    DO_ptr,  # (BH, T, D) upstream gradient
    LSE_ptr,  # (BH, T) saved L
    Delta_ptr,  # (BH, T) D from the preprocess
    DK_ptr,  # (BH, T, D) result
    DV_ptr,  # (BH, T, D) result
    sm_scale,
    seq_len,
    head_dim,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
):
    """dV = Σ_m Pᵀ dO and dK = c·Σ_m dSᵀ q for one key block, P rebuilt as exp(S − L)."""
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1).to(tl.int64)
    base = bh * seq_len * head_dim
    keys = start_n + tl.arange(0, BLOCK_N)
    cols_d = tl.arange(0, BLOCK_D)
    d_mask = cols_d < head_dim
    kv_mask = (keys[:, None] < seq_len) & d_mask[None, :]
    k = tl.load(K_ptr + base + keys[:, None] * head_dim + cols_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V_ptr + base + keys[:, None] * head_dim + cols_d[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    # Causal: queries before this key block never see it; start at the block holding query start_n.
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for start_m in range(lo, seq_len, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_ok = rows < seq_len
        q_mask = row_ok[:, None] & d_mask[None, :]
        q = tl.load(Q_ptr + base + rows[:, None] * head_dim + cols_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO_ptr + base + rows[:, None] * head_dim + cols_d[None, :], mask=q_mask, other=0.0)
        lse = tl.load(LSE_ptr + bh * seq_len + rows, mask=row_ok, other=0.0).to(ACC)
        delta = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0).to(ACC)
        s = tl.dot(q, tl.trans(k)).to(ACC) * sm_scale  # (BLOCK_M, BLOCK_N)
        valid = row_ok[:, None] & (keys[None, :] < seq_len)
        if CAUSAL:
            valid = valid & (keys[None, :] <= rows[:, None])
        # Recompute P from one saved scalar per row: cheaper than reading a T×T P back.
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do).to(ACC)
        dp = tl.dot(do, tl.trans(v)).to(ACC)
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q).to(ACC)
    tl.store(DK_ptr + base + keys[:, None] * head_dim + cols_d[None, :], (dk * sm_scale).to(DK_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(DV_ptr + base + keys[:, None] * head_dim + cols_d[None, :], dv.to(DV_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def _attn_bwd_dq_kernel(
    Q_ptr,  # (BH, T, D)
    K_ptr,  # (BH, T, D)
    V_ptr,  # (BH, T, D)
    DO_ptr,  # (BH, T, D) upstream gradient
    LSE_ptr,  # (BH, T) saved L
    Delta_ptr,  # (BH, T) D from the preprocess
    DQ_ptr,  # (BH, T, D) result
    sm_scale,
    seq_len,
    head_dim,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
):
    """dQ = c·Σ_n dS k for one query block, with dS = P ⊙ (dO vᵀ − D) and P = exp(S − L)."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    base = bh * seq_len * head_dim
    rows = start_m + tl.arange(0, BLOCK_M)
    row_ok = rows < seq_len
    cols_d = tl.arange(0, BLOCK_D)
    d_mask = cols_d < head_dim
    q_mask = row_ok[:, None] & d_mask[None, :]
    q = tl.load(Q_ptr + base + rows[:, None] * head_dim + cols_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO_ptr + base + rows[:, None] * head_dim + cols_d[None, :], mask=q_mask, other=0.0)
    lse = tl.load(LSE_ptr + bh * seq_len + rows, mask=row_ok, other=0.0).to(ACC)
    delta = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0).to(ACC)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    hi = tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else seq_len
    for start_n in range(0, hi, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (keys[:, None] < seq_len) & d_mask[None, :]
        k = tl.load(K_ptr + base + keys[:, None] * head_dim + cols_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + base + keys[:, None] * head_dim + cols_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)).to(ACC) * sm_scale
        valid = row_ok[:, None] & (keys[None, :] < seq_len)
        if CAUSAL:
            valid = valid & (keys[None, :] <= rows[:, None])
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v)).to(ACC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k).to(ACC)
    tl.store(DQ_ptr + base + rows[:, None] * head_dim + cols_d[None, :], (dq * sm_scale).to(DQ_ptr.dtype.element_ty), mask=q_mask)


def _blocks(head_dim: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D). tl.dot needs every dimension ≥ 16."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    if interpreted():
        return 32, 32, block_d
    if dtype == torch.float64 or block_d > 64:
        return 64, 32, block_d
    return 64, 64, block_d


def _check_qkv(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_floating(name, t)
        if t.ndim < 2:
            raise ValueError(f"{name} must have shape (..., T, D); got {tuple(t.shape)}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k and v must share one shape (..., T, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise ValueError("q, k and v must share one dtype and one device")
    if q.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"head dim {q.shape[-1]} > {MAX_HEAD_DIM} is not supported")
    if q.shape[-2] == 0:
        raise ValueError("q, k and v have no tokens (T = 0)")


def _heads(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-2], t.shape[-1]).contiguous()


def attention_forward(q, k, v, causal: bool = False, sm_scale: float | None = None):
    """O and L = m + log ℓ per query row (shape (..., T)); nothing T×T is allocated."""
    _check_qkv(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    q3, k3, v3 = _heads(q), _heads(k), _heads(v)
    bh, seq_len, head_dim = q3.shape
    o = torch.empty_like(q3)
    lse = torch.empty(bh, seq_len, dtype=acc_torch_dtype(q.dtype), device=q.device)
    block_m, block_n, block_d = _blocks(head_dim, q.dtype)
    if bh:
        _attn_fwd_kernel[(triton.cdiv(seq_len, block_m), bh)](
            q3, k3, v3, o, lse, scale, seq_len, head_dim,
            CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, ACC=acc_dtype(q.dtype),
        )
    return o.view(q.shape), lse.view(q.shape[:-1])


def attention_backward(q, k, v, o, lse, do, causal: bool = False, sm_scale: float | None = None):
    """dQ, dK, dV from the saved O and L, recomputing P tile by tile."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    q3, k3, v3, o3, do3 = _heads(q), _heads(k), _heads(v), _heads(o), _heads(do.to(q.dtype))
    lse2 = lse.reshape(-1, q3.shape[1]).contiguous()
    bh, seq_len, head_dim = q3.shape
    block_m, block_n, block_d = _blocks(head_dim, q.dtype)
    acc = acc_dtype(q.dtype)
    delta = torch.empty_like(lse2)
    dq, dk, dv = torch.empty_like(q3), torch.empty_like(k3), torch.empty_like(v3)
    if bh:
        _attn_bwd_preprocess_kernel[(triton.cdiv(seq_len, block_m), bh)](
            o3, do3, delta, seq_len, head_dim, BLOCK_M=block_m, BLOCK_D=block_d, ACC=acc,
        )
        _attn_bwd_dkdv_kernel[(triton.cdiv(seq_len, block_n), bh)](
            q3, k3, v3, do3, lse2, delta, dk, dv, scale, seq_len, head_dim,
            CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, ACC=acc,
        )
        _attn_bwd_dq_kernel[(triton.cdiv(seq_len, block_m), bh)](
            q3, k3, v3, do3, lse2, delta, dq, scale, seq_len, head_dim,
            CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, ACC=acc,
        )
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)


class AttentionFunction(torch.autograd.Function):
    """Saves q, k, v, O and L only: O(T·D) per head, never O(T²)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        o, lse = attention_forward(q, k, v, causal, sm_scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """softmax(sm_scale · q kᵀ) v over the last two dims; matches ``scaled_dot_product_attention``."""
    return AttentionFunction.apply(q, k, v, causal, sm_scale)
