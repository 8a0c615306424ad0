"""Attention with recompute (FlashAttention-2 style): no T×T tensor is ever stored or allocated.

Forward, for one query head with q of shape (T_q, D), its K/V head's k, v of shape (T_k, D) and
scale c = sm_scale (default 1/√D):
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
program writes, so no atomics are needed.

Masks. Causal keeps key j ≤ i + T_k − T_q for query i: the mask is aligned to the bottom-right
corner of S, as FlashAttention 2 does (with T_q = T_k, j ≤ i; with T_q > T_k the first T_q − T_k
queries see no key: their O is 0, their L +∞, their gradients 0). A query block's walk over keys
stops at its last query's diagonal, and a key block's walk over queries starts at its first key's:
the tiles above the diagonal are never visited; only the tiles the diagonal crosses need the
element mask. Packed sequences (below) mask each document's keys to its own queries the same way.

Grouped-query attention (GQA; MQA when H_kv = 1): q has H heads, k and v H_kv, with G = H / H_kv;
query head h reads K/V head h // G. Per layer and token the KV cache holds 2·H_kv·D elements
instead of 2·H·D: G times less (Llama-3-8B: H 32, H_kv 8, D 128 → 4 KB rather than 16 KB per
token and layer in bfloat16). In the forward and dQ kernels each query head's programs read its
group's K/V head; the G heads of a group are consecutive on grid axis 1, so their programs run close
together and can find K and V in L2: the DRAM minimum is K and V once (not measured: no GPU here).
The backward sums dK and dV over the group's G query heads: dK_kv = Σ_g dK_g, dV_kv = Σ_g dV_g.
Each dK/dV program loops over its group's heads itself, in a fixed order, keeping dK and dV
in registers: deterministic and without atomics or extra memory, at the cost of G times
fewer programs, each G times longer (B·H_kv·⌈T_k/BLOCK_N⌉ programs: 512–1,024 at Llama-3-8B's
B 1, H_kv 8, T 8192, still several per SM). Per-head partials summed afterwards would write B·H·T_k·D
elements for each of dK and dV and read them back, G times the gradient itself; atomics would sum in an
order that changes from run to run.

Memory traffic (elements; each tensor once, the DRAM minimum): forward reads q (B·H·T_q·D), k and v
(B·H_kv·T_k·D each), writes O (B·H·T_q·D) and L (B·H·T_q); backward reads q, k, v, O, dO, L and
writes dQ, dK, dV and D (B·H·T_q, then read again). The work is 4·B·H·T_q·T_k·D FLOPs forward and
10·B·H·T_q·T_k·D backward (dense; about half with a causal mask at T_q = T_k): compute-bound.

Layouts. ``attention(q, k, v)``: q (..., H, T_q, D), k and v (..., H_kv, T_k, D), as
``scaled_dot_product_attention(..., enable_gqa=True)`` takes them (dim −3 holds the heads; a
(T, D) input is one head). ``attention_varlen`` takes packed sequences as FlashAttention's
``flash_attn_varlen_func`` does: q (total_q, H, D), k and v (total_k, H_kv, D), several documents
laid end to end; ``cu_seqlens_q`` and ``cu_seqlens_k``, int32 (n_docs + 1,), hold where each
document starts (0 first, the total last), and ``max_seqlen_q`` / ``max_seqlen_k`` the longest
document (computed from cu_seqlens when not given). For self-attention one ``cu_seqlens`` serves
both (cu_seqlens_k defaults to cu_seqlens_q). Each query sees only its own document's keys (and,
causal, only those up to its diagonal). One program handles one block of one document's queries
(or keys) for one head: a tile that straddles the document's end is masked there, and a program
whose block starts past its document's end returns at once, so no tile of another document is
ever visited. L comes back as (H, total_q), as FlashAttention's varlen API returns it.

Block sizes, warps and pipeline stages are autotuned on the GPU from a short list per target
(sm_75, sm_86, sm_89, sm_80, sm_90, gfx942: kernels._common.target_name names a launch's GPU),
head-dim class and dtype (_CONFIGS), each checked ahead of time to compile without spilling and to
fit shared memory; the CPU interpreter runs one small configuration (_blocks).

Limitations: head dim up to 256 (padded to a power of two ≥ 16 inside the kernels), one head dim
for q, k and v; no dropout, no attention bias or sliding window; float16/float32/float64 everywhere,
bfloat16 on a GPU (on a T4 too: Triton converts it in integer arithmetic there, and every tl.dot on
sm_75 runs on FMAs in float32). A GPU of no listed target uses its nearest's list (target_name),
unchecked: where an entry needs more shared memory than the GPU has, the autotuner skips it, and a
cell whose every entry is too large fails. Grid axis 2 counts the batch rows (the product of q's
dims before H) or the documents: at most 65,535 on CUDA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._common import DoesNotFit, acc_dtype, acc_torch_dtype, autocast_to_lower, check_floating, interpreted, target_name

MAX_HEAD_DIM = 256

# ----------------------------------------------------------------------------- configurations

# (BLOCK_M, BLOCK_N, num_warps, num_stages) of each tiled kernel, by target, head-dim class (BLOCK_D
# ≤ 64, ≤ 128 or ≤ 256) and dtype class: a row per such cell, holding the fwd, dq and dkdv kernels' entries
# in that order (_CONFIGS[kernel][cell] reads one kernel's column). BLOCK_M counts query rows, BLOCK_N
# keys; the dK/dV kernel gives each program BLOCK_N keys and walks the queries BLOCK_M at a time.
# Every entry compiles without a spill and within the target's shared memory (float64 may spill: it
# is for checks, not speed; its small tiles and few stages are there to fit shared memory).
# `python -m kernels.compile_check --op attention --full` compiles each entry the pruning keeps. Two
# entries per cell in 16 and 32 bits, where two fit, leave the autotuner a choice on the GPU; float64 gets
# one. At D 256 a tile row is 256 wide: blocks shrink (16–64) and stages drop to 1–2 to stay in registers
# and shared memory, most on gfx942 (64 KB of LDS). The packed path can differ: on sm_90 in fp32 at D 128,
# dK/dV with 32 × 32 blocks spills 24 B there (not batched), so that cell keeps two 16 × 64 entries.
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
    ("sm_90", 128, "fp32"):    ([(128, 32, 8, 3), (64, 32, 4, 3)],  [(128, 32, 8, 2), (64, 32, 4, 3)],  [(16, 64, 8, 3), (16, 64, 8, 2)]),
    ("sm_90", 64, "fp64"):     ([(32, 32, 4, 2)],                   [(32, 32, 4, 2)],                   [(16, 32, 4, 1)]),
    ("sm_90", 128, "fp64"):    ([(16, 32, 4, 2)],                   [(16, 32, 4, 2)],                   [(16, 32, 4, 1)]),
    ("gfx942", 64, "16-bit"):  ([(128, 64, 4, 2), (128, 32, 4, 2)], [(128, 64, 4, 2), (128, 32, 4, 2)], [(16, 128, 4, 2), (64, 64, 4, 2)]),
    ("gfx942", 128, "16-bit"): ([(128, 64, 4, 2), (128, 32, 4, 2)], [(64, 64, 4, 2), (128, 32, 4, 2)],  [(32, 64, 4, 2), (64, 32, 4, 2)]),
    ("gfx942", 64, "fp32"):    ([(128, 64, 4, 2), (128, 32, 4, 2)], [(128, 32, 4, 2), (64, 64, 4, 2)],  [(64, 64, 4, 2), (64, 32, 4, 2)]),
    ("gfx942", 128, "fp32"):   ([(64, 32, 4, 2)],                   [(64, 16, 4, 2)],                   [(64, 32, 4, 2), (32, 32, 4, 2)]),
    ("gfx942", 64, "fp64"):    ([(32, 32, 4, 1)],                   [(32, 32, 4, 1)],                   [(16, 32, 4, 1)]),
    ("gfx942", 128, "fp64"):   ([(32, 32, 4, 1)],                   [(32, 16, 4, 1)],                   [(32, 16, 4, 1)]),
    ("sm_80", 256, "16-bit"):  ([(64, 32, 8, 2), (32, 32, 4, 2)],   [(64, 32, 8, 2), (32, 32, 4, 2)],   [(16, 32, 8, 2), (16, 64, 8, 1)]),
    ("sm_80", 256, "fp32"):    ([(16, 32, 4, 1), (16, 16, 4, 1)],   [(16, 32, 4, 1), (16, 16, 4, 1)],   [(16, 32, 8, 2)]),
    ("sm_80", 256, "fp64"):    ([(16, 16, 4, 1)],                   [(16, 16, 4, 1)],                   [(16, 16, 4, 1)]),
    ("sm_90", 256, "16-bit"):  ([(64, 64, 8, 2), (64, 32, 8, 2)],   [(64, 32, 8, 2), (32, 32, 4, 2)],   [(16, 64, 8, 1), (16, 32, 8, 2)]),
    ("sm_90", 256, "fp32"):    ([(32, 32, 4, 2), (16, 32, 4, 1)],   [(32, 32, 4, 2), (16, 32, 4, 1)],   [(32, 32, 8, 2), (16, 32, 8, 2)]),
    ("sm_90", 256, "fp64"):    ([(16, 16, 4, 1)],                   [(16, 16, 4, 1)],                   [(16, 16, 4, 1)]),
    ("gfx942", 256, "16-bit"): ([(64, 32, 4, 1), (32, 32, 4, 1)],   [(32, 32, 4, 1), (32, 16, 4, 1)],   [(32, 16, 4, 1), (16, 32, 4, 1)]),
    ("gfx942", 256, "fp32"):   ([(32, 16, 4, 1), (16, 16, 4, 1)],   [(32, 16, 4, 1), (16, 16, 4, 1)],   [(32, 16, 4, 1), (16, 16, 4, 1)]),
    ("gfx942", 256, "fp64"):   ([(16, 16, 4, 1)],                   [(16, 16, 4, 1)],                   [(16, 16, 4, 1)]),
    # sm_75 (T4): tl.dot on FMAs, no pipelining (one stage), 64 KB of shared memory; 16-bit tiles enter the forward's
    # and dQ's dots in float32 (_dot_dtype), so they take float32's entries there. An empty list: no entry fits, the host refuses
    # (_refuse): at D 256 the dK/dV kernel's four 16 × 256 float32 tiles are 64 KB, plus 1 KB; in float64 the
    # dK/dV kernel from D 128 on, the others at D 256.
    ("sm_75", 64, "16-bit"):   ([(64, 32, 8, 1), (32, 32, 8, 1)],   [(64, 32, 8, 1), (32, 32, 8, 1)],   [(32, 32, 8, 1), (16, 16, 4, 1)]),
    ("sm_75", 128, "16-bit"):  ([(32, 32, 8, 1), (32, 16, 8, 1)],   [(16, 32, 4, 1), (16, 16, 4, 1)],   [(16, 32, 8, 1), (16, 16, 4, 1)]),
    ("sm_75", 256, "16-bit"):  ([(32, 16, 8, 1), (16, 16, 8, 1)],   [(16, 16, 8, 1), (16, 16, 4, 1)],   []),
    ("sm_75", 64, "fp32"):     ([(64, 32, 8, 1), (32, 32, 8, 1)],   [(64, 32, 8, 1), (32, 32, 8, 1)],   [(32, 32, 8, 1), (16, 16, 4, 1)]),
    ("sm_75", 128, "fp32"):    ([(32, 32, 8, 1), (32, 16, 8, 1)],   [(16, 32, 4, 1), (16, 16, 4, 1)],   [(16, 32, 4, 1), (16, 16, 4, 1)]),
    ("sm_75", 256, "fp32"):    ([(32, 16, 8, 1), (16, 16, 8, 1)],   [(16, 16, 8, 1), (16, 16, 4, 1)],   []),
    ("sm_75", 64, "fp64"):     ([(32, 32, 4, 1)],                   [(32, 32, 4, 1)],                   [(32, 16, 4, 1)]),
    ("sm_75", 128, "fp64"):    ([(32, 16, 4, 1)],                   [(16, 16, 4, 1)],                   []),
    ("sm_75", 256, "fp64"):    ([],                                 [],                                 []),
    # sm_86 and sm_89 (99 KB): sm_80's entries where they fit and do not spill there, smaller ones where not.
    ("sm_86", 64, "16-bit"):   ([(128, 64, 8, 3), (64, 64, 4, 3)],  [(128, 64, 8, 3), (64, 64, 4, 3)],  [(64, 32, 4, 3), (32, 32, 4, 3)]),
    ("sm_86", 64, "fp32"):     ([(128, 64, 8, 2), (64, 64, 4, 3)],  [(128, 32, 8, 3), (64, 32, 4, 3)],  [(32, 32, 4, 2), (32, 32, 8, 3)]),
    ("sm_86", 128, "16-bit"):  ([(128, 32, 8, 3), (64, 64, 8, 3)],  [(64, 32, 4, 3), (64, 64, 8, 2)],   [(32, 64, 8, 3), (16, 64, 8, 3)]),
    ("sm_86", 128, "fp32"):    ([(64, 32, 8, 2), (32, 32, 8, 3)],   [(32, 32, 8, 3)],                   [(32, 32, 8, 3), (16, 64, 8, 3)]),
    ("sm_86", 256, "16-bit"):  ([(64, 32, 8, 2), (32, 32, 4, 2)],   [(32, 32, 4, 2), (16, 32, 8, 2)],   [(16, 32, 8, 2), (16, 64, 8, 1)]),
    ("sm_86", 256, "fp32"):    ([(16, 32, 4, 1), (16, 16, 4, 1)],   [(16, 32, 4, 1), (16, 16, 4, 1)],   [(16, 16, 4, 1)]),
    ("sm_86", 64, "fp64"):     ([(32, 32, 4, 2)],                   [(32, 32, 4, 2)],                   [(16, 32, 4, 1)]),
    ("sm_86", 128, "fp64"):    ([(16, 32, 4, 2)],                   [(16, 32, 4, 1)],                   [(16, 16, 4, 1)]),
    ("sm_86", 256, "fp64"):    ([(16, 16, 4, 1)],                   [],                                 []),
}
# sm_89 has sm_86's shared memory, registers and warps per SM: the same entries.
_CELLS.update({("sm_89", *cell[1:]): entries for cell, entries in list(_CELLS.items()) if cell[0] == "sm_86"})
_CONFIGS = {kernel: {cell: entries[i] for cell, entries in _CELLS.items()} for i, kernel in enumerate(_KERNELS)}

PREPROCESS_BLOCK_M = 64


def _dtype_class(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float64: "fp64"}.get(dtype, "16-bit")


def _head_dim_class(block_d: int) -> int:
    return next(c for c in (64, 128, 256) if block_d <= c)


def _block_d(head_dim: int) -> int:
    """The head dim padded to a power of two; tl.dot needs every dimension ≥ 16."""
    return max(16, triton.next_power_of_2(head_dim))


def _blocks(head_dim: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D) in the CPU interpreter: one small configuration, since
    autotuning there would only multiply test time. On a GPU the autotuner picks BLOCK_M and BLOCK_N."""
    return 32, 32, _block_d(head_dim)


_TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32, torch.float64: tl.float64}


def _dot_dtype(dtype: torch.dtype, kernel: str):
    """The dtype the tiles of ``kernel`` ("fwd", "dq", "dkdv") enter tl.dot in: the inputs', but float32 for
    16-bit inputs to the forward and dQ kernels on sm_75 (a T4).

    Triton has no tensor-core tl.dot there: every dot runs on FMAs in float32, converting 16-bit operands
    inside it, which takes more registers than float32 tiles (the dQ kernel spilled 200–400 B at D 128 in
    every block size). Converted once at load, the products are the same; P and dS then enter their dots
    unrounded, as they do in float32. The dK/dV kernel is the other way round: upcast, it spilled 8–48 B at
    D 128; in 16 bits it does not.
    """
    if dtype in (torch.float16, torch.bfloat16) and kernel != "dkdv" and not interpreted() and target_name() == "sm_75":
        return tl.float32
    return _TL_DTYPES[dtype]


def _config(block_m: int, block_n: int, num_warps: int, num_stages: int) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=num_warps, num_stages=num_stages)


def _all_configs(kernel: str) -> list[triton.Config]:
    """Every configuration of any cell, once: the autotune list that the pruning selects from."""
    unique = dict.fromkeys(entry for cell in _CONFIGS[kernel].values() for entry in cell)
    return [_config(*entry) for entry in unique]


