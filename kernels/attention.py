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

Block sizes, warps and pipeline stages are autotuned on the GPU from a short list per target
(sm_80, sm_90, gfx942), head-dim class and dtype (_CONFIGS), each checked ahead of time to compile
without spilling and to fit shared memory; the CPU interpreter runs one small configuration
(_blocks).

Limitations: head dim up to 128 (padded to a power of two ≥ 16 inside the kernels);
float16/float32/float64 everywhere, bfloat16 on a GPU; q, k and v share one shape. Other GPUs
use the list of the nearest of the three (sm_80 below Hopper, sm_90 from Hopper on, gfx942 on
AMD), unchecked: on a GPU with less shared memory per block (consumer Ampere and Ada: 99 KB)
the autotuner skips an entry that does not fit, and a cell whose every entry is too large fails.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, acc_torch_dtype, check_floating, interpreted, launch_target

MAX_HEAD_DIM = 128

# ----------------------------------------------------------------------------- configurations

# (BLOCK_M, BLOCK_N, num_warps, num_stages) of each tiled kernel, by target, head-dim class (BLOCK_D
# ≤ 64 or ≤ 128) and dtype class: a row per such cell, holding the fwd, dq and dkdv kernels' entries
# in that order (_CONFIGS[kernel][cell] reads one kernel's column). BLOCK_M counts query rows, BLOCK_N
# keys; the dK/dV kernel gives each program BLOCK_N keys and walks the queries BLOCK_M at a time.
# Every entry compiles without a spill and within the target's shared memory (float64 may spill: it
# is for checks, not speed; its small tiles and few stages are there to fit shared memory).
# `python -m kernels.compile_check --op attention --full` compiles each entry the pruning keeps. Two
# entries per cell in 16 and 32 bits leave the autotuner a choice on the GPU; float64 gets one.
_KERNELS = ("fwd", "dq", "dkdv")
_CELLS = {
    ("sm_80", 64, "16-bit"):   ([(128, 64, 8, 3), (64, 64, 4, 3)],  [(128, 64, 8, 3), (64, 64, 4, 3)],  [(64, 32, 4, 3), (32, 32, 4, 3)]),
    ("sm_80", 128, "16-bit"):  ([(128, 32, 8, 3), (64, 64, 8, 3)],  [(64, 64, 8, 3), (64, 32, 4, 3)],   [(32, 64, 8, 3), (16, 64, 8, 3)]),
    ("sm_80", 64, "fp32"):     ([(128, 64, 8, 3), (64, 64, 4, 3)],  [(128, 32, 8, 3), (64, 32, 4, 3)],  [(64, 32, 4, 3), (32, 32, 4, 3)]),
    ("sm_80", 128, "fp32"):    ([(64, 64, 8, 2), (64, 32, 8, 3)],   [(64, 32, 8, 2), (32, 32, 8, 3)],   [(32, 64, 8, 2), (32, 32, 8, 3)]),
    ("sm_80", 64, "fp64"):     ([(32, 32, 4, 2)],                   [(32, 32, 4, 2)],                   [(16, 32, 4, 1)]),
    ("sm_80", 128, "fp64"):    ([(16, 32, 4, 2)],                   [(16, 32, 4, 2)],                   [(32, 16, 4, 1)]),
    ("sm_90", 64, "16-bit"):   ([(128, 64, 8, 3), (64, 64, 4, 3)],  [(128, 64, 8, 3), (64, 64, 4, 3)],  [(32, 128, 8, 3), (64, 64, 8, 3)]),
    ("sm_90", 128, "16-bit"):  ([(128, 64, 8, 3), (64, 64, 4, 3)],  [(128, 64, 8, 3), (64, 64, 4, 3)],  [(32, 64, 8, 3), (16, 64, 8, 3)]),
    ("sm_90", 64, "fp32"):     ([(128, 64, 8, 3), (64, 64, 4, 3)],  [(128, 64, 8, 3), (64, 64, 4, 3)],  [(16, 128, 8, 3), (32, 64, 8, 3)]),
    ("sm_90", 128, "fp32"):    ([(128, 32, 8, 3), (64, 32, 4, 3)],  [(128, 32, 8, 2), (64, 32, 4, 3)],  [(16, 64, 8, 3), (32, 32, 8, 3)]),
    ("sm_90", 64, "fp64"):     ([(32, 32, 4, 2)],                   [(32, 32, 4, 2)],                   [(16, 32, 4, 1)]),
    ("sm_90", 128, "fp64"):    ([(16, 32, 4, 2)],                   [(16, 32, 4, 2)],                   [(16, 32, 4, 1)]),
    ("gfx942", 64, "16-bit"):  ([(128, 64, 4, 2), (128, 32, 4, 2)], [(128, 64, 4, 2), (128, 32, 4, 2)], [(16, 128, 4, 2), (64, 64, 4, 2)]),
    ("gfx942", 128, "16-bit"): ([(128, 64, 4, 2), (128, 32, 4, 2)], [(64, 64, 4, 2), (128, 32, 4, 2)],  [(32, 64, 4, 2), (64, 32, 4, 2)]),
    ("gfx942", 64, "fp32"):    ([(128, 64, 4, 2), (128, 32, 4, 2)], [(128, 32, 4, 2), (64, 64, 4, 2)],  [(64, 64, 4, 2), (64, 32, 4, 2)]),
    ("gfx942", 128, "fp32"):   ([(64, 32, 4, 2)],                   [(64, 16, 4, 2)],                   [(64, 32, 4, 2), (32, 32, 4, 2)]),
    ("gfx942", 64, "fp64"):    ([(32, 32, 4, 1)],                   [(32, 32, 4, 1)],                   [(16, 32, 4, 1)]),
    ("gfx942", 128, "fp64"):   ([(32, 32, 4, 1)],                   [(32, 16, 4, 1)],                   [(32, 16, 4, 1)]),
}
_CONFIGS = {kernel: {cell: entries[i] for cell, entries in _CELLS.items()} for i, kernel in enumerate(_KERNELS)}