def _prune(kernel: str):
    """early_config_prune for one kernel: keep the configurations of the target's cell, and drop
    blocks longer than the sequences need (a 40-token sequence does not need 128-row blocks)."""

    def prune(configs, named_args, **kwargs):
        cell = (target_name(), _head_dim_class(kwargs["BLOCK_D"]), _dtype_class(named_args["Q_ptr"].dtype))
        wanted = _CONFIGS[kernel][cell]
        kept = [c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in wanted]
        longest = max(16, triton.next_power_of_2(max(named_args["seq_len_q"], named_args["seq_len_k"])))
        short = [c for c in kept if max(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) <= longest]
        return short or [min(kept, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]

    return prune


def _autotuned(kernel: str):
    """triton.autotune over _CONFIGS[kernel], pruned to the target, head dim and dtype of the launch."""
    return triton.autotune(configs=_all_configs(kernel), key=["seq_len_q", "seq_len_k", "head_dim", "CAUSAL", "VARLEN"],
                           prune_configs_by={"early_config_prune": _prune(kernel)})


_WHAT = {"_attn_fwd_kernel": ("fwd", "forward"), "_attn_bwd_dq_kernel": ("dq", "backward (dQ)"),
         "_attn_bwd_dkdv_kernel": ("dkdv", "backward (dK, dV)")}


def _refuse(kernel, head_dim: int, dtype: torch.dtype) -> None:
    """Raise DoesNotFit when no entry of the launch's cell fits the GPU (an empty list in _CELLS), saying what does."""
    name, what = _WHAT[kernel.fn.__name__]
    target, head_dim_class, dtype_class = target_name(), _head_dim_class(_block_d(head_dim)), _dtype_class(dtype)
    if _CONFIGS[name].get((target, head_dim_class, dtype_class), [None]):
        return
    from ._target import GPUS

    gpu = GPUS[target]
    dims = [d for d in (64, 128, 256) if _CONFIGS[name].get((target, d, dtype_class))]
    dtypes = [c for c in ("16-bit", "fp32") if _CONFIGS[name].get((target, head_dim_class, c))]
    instead = [f"a head dim of at most {dims[-1]}"] if dims else []
    instead += [{"16-bit": "float16 or bfloat16", "fp32": "float32"}[c] for c in dtypes if c != dtype_class][:1]
    raise DoesNotFit(
        f"attention's {what} at head dim {head_dim} in {str(dtype).removeprefix('torch.')} does not fit this GPU "
        f"({gpu.device}, {target}): its smallest tiles need more shared memory than the {gpu.max_shared_per_block // 1024} KB "
        f"a block has there. Use {' or '.join(instead + ['a GPU with more shared memory per block'])}.")


def _launch(kernel, grid, *args, head_dim: int, dtype: torch.dtype, **constexprs) -> None:
    """kernel[grid](*args, **constexprs): autotuned on a GPU (refused where nothing fits it), with _blocks'
    configuration in the interpreter."""
    if interpreted():
        block_m, block_n, _ = _blocks(head_dim, dtype)
        kernel.fn[grid](*args, BLOCK_M=block_m, BLOCK_N=block_n, **constexprs)
    else:
        _refuse(kernel, head_dim, dtype)
        kernel[grid](*args, **constexprs)


# ----------------------------------------------------------------------------- tiles shared by the kernels


@triton.jit
def _sequence(CU_ptr, b, seq_len, VARLEN: tl.constexpr):
    """Sequence b's first token on its tensor's token axis (int64) and its length: a packed document's,
    read from cu_seqlens, when VARLEN; else a batch row's, 0 and seq_len."""
    if VARLEN:
        first = tl.load(CU_ptr + b)
        length = tl.load(CU_ptr + b + 1) - first
        first = first.to(tl.int64)
    else:
        first = b * 0
        length = seq_len
    return first, length


@triton.jit
def _geometry(CU_Q_ptr, CU_K_ptr, b, h, hk, seq_len_q, seq_len_k, stride_qb, stride_qh, stride_qt,
              stride_kb, stride_kh, stride_kt, stride_lb, stride_lh, VARLEN: tl.constexpr):
    """For sequence b, query head h and K/V head hk (b, h, hk in int64: B·H·T·D may pass 2³¹): T_q, T_k and
    where their rows start in Q (and O, dO, dQ), in K (V, dK, dV) and in L (D)."""
    q_first, T_q = _sequence(CU_Q_ptr, b, seq_len_q, VARLEN)
    k_first, T_k = _sequence(CU_K_ptr, b, seq_len_k, VARLEN)
    q_off = b * stride_qb + h * stride_qh + q_first * stride_qt
    k_off = b * stride_kb + hk * stride_kh + k_first * stride_kt
    return T_q, T_k, q_off, k_off, b * stride_lb + h * stride_lh + q_first


@triton.jit
def _load_tile(ptr, rows, cols_d, n_rows, stride_t, head_dim):
    """The (rows, BLOCK_D) tile of one head's (n_rows, D) matrix at ptr, rows stride_t apart; rows past
    n_rows (the sequence's end: the next document's, when packed) and columns past D read as 0."""
    mask = (rows[:, None] < n_rows) & (cols_d[None, :] < head_dim)
    return tl.load(ptr + rows[:, None] * stride_t + cols_d[None, :], mask=mask, other=0.0)


@triton.jit
def _store_tile(ptr, tile, rows, cols_d, n_rows, stride_t, head_dim):
    """Store a tile, cast to ptr's dtype, where _load_tile reads it; rows past n_rows and columns past D are left alone."""
    mask = (rows[:, None] < n_rows) & (cols_d[None, :] < head_dim)
    tl.store(ptr + rows[:, None] * stride_t + cols_d[None, :], tile.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _load_queries(Q_ptr, DO_ptr, LSE_ptr, Delta_ptr, rows, T_q, stride_qt, head_dim, BLOCK_D: tl.constexpr,
                  ACC: tl.constexpr, DOT: tl.constexpr):
    """What the backward needs of a block of query rows: q and dO (in the dtype of the dots), and the row scalars L and D."""
    cols_d = tl.arange(0, BLOCK_D)
    q = _load_tile(Q_ptr, rows, cols_d, T_q, stride_qt, head_dim).to(DOT)
    do = _load_tile(DO_ptr, rows, cols_d, T_q, stride_qt, head_dim).to(DOT)
    lse = tl.load(LSE_ptr + rows, mask=rows < T_q, other=0.0).to(ACC)
    delta = tl.load(Delta_ptr + rows, mask=rows < T_q, other=0.0).to(ACC)
    return q, do, lse, delta


@triton.jit
def _visible(rows, keys, T_q, T_k, CAUSAL: tl.constexpr):
    """The (query, key) pairs of a tile that count: both inside the sequence and, if CAUSAL, key j ≤ i + T_k − T_q
    (the diagonal through S's bottom-right corner)."""
    valid = (rows[:, None] < T_q) & (keys[None, :] < T_k)
    if CAUSAL:
        valid = valid & (keys[None, :] <= rows[:, None] + (T_k - T_q))
    return valid


@triton.jit
def _keys_end(start_m, T_q, T_k, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """Where a query block's walk over keys stops: causal, keys past its last query's diagonal are never seen."""
    return tl.minimum(T_k, start_m + BLOCK_M + (T_k - T_q)) if CAUSAL else T_k


@triton.jit
def _queries_start(start_n, T_q, T_k, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """Where a key block's walk over queries starts: causal, at the block holding the first query that sees key start_n."""
    return (tl.maximum(start_n - (T_k - T_q), 0) // BLOCK_M) * BLOCK_M if CAUSAL else 0


@triton.jit
def _probs(q, k, lse, rows, keys, sm_scale, T_q, T_k, CAUSAL: tl.constexpr, ACC: tl.constexpr):
    """P = exp(S − L) of one (BLOCK_M, BLOCK_N) tile, 0 where a pair does not count."""
    s = tl.dot(q, tl.trans(k)).to(ACC) * sm_scale
    # Recompute P from one saved scalar per row: cheaper than reading a T×T P back.
    return tl.where(_visible(rows, keys, T_q, T_k, CAUSAL), tl.exp(s - lse[:, None]), 0.0)


@triton.jit
def _dscores(p, do, v, delta, ACC: tl.constexpr):
    """dS = P ⊙ (dP − D) with dP = dO vᵀ, for one tile."""
    dp = tl.dot(do, tl.trans(v)).to(ACC)
    return p * (dp - delta[:, None])


# ----------------------------------------------------------------------------- kernels
# Q, O, dO and dQ share one layout, K, V, dK and dV another, L and D a third: (B, H, T, D) and (B, H, T)
# for a batch, (total, H, D) and (H, total) for packed documents (stride_qb = stride_kb = stride_lb = 0).
# Grid axis 0 walks a sequence's blocks, axis 1 the heads, axis 2 the batch rows or documents.


@_autotuned("fwd")
@triton.jit
def _attn_fwd_kernel(
    Q_ptr,  # (B, H, T_q, D) queries, or (total_q, H, D) packed
    K_ptr,  # (B, H_kv, T_k, D) keys, or (total_k, H_kv, D) packed
    V_ptr,  # values, shaped as K
    O_ptr,  # output, shaped as Q
    LSE_ptr,  # (B, H, T_q), or (H, total_q): saved L = m + log ℓ per query row
    CU_Q_ptr,  # (n_docs + 1,) int32: where each document's queries start (VARLEN only)
    CU_K_ptr,  # (n_docs + 1,) int32: where each document's keys start (VARLEN only)
    sm_scale,
    seq_len_q,  # T_q, or the longest document's (VARLEN)
    seq_len_k,  # T_k, or the longest document's (VARLEN)
    head_dim,
    group,  # G = H / H_kv query heads per K/V head
    stride_qb, stride_qh, stride_qt,
    stride_kb, stride_kh, stride_kt,
    stride_lb, stride_lh,
    CAUSAL: tl.constexpr,
    VARLEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
    DOT: tl.constexpr,  # the dtype tiles enter tl.dot in (_dot_dtype)
):
    """O = softmax(c·q kᵀ) v for one block of queries of one head, walking its K/V head's key blocks with an online softmax."""
    start_m = tl.program_id(0) * BLOCK_M
    h = tl.program_id(1).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    T_q, T_k, q_off, k_off, l_off = _geometry(CU_Q_ptr, CU_K_ptr, b, h, h // group, seq_len_q, seq_len_k, stride_qb,
                                              stride_qh, stride_qt, stride_kb, stride_kh, stride_kt, stride_lb, stride_lh, VARLEN)
    if start_m >= T_q:  # past a short document's end: nothing to compute
        return
    rows = start_m + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    q = _load_tile(Q_ptr + q_off, rows, cols_d, T_q, stride_qt, head_dim).to(DOT)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_M], dtype=ACC)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    for start_n in range(0, _keys_end(start_m, T_q, T_k, BLOCK_M, CAUSAL), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k = _load_tile(K_ptr + k_off, keys, cols_d, T_k, stride_kt, head_dim).to(DOT)
        v = _load_tile(V_ptr + k_off, keys, cols_d, T_k, stride_kt, head_dim).to(DOT)
        s = tl.dot(q, tl.trans(k)).to(ACC) * sm_scale  # (BLOCK_M, BLOCK_N): one tile of S, never stored
        s = tl.where(_visible(rows, keys, T_q, T_k, CAUSAL), s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row that has seen no key yet keeps m = −∞: shift it by 0 instead, so that exp gives 0, not NaN.
        m_shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        p = tl.exp(s - m_shift[:, None])
        alpha = tl.exp(m_i - m_shift)  # rescale what was summed under the old max
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(ACC)
        m_i = m_new
    # A query that sees no key (causal with T_q > T_k): O = 0 and L = +∞, so that the backward rebuilds P = 0.
    seen = l_i > 0
    l_i = tl.where(seen, l_i, 1.0)
    _store_tile(O_ptr + q_off, acc / l_i[:, None], rows, cols_d, T_q, stride_qt, head_dim)
    tl.store(LSE_ptr + l_off + rows, tl.where(seen, m_i + tl.log(l_i), float("inf")), mask=rows < T_q)


@triton.jit
def _attn_bwd_preprocess_kernel(
    O_ptr,  # forward output, shaped as Q
    DO_ptr,  # upstream gradient, shaped as Q
    Delta_ptr,  # result D = rowsum(dO ⊙ O), shaped as L
    n_rows,  # T_q, or total_q when packed: D is per row, whatever document the row belongs to
    head_dim,
    stride_qb, stride_qh, stride_qt,
    stride_lb, stride_lh,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
):
    """D = rowsum(dO ⊙ O): the softmax backward's row scalar, computed before touching S."""
    start = tl.program_id(0).to(tl.int64) * BLOCK_M  # in 64 bits: total_q·H·D may pass 2³¹
    h = tl.program_id(1).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    off = b * stride_qb + h * stride_qh + start * stride_qt
    rows, cols_d = tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_D)
    o = _load_tile(O_ptr + off, rows, cols_d, n_rows - start, stride_qt, head_dim).to(ACC)
    do = _load_tile(DO_ptr + off, rows, cols_d, n_rows - start, stride_qt, head_dim).to(ACC)
    tl.store(Delta_ptr + b * stride_lb + h * stride_lh + start + rows, tl.sum(o * do, axis=1), mask=rows < n_rows - start)


@_autotuned("dkdv")
@triton.jit
def _attn_bwd_dkdv_kernel(
    Q_ptr,  # (B, H, T_q, D), or (total_q, H, D) packed
    K_ptr,  # (B, H_kv, T_k, D), or (total_k, H_kv, D) packed
    V_ptr,  # shaped as K
    DO_ptr,  # upstream gradient, shaped as Q
    LSE_ptr,  # saved L: (B, H, T_q), or (H, total_q)
    Delta_ptr,  # D from the preprocess, shaped as L
    DK_ptr,  # result, shaped as K
    DV_ptr,  # result, shaped as K
    CU_Q_ptr,  # (n_docs + 1,) int32 (VARLEN only)
    CU_K_ptr,  # (n_docs + 1,) int32 (VARLEN only)
    sm_scale,
    seq_len_q,
    seq_len_k,
    head_dim,
    group,  # G = H / H_kv
    stride_qb, stride_qh, stride_qt,
    stride_kb, stride_kh, stride_kt,
    stride_lb, stride_lh,
    CAUSAL: tl.constexpr,
    VARLEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
    DOT: tl.constexpr,
):
    """dV = Σ_g Σ_m Pᵀ dO and dK = c·Σ_g Σ_m dSᵀ q for one key block of one K/V head, summed over the G query
    heads g of its group and their query blocks m, P rebuilt as exp(S − L)."""
    start_n = tl.program_id(0) * BLOCK_N
    hk = tl.program_id(1).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    T_q, T_k, _, k_off, _ = _geometry(CU_Q_ptr, CU_K_ptr, b, hk * group, hk, seq_len_q, seq_len_k, stride_qb, stride_qh,
                                      stride_qt, stride_kb, stride_kh, stride_kt, stride_lb, stride_lh, VARLEN)
    if start_n >= T_k:  # past a short document's end: nothing to compute
        return
    keys = start_n + tl.arange(0, BLOCK_N)
    cols_d = tl.arange(0, BLOCK_D)
    k = _load_tile(K_ptr + k_off, keys, cols_d, T_k, stride_kt, head_dim).to(DOT)
    v = _load_tile(V_ptr + k_off, keys, cols_d, T_k, stride_kt, head_dim).to(DOT)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    # Causal: queries before this key block's diagonal never see it; start at the block holding the first that does.
    lo = _queries_start(start_n, T_q, T_k, BLOCK_M, CAUSAL)
    # Sum the group's G query heads here, one after the other in registers: a fixed order, so the same bits
    # every run, and no other program writes these dK, dV rows (atomics would add in the order programs ran;
    # per-head partials would write and read back G times dK and dV).
    for g in range(0, group):
        _, _, q_off, _, l_off = _geometry(CU_Q_ptr, CU_K_ptr, b, hk * group + g, hk, seq_len_q, seq_len_k, stride_qb,
                                          stride_qh, stride_qt, stride_kb, stride_kh, stride_kt, stride_lb, stride_lh, VARLEN)
        for start_m in range(lo, T_q, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            q, do, lse, delta = _load_queries(Q_ptr + q_off, DO_ptr + q_off, LSE_ptr + l_off, Delta_ptr + l_off, rows, T_q,
                                              stride_qt, head_dim, BLOCK_D, ACC, DOT)
            p = _probs(q, k, lse, rows, keys, sm_scale, T_q, T_k, CAUSAL, ACC)
            dv += tl.dot(tl.trans(p).to(do.dtype), do).to(ACC)
            ds = _dscores(p, do, v, delta, ACC)
            dk += tl.dot(tl.trans(ds).to(q.dtype), q).to(ACC)
    _store_tile(DK_ptr + k_off, dk * sm_scale, keys, cols_d, T_k, stride_kt, head_dim)
    _store_tile(DV_ptr + k_off, dv, keys, cols_d, T_k, stride_kt, head_dim)


@_autotuned("dq")
@triton.jit
def _attn_bwd_dq_kernel(
    Q_ptr,  # (B, H, T_q, D), or (total_q, H, D) packed
    K_ptr,  # (B, H_kv, T_k, D), or (total_k, H_kv, D) packed
    V_ptr,  # shaped as K
    DO_ptr,  # upstream gradient, shaped as Q
    LSE_ptr,  # saved L: (B, H, T_q), or (H, total_q)
    Delta_ptr,  # D from the preprocess, shaped as L
    DQ_ptr,  # result, shaped as Q
    CU_Q_ptr,  # (n_docs + 1,) int32 (VARLEN only)
    CU_K_ptr,  # (n_docs + 1,) int32 (VARLEN only)
    sm_scale,
    seq_len_q,
    seq_len_k,
    head_dim,
    group,  # G = H / H_kv
    stride_qb, stride_qh, stride_qt,
    stride_kb, stride_kh, stride_kt,
    stride_lb, stride_lh,
    CAUSAL: tl.constexpr,
    VARLEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
    DOT: tl.constexpr,
):
    """dQ = c·Σ_n dS k for one query block of one head, with dS = P ⊙ (dO vᵀ − D) and P = exp(S − L)."""
    start_m = tl.program_id(0) * BLOCK_M
    h = tl.program_id(1).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    T_q, T_k, q_off, k_off, l_off = _geometry(CU_Q_ptr, CU_K_ptr, b, h, h // group, seq_len_q, seq_len_k, stride_qb,
                                              stride_qh, stride_qt, stride_kb, stride_kh, stride_kt, stride_lb, stride_lh, VARLEN)
    if start_m >= T_q:  # past a short document's end: nothing to compute
        return
    rows = start_m + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    q, do, lse, delta = _load_queries(Q_ptr + q_off, DO_ptr + q_off, LSE_ptr + l_off, Delta_ptr + l_off, rows, T_q,
                                      stride_qt, head_dim, BLOCK_D, ACC, DOT)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    for start_n in range(0, _keys_end(start_m, T_q, T_k, BLOCK_M, CAUSAL), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k = _load_tile(K_ptr + k_off, keys, cols_d, T_k, stride_kt, head_dim).to(DOT)
        v = _load_tile(V_ptr + k_off, keys, cols_d, T_k, stride_kt, head_dim).to(DOT)
        p = _probs(q, k, lse, rows, keys, sm_scale, T_q, T_k, CAUSAL, ACC)
        ds = _dscores(p, do, v, delta, ACC)
        dq += tl.dot(ds.to(k.dtype), k).to(ACC)
    _store_tile(DQ_ptr + q_off, dq * sm_scale, rows, cols_d, T_q, stride_qt, head_dim)


# ----------------------------------------------------------------------------- host


@dataclass(frozen=True)
class _Layout:
    """How the kernels see q, k and v: B batch rows of (H, T, D) heads, or n_docs documents packed in (total, H, D)."""

    batch: int  # B, or n_docs
    heads: int  # H query heads
    kv_heads: int  # H_kv key/value heads
    seq_len_q: int  # T_q, or the longest document's queries
    seq_len_k: int  # T_k, or the longest document's keys
    head_dim: int
    cu_seqlens_q: torch.Tensor | None = None  # (n_docs + 1,) int32, packed only
    cu_seqlens_k: torch.Tensor | None = None

    @property
    def varlen(self) -> bool:
        return self.cu_seqlens_q is not None

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def strides(self, t: torch.Tensor) -> tuple[int, int, int]:
        """(batch row, head, token) strides of a (B, H, T, D) or packed (total, H, D) tensor."""
        return (0, t.stride(1), t.stride(0)) if self.varlen else t.stride()[:3]

    def row_strides(self, lse: torch.Tensor) -> tuple[int, int]:
        """(batch row, head) strides of L or D: (B, H, T_q), or packed (H, total_q); a token's is 1."""
        return (0, lse.stride(0)) if self.varlen else lse.stride()[:2]


def _check_tensors(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_floating(name, t)
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise ValueError("q, k and v must share one dtype and one device")
    if k.shape != v.shape:
        raise ValueError(f"k and v must share one shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q, k and v must share one head dim D (their last dim); got {q.shape[-1]} and {k.shape[-1]}")
    if q.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"head dim {q.shape[-1]} > {MAX_HEAD_DIM} is not supported")


def _check_heads(heads: int, kv_heads: int, where: str) -> None:
    if heads == 0 or kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"q has {heads} heads and k, v have {kv_heads} ({where}): grouped-query attention needs "
                         "H_kv ≥ 1 dividing H, each K/V head shared by H / H_kv query heads")


def _batched(q, k, v):
    """q, k, v as (B, H, T, D) contiguous tensors, and their layout; q (..., H, T_q, D), k and v (..., H_kv, T_k, D)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise ValueError(f"{name} must have shape (..., T, D) or (..., H, T, D); got {tuple(t.shape)}")
    _check_tensors(q, k, v)
    if q.ndim != k.ndim or q.shape[:-3] != k.shape[:-3]:
        raise ValueError(f"q and k must share their batch dims (all but the last three, (H, T, D)); got {tuple(q.shape)} "
                         f"and {tuple(k.shape)}")
    heads, kv_heads = (q.shape[-3], k.shape[-3]) if q.ndim > 2 else (1, 1)
    _check_heads(heads, kv_heads, "dim -3")
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError(f"q has {q.shape[-2]} tokens and k, v have {k.shape[-2]}: attention needs T ≥ 1 of each")
    layout = _Layout(math.prod(q.shape[:-3]), heads, kv_heads, q.shape[-2], k.shape[-2], q.shape[-1])
    return (*(t.reshape(layout.batch, h, t.shape[-2], t.shape[-1]).contiguous()
              for t, h in ((q, heads), (k, kv_heads), (v, kv_heads))), layout)


def _document_lengths(name: str, cu: torch.Tensor, total: int, device: torch.device, what: str) -> torch.Tensor:
    """cu_seqlens checked (int32, 0 first, increasing, the total last): each document's length."""
    if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.ndim != 1 or cu.numel() < 2:
        got = f"{cu.dtype} of shape {tuple(cu.shape)}" if isinstance(cu, torch.Tensor) else type(cu).__name__
        raise ValueError(f"{name} must be an int32 tensor of shape (n_docs + 1,), n_docs ≥ 1; got {got}")
    if cu.device != device:
        raise ValueError(f"{name} is on {cu.device}, q, k and v on {device}: it must be on theirs")
    # Every test asks "is it wrong?", so that under the compile check, where nothing is read back, each answers no;
    # and diff and select, not slices: the check's fake CUDA tensors cannot be sliced without a CUDA build of torch.
    lengths, first, last = torch.diff(cu), cu.select(0, 0), cu.select(0, -1)
    if bool(first != 0):
        raise ValueError(f"{name}[0] = {int(first)}: it must be 0, where the first document starts")
    if bool((lengths <= 0).any()):
        doc = int(torch.nonzero(lengths <= 0)[0, 0])
        raise ValueError(f"{name} must increase: document {doc} runs from {int(cu[doc])} to {int(cu[doc + 1])}")
    if bool(last != total):
        raise ValueError(f"{name}[-1] = {int(last)} must be the number of tokens of {what}, {total}")
    return lengths


def _longest(name: str, given: int | None, lengths: torch.Tensor) -> int:
    if given is None:
        return int(lengths.max())
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise ValueError(f"{name} must be a positive int; got {given!r}")
    if bool(lengths.max() > given):
        raise ValueError(f"{name} = {given} is shorter than the longest document ({int(lengths.max())} tokens)")
    return given


def _packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """q, k, v as contiguous packed (total, H, D) tensors, and their layout, with cu_seqlens checked."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.ndim != 3:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"packed {name} must have shape (total_tokens, heads, D); got {shape}")
    _check_tensors(q, k, v)
    _check_heads(q.shape[1], k.shape[1], "dim 1")
    if cu_seqlens_k is None:  # self-attention: one cu_seqlens for queries and keys
        cu_seqlens_k = cu_seqlens_q
        max_seqlen_k = max_seqlen_q if max_seqlen_k is None else max_seqlen_k
    lengths_q = _document_lengths("cu_seqlens_q", cu_seqlens_q, q.shape[0], q.device, "q")
    lengths_k = _document_lengths("cu_seqlens_k", cu_seqlens_k, k.shape[0], q.device, "k and v")
    if cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must count the same documents; got {cu_seqlens_q.numel() - 1} "
                         f"and {cu_seqlens_k.numel() - 1}")
    layout = _Layout(cu_seqlens_q.numel() - 1, q.shape[1], k.shape[1], _longest("max_seqlen_q", max_seqlen_q, lengths_q),
                     _longest("max_seqlen_k", max_seqlen_k, lengths_k), q.shape[2], cu_seqlens_q, cu_seqlens_k)
    return q.contiguous(), k.contiguous(), v.contiguous(), layout


def _arrange(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None):
    """Check the arguments; q, k, v in the kernels' layout (batched or packed) and that layout."""
    if cu_seqlens_q is None:
        if cu_seqlens_k is not None or max_seqlen_q is not None or max_seqlen_k is not None:
            raise ValueError("cu_seqlens_k, max_seqlen_q and max_seqlen_k describe packed sequences: give cu_seqlens_q too")
        return _batched(q, k, v)
    return _packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def _scale(head_dim: int, sm_scale: float | None) -> float:
    return 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)


def _kernel_args(layout: _Layout, q, k, lse, scale: float) -> tuple:
    """The arguments every tiled kernel takes after its tensors: cu_seqlens, scale, sizes and strides."""
    return (layout.cu_seqlens_q, layout.cu_seqlens_k, scale, layout.seq_len_q, layout.seq_len_k, layout.head_dim,
            layout.group, *layout.strides(q), *layout.strides(k), *layout.row_strides(lse))


def _forward(q, k, v, layout: _Layout, causal: bool, scale: float):
    """O (shaped as q) and L ((B, H, T_q), or (H, total_q) packed) for q, k, v in the kernels' layout."""
    o = torch.empty_like(q)
    rows = (layout.heads, q.shape[0]) if layout.varlen else q.shape[:-1]
    lse = torch.empty(rows, dtype=acc_torch_dtype(q.dtype), device=q.device)
    if layout.batch:
        # BLOCK_M, BLOCK_N, num_warps and num_stages come from the autotuner (_CONFIGS), or _blocks.
        _launch(
            _attn_fwd_kernel, lambda meta: (triton.cdiv(layout.seq_len_q, meta["BLOCK_M"]), layout.heads, layout.batch),
            q, k, v, o, lse, *_kernel_args(layout, q, k, lse, scale),
            head_dim=layout.head_dim, dtype=q.dtype, CAUSAL=causal, VARLEN=layout.varlen,
            BLOCK_D=_block_d(layout.head_dim), ACC=acc_dtype(q.dtype), DOT=_dot_dtype(q.dtype, "fwd"),
        )
    return o, lse


def _backward(q, k, v, o, lse, do, layout: _Layout, causal: bool, scale: float):
    """dQ, dK, dV (shaped as q, k, v) for tensors in the kernels' layout."""
    do = do.reshape(q.shape).to(q.dtype).contiguous()
    block_d, acc = _block_d(layout.head_dim), acc_dtype(q.dtype)
    delta = torch.empty_like(lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if layout.batch:
        block_m = _blocks(layout.head_dim, q.dtype)[0] if interpreted() else PREPROCESS_BLOCK_M
        # D is per query row: a packed q is one long sequence to it.
        n_rows, batch = (q.shape[0], 1) if layout.varlen else (layout.seq_len_q, layout.batch)
        _attn_bwd_preprocess_kernel[(triton.cdiv(n_rows, block_m), layout.heads, batch)](
            o, do, delta, n_rows, layout.head_dim, *layout.strides(q), *layout.row_strides(lse),
            BLOCK_M=block_m, BLOCK_D=block_d, ACC=acc,
        )
        constexprs = dict(head_dim=layout.head_dim, dtype=q.dtype, CAUSAL=causal, VARLEN=layout.varlen, BLOCK_D=block_d, ACC=acc)
        # One program per BLOCK_N keys of one K/V head: it sums its group's query heads itself.
        _launch(
            _attn_bwd_dkdv_kernel, lambda meta: (triton.cdiv(layout.seq_len_k, meta["BLOCK_N"]), layout.kv_heads, layout.batch),
            q, k, v, do, lse, delta, dk, dv, *_kernel_args(layout, q, k, lse, scale), **constexprs,
            DOT=_dot_dtype(q.dtype, "dkdv"),
        )
        _launch(
            _attn_bwd_dq_kernel, lambda meta: (triton.cdiv(layout.seq_len_q, meta["BLOCK_M"]), layout.heads, layout.batch),
            q, k, v, do, lse, delta, dq, *_kernel_args(layout, q, k, lse, scale), **constexprs,
            DOT=_dot_dtype(q.dtype, "dq"),
        )
    return dq, dk, dv


def attention_forward(q, k, v, causal: bool = False, sm_scale: float | None = None, *, cu_seqlens_q=None,
                      cu_seqlens_k=None, max_seqlen_q: int | None = None, max_seqlen_k: int | None = None):
    """O (shaped as q) and L = m + log ℓ per query row: (..., H, T_q), or (H, total_q) for packed sequences
    (given cu_seqlens_q, as attention_varlen takes it). Nothing T×T is allocated."""
    q3, k3, v3, layout = _arrange(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    o, lse = _forward(q3, k3, v3, layout, causal, _scale(layout.head_dim, sm_scale))
    return o.view(q.shape), lse if layout.varlen else lse.view(q.shape[:-1])


def attention_backward(q, k, v, o, lse, do, causal: bool = False, sm_scale: float | None = None, *, cu_seqlens_q=None,
                       cu_seqlens_k=None, max_seqlen_q: int | None = None, max_seqlen_k: int | None = None):
    """dQ, dK, dV from the saved O and L, recomputing P tile by tile; dK and dV summed over each K/V head's group."""
    q3, k3, v3, layout = _arrange(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    o3, lse3 = o.reshape(q3.shape).contiguous(), lse.reshape(-1, lse.shape[-1]).contiguous()
    if not layout.varlen:
        lse3 = lse3.view(layout.batch, layout.heads, layout.seq_len_q)
    dq, dk, dv = _backward(q3, k3, v3, o3, lse3, do, layout, causal, _scale(layout.head_dim, sm_scale))
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)


class AttentionFunction(torch.autograd.Function):
    """Saves q, k, v, O and L only: O(T·D) per head, never O(T²); the layout checked in forward serves backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
        q3, k3, v3, layout = _arrange(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        scale = _scale(layout.head_dim, sm_scale)
        o, lse = _forward(q3, k3, v3, layout, causal, scale)
        ctx.save_for_backward(q3, k3, v3, o, lse)
        ctx.layout, ctx.causal, ctx.scale, ctx.shapes = layout, causal, scale, (q.shape, k.shape, v.shape)
        return o.view(q.shape)

    @staticmethod
    def backward(ctx, do):
        grads = _backward(*ctx.saved_tensors, do, ctx.layout, ctx.causal, ctx.scale)
        return (*(g.view(shape) for g, shape in zip(grads, ctx.shapes)), None, None, None, None, None, None)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """softmax(sm_scale · q kᵀ) v over the last two dims, q (..., H, T_q, D), k and v (..., H_kv, T_k, D);
    matches ``scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale, enable_gqa=True)``
    (causal: bottom-right aligned when T_q ≠ T_k, as FlashAttention 2). Under torch.autocast q, k and v are cast
    to the autocast dtype, as scaled_dot_product_attention's are."""
    q, k, v = autocast_to_lower(q, k, v)
    return AttentionFunction.apply(q, k, v, causal, sm_scale, None, None, None, None)


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor | None = None, max_seqlen_q: int | None = None,
                     max_seqlen_k: int | None = None, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """Attention within each of several documents packed end to end, as ``flash_attn_varlen_func``: q (total_q, H, D),
    k and v (total_k, H_kv, D); cu_seqlens_q and cu_seqlens_k int32 (n_docs + 1,) where the documents start (one
    cu_seqlens for both in self-attention: leave cu_seqlens_k None); max_seqlen_* the longest document (computed if
    None). ``sm_scale`` is flash_attn's ``softmax_scale``. Returns O, (total_q, H, D). Under torch.autocast, cast as
    attention's inputs are."""
    q, k, v = autocast_to_lower(q, k, v)
    return AttentionFunction.apply(q, k, v, causal, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