PREPROCESS_BLOCK_M = 64


def _target_name() -> str:
    """The table a launch uses: gfx942 for AMD, sm_90 for Hopper and later, sm_80 for the rest of CUDA."""
    target = launch_target()
    if target.backend == "hip":
        return "gfx942"
    return "sm_90" if isinstance(target.arch, int) and target.arch >= 90 else "sm_80"


def _dtype_class(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float64: "fp64"}.get(dtype, "16-bit")


def _block_d(head_dim: int) -> int:
    """The head dim padded to a power of two; tl.dot needs every dimension ≥ 16."""
    return max(16, triton.next_power_of_2(head_dim))


def _blocks(head_dim: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D) in the CPU interpreter: one small configuration, since
    autotuning there would only multiply test time. On a GPU the autotuner picks BLOCK_M and BLOCK_N."""
    return 32, 32, _block_d(head_dim)


def _config(block_m: int, block_n: int, num_warps: int, num_stages: int) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=num_warps, num_stages=num_stages)


def _all_configs(kernel: str) -> list[triton.Config]:
    """Every configuration of any cell, once: the autotune list that the pruning selects from."""
    unique = dict.fromkeys(entry for cell in _CONFIGS[kernel].values() for entry in cell)
    return [_config(*entry) for entry in unique]


def _prune(kernel: str):
    """early_config_prune for one kernel: keep the configurations of the target's cell, and drop
    blocks longer than the sequence needs (a 40-token sequence does not need 128-row blocks)."""

    def prune(configs, named_args, **kwargs):
        head_dim_class = 64 if kwargs["BLOCK_D"] <= 64 else 128
        wanted = _CONFIGS[kernel][(_target_name(), head_dim_class, _dtype_class(named_args["Q_ptr"].dtype))]
        kept = [c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in wanted]
        longest = max(16, triton.next_power_of_2(named_args["seq_len"]))
        short = [c for c in kept if max(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) <= longest]
        return short or [min(kept, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]

    return prune


def _autotuned(kernel: str):
    """triton.autotune over _CONFIGS[kernel], pruned to the target, head dim and dtype of the launch."""
    return triton.autotune(configs=_all_configs(kernel), key=["seq_len", "head_dim", "CAUSAL"],
                           prune_configs_by={"early_config_prune": _prune(kernel)})


def _launch(kernel, grid, *args, head_dim: int, dtype: torch.dtype, **constexprs) -> None:
    """kernel[grid](*args, **constexprs): autotuned on a GPU, with _blocks' configuration in the interpreter."""
    if interpreted():
        block_m, block_n, _ = _blocks(head_dim, dtype)
        kernel.fn[grid](*args, BLOCK_M=block_m, BLOCK_N=block_n, **constexprs)
    else:
        kernel[grid](*args, **constexprs)


# ----------------------------------------------------------------------------- tiles shared by the kernels


@triton.jit
def _program_block(seq_len, head_dim, BLOCK: tl.constexpr):
    """This program's BLOCK positions of the sequence (grid axis 0), as their start and their offsets; its
    head bh (grid axis 1); and the offset of head bh's (T, D) matrices, in 64 bits: B·H·T·D may pass 2³¹."""
    start = tl.program_id(0) * BLOCK
    bh = tl.program_id(1).to(tl.int64)
    return start, start + tl.arange(0, BLOCK), bh, bh * seq_len * head_dim


@triton.jit
def _load_tile(ptr, rows, cols_d, seq_len, head_dim):
    """The (rows, BLOCK_D) tile of one head's (T, D) matrix at ptr; rows past T and columns past D read as 0."""
    mask = (rows[:, None] < seq_len) & (cols_d[None, :] < head_dim)
    return tl.load(ptr + rows[:, None] * head_dim + cols_d[None, :], mask=mask, other=0.0)


@triton.jit
def _store_tile(ptr, tile, rows, cols_d, seq_len, head_dim):
    """Store a tile, cast to ptr's dtype, where _load_tile reads it; rows past T and columns past D are left alone."""
    mask = (rows[:, None] < seq_len) & (cols_d[None, :] < head_dim)
    tl.store(ptr + rows[:, None] * head_dim + cols_d[None, :], tile.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _load_queries(Q_ptr, DO_ptr, LSE_ptr, Delta_ptr, rows, seq_len, head_dim, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    """What the backward needs of a block of query rows: q, dO, and the row scalars L and D."""
    cols_d = tl.arange(0, BLOCK_D)
    q = _load_tile(Q_ptr, rows, cols_d, seq_len, head_dim)
    do = _load_tile(DO_ptr, rows, cols_d, seq_len, head_dim)
    lse = tl.load(LSE_ptr + rows, mask=rows < seq_len, other=0.0).to(ACC)
    delta = tl.load(Delta_ptr + rows, mask=rows < seq_len, other=0.0).to(ACC)
    return q, do, lse, delta


@triton.jit
def _causal(valid, rows, keys, CAUSAL: tl.constexpr):
    """The (query, key) pairs of a tile that count: those of valid and, if CAUSAL, only key j ≤ query i."""
    if CAUSAL:
        valid = valid & (keys[None, :] <= rows[:, None])
    return valid


@triton.jit
def _causal_end(start_m, seq_len, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """Where a query block's walk over keys stops: causal, keys past its last query can never be seen."""
    return tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else seq_len


@triton.jit
def _probs(q, k, lse, rows, keys, sm_scale, seq_len, CAUSAL: tl.constexpr, ACC: tl.constexpr):
    """P = exp(S − L) of one (BLOCK_M, BLOCK_N) tile, 0 where a pair does not count."""
    s = tl.dot(q, tl.trans(k)).to(ACC) * sm_scale
    valid = _causal((rows[:, None] < seq_len) & (keys[None, :] < seq_len), rows, keys, CAUSAL)
    # Recompute P from one saved scalar per row: cheaper than reading a T×T P back.
    return tl.where(valid, tl.exp(s - lse[:, None]), 0.0)


@triton.jit
def _dscores(p, do, v, delta, ACC: tl.constexpr):
    """dS = P ⊙ (dP − D) with dP = dO vᵀ, for one tile."""
    dp = tl.dot(do, tl.trans(v)).to(ACC)
    return p * (dp - delta[:, None])


# ----------------------------------------------------------------------------- kernels


@_autotuned("fwd")
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
    start_m, rows, bh, base = _program_block(seq_len, head_dim, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    q = _load_tile(Q_ptr + base, rows, cols_d, seq_len, head_dim)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_M], dtype=ACC)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    for start_n in range(0, _causal_end(start_m, seq_len, BLOCK_M, CAUSAL), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k = _load_tile(K_ptr + base, keys, cols_d, seq_len, head_dim)
        v = _load_tile(V_ptr + base, keys, cols_d, seq_len, head_dim)
        s = tl.dot(q, tl.trans(k)).to(ACC) * sm_scale  # (BLOCK_M, BLOCK_N): one tile of S, never stored
        s = tl.where(_causal(keys[None, :] < seq_len, rows, keys, CAUSAL), s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)  # rescale what was summed under the old max
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(ACC)
        m_i = m_new
    _store_tile(O_ptr + base, acc / l_i[:, None], rows, cols_d, seq_len, head_dim)
    tl.store(LSE_ptr + bh * seq_len + rows, m_i + tl.log(l_i), mask=rows < seq_len)


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
    _, rows, bh, base = _program_block(seq_len, head_dim, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    o = _load_tile(O_ptr + base, rows, cols_d, seq_len, head_dim).to(ACC)
    do = _load_tile(DO_ptr + base, rows, cols_d, seq_len, head_dim).to(ACC)
    tl.store(Delta_ptr + bh * seq_len + rows, tl.sum(o * do, axis=1), mask=rows < seq_len)


@_autotuned("dkdv")
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
    start_n, keys, bh, base = _program_block(seq_len, head_dim, BLOCK_N)
    cols_d = tl.arange(0, BLOCK_D)
    k = _load_tile(K_ptr + base, keys, cols_d, seq_len, head_dim)
    v = _load_tile(V_ptr + base, keys, cols_d, seq_len, head_dim)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    # Causal: queries before this key block never see it; start at the block holding query start_n.
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for start_m in range(lo, seq_len, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q, do, lse, delta = _load_queries(Q_ptr + base, DO_ptr + base, LSE_ptr + bh * seq_len, Delta_ptr + bh * seq_len,
                                          rows, seq_len, head_dim, BLOCK_D, ACC)
        p = _probs(q, k, lse, rows, keys, sm_scale, seq_len, CAUSAL, ACC)
        dv += tl.dot(tl.trans(p).to(do.dtype), do).to(ACC)
        ds = _dscores(p, do, v, delta, ACC)
        dk += tl.dot(tl.trans(ds).to(q.dtype), q).to(ACC)
    _store_tile(DK_ptr + base, dk * sm_scale, keys, cols_d, seq_len, head_dim)
    _store_tile(DV_ptr + base, dv, keys, cols_d, seq_len, head_dim)


@_autotuned("dq")
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
    start_m, rows, bh, base = _program_block(seq_len, head_dim, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    q, do, lse, delta = _load_queries(Q_ptr + base, DO_ptr + base, LSE_ptr + bh * seq_len, Delta_ptr + bh * seq_len,
                                      rows, seq_len, head_dim, BLOCK_D, ACC)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    for start_n in range(0, _causal_end(start_m, seq_len, BLOCK_M, CAUSAL), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k = _load_tile(K_ptr + base, keys, cols_d, seq_len, head_dim)
        v = _load_tile(V_ptr + base, keys, cols_d, seq_len, head_dim)
        p = _probs(q, k, lse, rows, keys, sm_scale, seq_len, CAUSAL, ACC)
        ds = _dscores(p, do, v, delta, ACC)
        dq += tl.dot(ds.to(k.dtype), k).to(ACC)
    _store_tile(DQ_ptr + base, dq * sm_scale, rows, cols_d, seq_len, head_dim)


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
    if bh:
        # BLOCK_M, BLOCK_N, num_warps and num_stages come from the autotuner (_CONFIGS), or _blocks.
        _launch(
            _attn_fwd_kernel, lambda meta: (triton.cdiv(seq_len, meta["BLOCK_M"]), bh),
            q3, k3, v3, o, lse, scale, seq_len, head_dim,
            head_dim=head_dim, dtype=q.dtype, CAUSAL=causal, BLOCK_D=_block_d(head_dim), ACC=acc_dtype(q.dtype),
        )
    return o.view(q.shape), lse.view(q.shape[:-1])


def attention_backward(q, k, v, o, lse, do, causal: bool = False, sm_scale: float | None = None):
    """dQ, dK, dV from the saved O and L, recomputing P tile by tile."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    q3, k3, v3, o3, do3 = _heads(q), _heads(k), _heads(v), _heads(o), _heads(do.to(q.dtype))
    lse2 = lse.reshape(-1, q3.shape[1]).contiguous()
    bh, seq_len, head_dim = q3.shape
    block_d = _block_d(head_dim)
    acc = acc_dtype(q.dtype)
    delta = torch.empty_like(lse2)
    dq, dk, dv = torch.empty_like(q3), torch.empty_like(k3), torch.empty_like(v3)
    if bh:
        block_m = _blocks(head_dim, q.dtype)[0] if interpreted() else PREPROCESS_BLOCK_M
        _attn_bwd_preprocess_kernel[(triton.cdiv(seq_len, block_m), bh)](
            o3, do3, delta, seq_len, head_dim, BLOCK_M=block_m, BLOCK_D=block_d, ACC=acc,
        )
        # One program per BLOCK_N keys.
        _launch(
            _attn_bwd_dkdv_kernel, lambda meta: (triton.cdiv(seq_len, meta["BLOCK_N"]), bh),
            q3, k3, v3, do3, lse2, delta, dk, dv, scale, seq_len, head_dim,
            head_dim=head_dim, dtype=q.dtype, CAUSAL=causal, BLOCK_D=block_d, ACC=acc,
        )
        _launch(
            _attn_bwd_dq_kernel, lambda meta: (triton.cdiv(seq_len, meta["BLOCK_M"]), bh),
            q3, k3, v3, do3, lse2, delta, dq, scale, seq_len, head_dim,
            head_dim=head_dim, dtype=q.dtype, CAUSAL=causal, BLOCK_D=block_d, ACC=acc,
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
