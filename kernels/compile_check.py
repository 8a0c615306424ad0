"""Compile every Triton kernel of the course for real GPUs, on a machine without one.

    python -m kernels.compile_check                  # the quick grid (CI): a few minutes on 2 cores
    python -m kernels.compile_check --full           # the full grid below
    python -m kernels.compile_check --op attention --target sm_90 --dtype bf16 fp32
    python -m kernels.compile_check --markdown       # every row as a markdown table (or --json)
    python -m kernels.compile_check --per-kernel     # one row per op, kernel and target: kernels/BENCHMARKS.md

It runs the real host code — the reference ops' forward and backward host functions in
``kernels/``, and the solution host code of notebooks 03–11 (``kernels._notebook_host``) — on
tensors that hold no memory, at GPU-sized shapes, once per target GPU; every launch is compiled
ahead of time for that GPU with the signature, block sizes, num_warps and num_stages the host
code chose (``kernels._target``). It prints one row per (kernel, configuration, dtype, target):
the status, registers, spill bytes, shared memory, warps, stages, and the blocks per SM (CU)
that registers and shared memory allow (``kernels._resources`` says how each is read).

Targets: the GPUs students have, sm_75 (T4, Colab's free GPU: 64 KB of shared memory per block), sm_86
(RTX 3090 / A10, 99 KB) and sm_89 (L4 / RTX 4090, 99 KB); and the GPUs the kernels are tuned for, sm_80
(A100, 163 KB), sm_90 (H100/H200, 227 KB) and gfx942 (MI300X, 64 KB). A row FAILs, and the command
exits 1, on:
- a kernel that does not compile, or host code that raises;
- any spill in bfloat16, float16 or float32 (float64 may spill: it is for checks, not speed); bfloat16
  on sm_75 too, where Triton compiles it without bfloat16 hardware (conversions in integer
  arithmetic, rounding to nearest even; tl.dot on FMAs in float32, as every dtype there; atomic adds
  as compare-and-swap loops), so the kernels compute it there and the check holds it to the same rule;
- shared memory over the target's per-block limit, in any dtype: such a launch fails on the GPU;
- a tensor whose offsets pass 2³¹ − 1 where the kernel forms them in int32.
Host code that refuses a launch as ``kernels._common.DoesNotFit`` (no configuration of it fits the GPU's
shared memory, and the op says so, naming what would fit) gives a "refused" row: not a failure.

The full grid (``--full``), every shape in bf16, fp16, fp32 and fp64:

| op | shapes |
|---|---|
| softmax | 4096 rows × N, N ∈ {1024, 8192, 32768} |
| layer_norm, rms_norm | 4096 × {1024, 8192, 16384} |
| cross_entropy | 8192 rows × 128256 classes |
| fused_linear_cross_entropy | T 8192 tokens · d 4096 · V 128256 (its chunks of 512 × 128256 logits) |
| attention | B 4 · H 16 · T 4096 · D ∈ {64, 128, 256}, causal and not; GQA 32/8 heads D 128, causal and not, and packed causal |
| attention, packed | 4 documents × 4096 tokens, GQA 32/8 heads (Llama-3-8B's), D 128 and D 256, causal |
| embedding (gather, scatter-add) | 8192 token rows of 4096 into a 128256-row table |
| swiglu | 8192 tokens × F 14336 (Llama-3-8B's MLP) |
| rope | B 4 · T 4096 · H 32 · D 128, half-split and interleaved, forward and backward |
| 03_triton_fused_softmax | 4096 × {1024, 8192} (the notebook refuses longer rows) |
| 04_layernorm | 4096 × {1024, 8192, 16384} |
| 05_attention_recompute | B·H 64 · T 4096 · D ∈ {64, 128} (the notebook has no causal mask) |
| 06_topk_routing (scatter-add) | 8192 token rows of 4096 into a 128256-row table |
| 07_fused_linear_cross_entropy (ce_grad_kernel) | a chunk of 512 rows × 128256 classes |
| 08_mixed_precision_backward (softmax_bwd_mixed_kernel) | 4096 × 32768 and 8192 × 128256, in blocks of 1024 |
| linear (y, x̄ and both w̄ strategies) | M 8192 tokens · K 4096 · N ∈ {4096, 14336}; M 65536 · K 256 · N 256 (w̄ split) |
| 09_matmul_backward_triton (its given launchers) | M 8192 · K 4096 · N 4096 in tiles of block ∈ {16, 32, 64} |
| 10_attention_as_trained (its launchers) | B 4 · T 4096 · heads 32/8 · D ∈ {64, 128}, causal, batched and packed, blocks 16 × 16 |
| 11_mlp_and_rope (its launchers) | SwiGLU's backward at 8192 × 14336, blocks of 64 and 1024; RoPE at B 4 · T 4096 · H 32 · D 128 |

The quick grid (the default), in bf16, fp32 and fp64, keeps every op and kernel and the largest
shape of each, where registers and shared memory run out first; softmax also at 8192, the
longest row it holds in one block; attention at D 128 causal and causal packed GQA at D 256 (the packed,
grouped-query and largest-head-dim paths in one cell; without a mask, the causal code less its mask, in the full
grid only); linear at
8192 · 4096 · 4096 in bf16 and fp32 only (its float64 tiles use a tenth of any target's shared
memory, and float64 may spill); notebook 09 at block 64 in fp32 only (its frozen kernels take
their tiles from the launcher's block, whatever the dtype); notebook 10 at D 128 in fp32 only; notebook 11
at block 1024 in bf16 and fp32.
swiglu and rope at their one shape in bf16 and fp32 (float64 is for checks, and may spill).
That is for sm_80, sm_90 and gfx942. The students' GPUs (sm_75, sm_86, sm_89) get one cell of most
reference ops, at its largest shape (each op's ``student_quick``), within CI's time (about 60 s more on
2 cores): softmax at 32768 columns, LayerNorm, RMSNorm and cross-entropy in fp32 (their rows in
registers); linear, embedding, swiglu and rope in bf16 (on sm_75 a 16-bit tl.dot upcasts on FMAs and
takes the most registers; bf16 atomic adds are compare-and-swap loops); attention's packed causal GQA
at D 128 in bf16 (the largest head dim whose backward a T4 holds; sm_75's 16-bit tiles enter the
forward's and dQ's dots as float32). The fused linear cross-entropy, the notebooks' kernels, and every
other shape and dtype are checked on them by the full grid (``--full``), or by ``--target sm_75``
(any target named gets every cell of the quick grid).

Compiled kernels are cached in a temporary directory of this run (TRITON_CACHE_DIR), removed
at the end, so every run compiles from scratch.

It needs kernels defined for the compiler, which ``import kernels`` gives under TRITON_INTERPRET=0
(``make compile-check`` sets it). Without a GPU and without the variable, ``import kernels`` has
switched the interpreter on before this module runs, so the check runs itself again in a fresh
process with TRITON_INTERPRET=0; under TRITON_INTERPRET=1 it refuses.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

import torch

from ._common import DoesNotFit
from ._resources import int32_overflows, usage
from ._target import GPUS, Gpu, Launch, compiling_for

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


# ----------------------------------------------------------------------------- the host code to run


def _module(name: str):
    """kernels.<name>, the module (``from . import softmax`` gives the function kernels/__init__ exports)."""
    return importlib.import_module(f"{__package__}.{name}")


def _empty(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="cuda", dtype=dtype)


class _Ctx:
    """What an autograd.Function's forward and backward use of ctx, for calling them directly."""

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


@functools.cache
def _notebook(assignment: str) -> dict:
    from ._notebook_host import load

    return load(assignment)


def _softmax(shape, dtype):
    op = _module("softmax")

    y = op.softmax_forward(_empty(*shape, dtype=dtype))
    op.softmax_backward(y, torch.empty_like(y))


def _layer_norm(shape, dtype):
    op = _module("layer_norm")

    x, w = _empty(*shape, dtype=dtype), _empty(shape[-1], dtype=dtype)
    y, mean, rstd = op.layer_norm_forward(x, w, w)
    op.layer_norm_backward(torch.empty_like(y), x, w, mean, rstd)


def _rms_norm(shape, dtype):
    op = _module("rms_norm")

    x, w = _empty(*shape, dtype=dtype), _empty(shape[-1], dtype=dtype)
    y, rrms = op.rms_norm_forward(x, w)
    op.rms_norm_backward(torch.empty_like(y), x, w, rrms)


def _ce_options(op, n_classes, like, dtype):
    """Every option of the cross-entropy family on: the kernels' heaviest constexpr variant (softcap, class
    weights and label smoothing each add a branch; the z-loss is arithmetic in every variant)."""
    return op.loss_options(n_classes, like, label_smoothing=0.1, lse_square_scale=1e-4, softcap=30.0,
                           weight=_empty(n_classes, dtype=dtype))


def _cross_entropy(shape, dtype):
    op = _module("cross_entropy")

    logits, target = _empty(*shape, dtype=dtype), torch.zeros(shape[0], device="cuda", dtype=torch.int64)
    for options in (None, _ce_options(op, shape[-1], logits, dtype)):
        loss, _, lse = op.cross_entropy_forward(logits, target, options=options)
        op.cross_entropy_backward(logits, target, lse, torch.empty_like(lse), z_grad=torch.empty_like(lse),
                                  options=options)


def _fused_linear_cross_entropy(shape, dtype):
    op = _module("fused_linear_cross_entropy")

    tokens, dim, vocab = shape
    h, W = _empty(tokens, dim, dtype=dtype), _empty(vocab, dim, dtype=dtype)
    target = torch.zeros(tokens, device="cuda", dtype=torch.int64)
    # The loss and its gradient in one kernel ('mean'), plain and with every option and a bias; then 'none', whose
    # forward writes no gradient and whose backward sweeps the chunks again.
    op.fused_linear_cross_entropy_forward(h, W, target)
    options, bias = _ce_options(_module("cross_entropy"), vocab, h, dtype), _empty(vocab, dtype=dtype)
    op.fused_linear_cross_entropy_forward(h, W, target, bias=bias, options=options)
    op.fused_linear_cross_entropy_forward(h, W, target, bias=bias, options=options, reduction="none")
    g = torch.empty(tokens, device="cuda", dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    op.fused_linear_cross_entropy_backward(h, W, target, g, g, bias=bias, options=options)


def _attention(shape, dtype):
    op = _module("attention")

    b, h, h_kv, t, d, causal, packed = shape
    if packed:  # b documents of t tokens laid end to end, as attention_varlen takes them
        q, k, v = (_empty(b * t, heads, d, dtype=dtype) for heads in (h, h_kv, h_kv))
        docs = dict(cu_seqlens_q=_empty(b + 1, dtype=torch.int32), max_seqlen_q=t)  # its values are never read here
    else:
        q, k, v = (_empty(b, heads, t, d, dtype=dtype) for heads in (h, h_kv, h_kv))
        docs = {}
    o, lse = op.attention_forward(q, k, v, causal=causal, **docs)
    op.attention_backward(q, k, v, o, lse, torch.empty_like(o), causal=causal, **docs)


def _embedding(shape, dtype):
    op = _module("scatter_add")

    tokens, dim, vocab = shape
    ids = torch.zeros(tokens, device="cuda", dtype=torch.int64)
    op.gather_rows(_empty(vocab, dim, dtype=dtype), ids)
    op.scatter_add(_empty(tokens, dim, dtype=dtype), ids, vocab)
    # embedding's padding_idx: skip 0 is a multiple of 16, which Triton compiles as its own specialisation.
    op.scatter_add(_empty(tokens, dim, dtype=dtype), ids, vocab, skip=0)


def _swiglu(shape, dtype):
    op = _module("swiglu")

    a, b = _empty(*shape, dtype=dtype), _empty(*shape, dtype=dtype)
    op.swiglu_forward(a, b)
    op.swiglu_backward(a, b, torch.empty_like(a))


def _rope(shape, dtype):
    """Both layouts, forward and backward: the kernel's four constexpr variants. cos and sin in float32, as a
    model keeps them beside half activations."""
    op = _module("rope")

    b, t, h, d = shape
    x, cos = _empty(b, t, h, d, dtype=dtype), _empty(t, d // 2, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    for interleaved in (False, True):
        y = op.rotate(x, cos, cos, interleaved)
        op.rotate(y, cos, cos, interleaved, backward=True)


def _nb03_softmax(shape, dtype):
    nb = _notebook("03_triton_fused_softmax")
    ctx = _Ctx()
    y = nb["TritonSoftmax"].forward(ctx, _empty(*shape, dtype=dtype))
    nb["TritonSoftmax"].backward(ctx, torch.empty_like(y))


def _nb04_layernorm(shape, dtype):
    nb = _notebook("04_layernorm")
    ctx, x, w = _Ctx(), _empty(*shape, dtype=dtype), _empty(shape[-1], dtype=dtype)
    y = nb["TritonLayerNorm"].forward(ctx, x, w, w, 1e-5)
    nb["TritonLayerNorm"].backward(ctx, torch.empty_like(y))


def _nb05_flash(shape, dtype):
    nb = _notebook("05_attention_recompute")
    nb["USE_DELTA_KERNEL"] = True  # the notebook sets it when Part G passes its check; the solution does
    q, k, v = (_empty(*shape, dtype=dtype) for _ in range(3))
    o, L = nb["flash_forward"](q, k, v)
    nb["flash_backward"](q, k, v, o, L, torch.empty_like(o))


def _nb06_scatter_add(shape, dtype):
    nb = _notebook("06_topk_routing")
    tokens, dim, vocab = shape
    nb["scatter_add"](_empty(tokens, dim, dtype=dtype), torch.zeros(tokens, device="cuda", dtype=torch.int64), vocab)


def _nb07_ce_grad(shape, dtype):
    nb = _notebook("07_fused_linear_cross_entropy")
    rows, vocab = shape
    nb["ce_loss_and_grad_inplace"](_empty(rows, vocab, dtype=dtype), torch.zeros(rows, device="cuda", dtype=torch.int64), rows)


def _nb08_softmax_bwd_mixed(shape, dtype):
    nb = _notebook("08_mixed_precision_backward")
    rows, cols = shape
    nb["softmax_backward_by_kernel"](_empty(rows, cols, dtype=dtype), _empty(rows, cols, dtype=dtype), BLOCK=1024)


def _linear(shape, dtype):
    op = _module("linear")

    m, k, n = shape
    x, w, b, dy = _empty(m, k, dtype=dtype), _empty(k, n, dtype=dtype), _empty(n, dtype=dtype), _empty(m, n, dtype=dtype)
    op.linear_forward(x, w, b)
    for strategy in op.DW_STRATEGIES:
        op.linear_backward(dy, x, w, True, strategy)


def _nb09_linear(shape, dtype):
    nb = _notebook("09_matmul_backward_triton")
    m, k, n, block = shape
    x, w, dy = _empty(m, k, dtype=dtype), _empty(k, n, dtype=dtype), _empty(m, n, dtype=dtype)
    nb["launch_dx"](x, w.t(), block)  # TritonLinear's forward
    nb["launch_dx"](dy, w, block)
    nb["launch_dw_partials"](x, dy, nb["ROWS_PER_SPLIT"], True, block)
    nb["launch_dw_atomic"](x, dy, nb["ROWS_PER_SPLIT"], block)


def _nb10_attention(shape, dtype):
    nb = _notebook("10_attention_as_trained")
    b, h, h_kv, t, d, block_m, block_n = shape
    q, do = (_empty(b, h, t, d, dtype=dtype) for _ in range(2))
    k, v = (_empty(b, h_kv, t, d, dtype=dtype) for _ in range(2))
    o, L = nb["causal_forward"](q, k, v, block_m, block_n)
    nb["causal_backward"](q, k, v, o, L, do, block_m, block_n)
    # The same tokens packed as b documents of t: one row of b·t tokens, the longest document t long. Laid out
    # (tokens, heads, d) as views of (heads, tokens, d) tensors, so that the launcher's copy to (heads, tokens, d)
    # has nothing to do: the stand-in tensors hold no memory to copy.
    cu_seqlens = torch.zeros(b + 1, device="cuda", dtype=torch.int32)
    packed = [_empty(heads, b * t, d, dtype=dtype).transpose(0, 1) for heads in (h, h_kv, h_kv)]
    nb["varlen_forward"](*packed, cu_seqlens, t, block_m, block_n)


def _nb11_mlp_rope(shape, dtype):
    nb = _notebook("11_mlp_and_rope")
    tokens, width, b, t, h, d, block = shape
    a, up, dh = (_empty(tokens, width, dtype=dtype) for _ in range(3))
    nb["swiglu_bwd"](a, up, dh, block)
    x = _empty(b, h, t, d, dtype=dtype)
    cos, sin = _empty(t, d // 2, dtype=dtype), _empty(t, d // 2, dtype=dtype)
    for interleaved in (False, True):
        for backward in (False, True):
            nb["rope_apply"](x, cos, sin, interleaved, backward)


def _rows_x_cols(shape):
    return "×".join(map(str, shape))


def _attention_shape(shape):
    b, h, h_kv, t, d, causal, packed = shape
    heads = f"H{h}" if h == h_kv else f"H{h}/{h_kv}"  # query heads / K/V heads (GQA)
    rows = f"{b} docs × T{t}" if packed else f"B{b} T{t}"
    return f"{rows} {heads} D{d} {'causal' if causal else 'full'}"


def _lm_head_shape(shape):
    tokens, dim, vocab = shape
    return f"T{tokens} d{dim} V{vocab}"


def _nb11_shape(shape):
    tokens, width, b, t, h, d, block = shape
    return f"swiglu {tokens}×{width} block {block}; rope B{b} T{t} H{h} D{d}"


def _rope_shape(shape):
    b, t, h, d = shape
    return f"B{b} T{t} H{h} D{d}"  # each case runs both layouts


def _nb10_shape(shape):
    b, h, h_kv, t, d, block_m, block_n = shape
    return f"B{b} T{t} H{h}/{h_kv} D{d} causal, blocks {block_m}×{block_n}"


def _flash_shape(shape):
    bh, t, d = shape
    return f"BH{bh} T{t} D{d}"


def _scatter_shape(shape):
    tokens, dim, vocab = shape
    return f"{tokens}×{dim} → {vocab}"


def _gemm_shape(shape):
    """M·K·N, and the tile side when the shape names one (notebook 09's launchers take block=)."""
    m, k, n, *block = shape
    return f"M{m} K{k} N{n}" + (f" block {block[0]}" if block else "")


@dataclass(frozen=True)
class Op:
    """One op's host code, the kernels it must launch, and the shapes it is compiled at."""

    name: str
    kernels: tuple[str, ...]
    run: Callable[[tuple, torch.dtype], None]
    describe: Callable[[tuple], str]
    full: tuple[tuple, ...]
    quick: tuple[tuple, ...]
    quick_dtypes: tuple[str, ...] = ("bf16", "fp32", "fp64")  # the quick grid's dtypes for this op
    # The quick grid's (shape, dtype) cells on the students' GPUs (STUDENT_TARGETS), a few of the above: see grid().
    student_quick: tuple[tuple[tuple, str], ...] = ()


# (B or documents, H, H_kv, T, D, causal, packed): multi-head at D 64, 128 and 256; Llama-3-8B's grouped-query
# heads (32 query heads, 8 K/V heads, D 128), batched and packed; the packed GQA path at D 256 as well.
_ATTENTION_MHA = tuple((4, 16, 16, 4096, d, causal, False) for d in (64, 128, 256) for causal in (False, True))
_ATTENTION_GQA = ((4, 32, 8, 4096, 128, False, False), (4, 32, 8, 4096, 128, True, False), (4, 32, 8, 4096, 128, True, True))
_ATTENTION_PACKED_D256 = (4, 32, 8, 4096, 256, True, True)
_ATTENTION_FULL = (*_ATTENTION_MHA, *_ATTENTION_GQA, _ATTENTION_PACKED_D256)
_TABLE = (128256, 4096)  # a Llama-3 vocabulary, a 4096-wide model
# (M tokens, K, N): a 4096-wide projection, a Llama-3-8B MLP up-projection, and a narrow layer over many
# tokens, where w̄ has few tiles and the split-K reduction splits.
_LINEAR_FULL = ((8192, 4096, 4096), (8192, 4096, 14336), (65536, 256, 256))

OPS = {
    op.name: op
    for op in (
        Op("softmax", ("_softmax_fwd_kernel", "_softmax_bwd_kernel"), _softmax, _rows_x_cols,
           full=((4096, 1024), (4096, 8192), (4096, 32768)), quick=((4096, 8192), (4096, 32768)),
           student_quick=(((4096, 32768), "fp32"),)),
        Op("layer_norm", ("_norm_fwd_kernel", "_norm_bwd_kernel"), _layer_norm, _rows_x_cols,
           full=((4096, 1024), (4096, 8192), (4096, 16384)), quick=((4096, 16384),),
           student_quick=(((4096, 16384), "fp32"),)),
        Op("rms_norm", ("_norm_fwd_kernel", "_norm_bwd_kernel"), _rms_norm, _rows_x_cols,
           full=((4096, 1024), (4096, 8192), (4096, 16384)), quick=((4096, 16384),),
           student_quick=(((4096, 16384), "fp32"),)),
        Op("cross_entropy", ("_cross_entropy_fwd_kernel", "_cross_entropy_bwd_kernel"), _cross_entropy, _rows_x_cols,
           full=((8192, 128256),), quick=((8192, 128256),), student_quick=(((8192, 128256), "fp32"),)),
        Op("fused_linear_cross_entropy", ("_linear_ce_chunk_kernel",), _fused_linear_cross_entropy, _lm_head_shape,
           full=((8192, _TABLE[1], _TABLE[0]),), quick=((8192, _TABLE[1], _TABLE[0]),)),
        Op("attention", ("_attn_fwd_kernel", "_attn_bwd_preprocess_kernel", "_attn_bwd_dkdv_kernel", "_attn_bwd_dq_kernel"),
           _attention, _attention_shape, full=_ATTENTION_FULL,
           # Quick: causal at D 128 and packed GQA at D 256; without a mask (a subset of the causal code) in full only.
           quick=((4, 16, 16, 4096, 128, True, False), _ATTENTION_PACKED_D256),
           # Packed causal GQA at D 128 (at D 256 a T4 refuses the backward: see kernels/attention.py's _CELLS).
           student_quick=((_ATTENTION_GQA[2], "bf16"),)),
        # Quick: no float64, whose tiles take a tenth of any target's shared memory and may spill.
        Op("linear", ("_matmul_kernel", "_dw_splitk_kernel", "_dw_atomic_kernel", "_sum_rows_kernel"), _linear, _gemm_shape,
           full=_LINEAR_FULL, quick=(_LINEAR_FULL[0],), quick_dtypes=("bf16", "fp32"),
           student_quick=((_LINEAR_FULL[0], "bf16"),)),
        Op("embedding", ("_gather_rows_kernel", "_scatter_add_kernel"), _embedding, _scatter_shape,
           full=((8192, _TABLE[1], _TABLE[0]),), quick=((8192, _TABLE[1], _TABLE[0]),),
           student_quick=(((8192, _TABLE[1], _TABLE[0]), "bf16"),)),
        # Llama-3-8B's MLP (F 14336) over 8192 tokens; its attention's queries (B 4 · T 4096 · 32 heads · D 128).
        Op("swiglu", ("_swiglu_fwd_kernel", "_swiglu_bwd_kernel"), _swiglu, _rows_x_cols,
           full=((8192, 14336),), quick=((8192, 14336),), quick_dtypes=("bf16", "fp32"),
           student_quick=(((8192, 14336), "bf16"),)),
        Op("rope", ("_rope_kernel",), _rope, _rope_shape,
           full=((4, 4096, 32, 128),), quick=((4, 4096, 32, 128),), quick_dtypes=("bf16", "fp32"),
           student_quick=(((4, 4096, 32, 128), "bf16"),)),
        Op("03_triton_fused_softmax", ("softmax_fwd_kernel", "softmax_bwd_kernel"), _nb03_softmax, _rows_x_cols,
           full=((4096, 1024), (4096, 8192)), quick=((4096, 8192),)),
        Op("04_layernorm", ("layernorm_fwd_kernel", "layernorm_bwd_kernel"), _nb04_layernorm, _rows_x_cols,
           full=((4096, 1024), (4096, 8192), (4096, 16384)), quick=((4096, 16384),)),
        Op("05_attention_recompute", ("flash_fwd_kernel", "attention_delta_kernel", "flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel"),
           _nb05_flash, _flash_shape, full=((64, 4096, 64), (64, 4096, 128)), quick=((64, 4096, 128),)),
        Op("06_topk_routing", ("scatter_add_kernel",), _nb06_scatter_add, _scatter_shape,
           full=((8192, _TABLE[1], _TABLE[0]),), quick=((8192, _TABLE[1], _TABLE[0]),)),
        Op("07_fused_linear_cross_entropy", ("ce_grad_kernel",), _nb07_ce_grad, _rows_x_cols,
           full=((512, _TABLE[0]),), quick=((512, _TABLE[0]),)),
        Op("08_mixed_precision_backward", ("softmax_bwd_mixed_kernel",), _nb08_softmax_bwd_mixed, _rows_x_cols,
           full=((4096, 32768), (8192, _TABLE[0])), quick=((8192, _TABLE[0]),)),
        # The notebook's frozen kernels, at its BLOCK (16) and the larger tiles a GPU wants (its launchers take
        # block=). Quick: the largest tiles in float32, where a spill fails the row; the full grid has every dtype.
        Op("09_matmul_backward_triton", ("linear_dx_kernel", "linear_dw_splitk_kernel", "linear_dw_atomic_kernel"),
           _nb09_linear, _gemm_shape, full=tuple((*_LINEAR_FULL[0], block) for block in (16, 32, 64)),
           quick=((*_LINEAR_FULL[0], 64),), quick_dtypes=("fp32",)),
        # The notebook's frozen kernels at its blocks (16 × 16), at Llama-3-8B's heads (32 query heads, 8 K/V heads,
        # D 128) and at D 64, batched and packed. Its launchers accept larger tiles, which do not fit everywhere:
        # 32 × 32 overflows sm_80's and gfx942's shared memory in float64 and spills in float32 on gfx942 (dQ).
        Op("10_attention_as_trained", ("causal_fwd_kernel", "causal_bwd_dq_kernel", "causal_bwd_dkdv_kernel",
                                       "varlen_fwd_kernel"),
           _nb10_attention, _nb10_shape, full=tuple((4, 32, 8, 4096, d, 16, 16) for d in (64, 128)),
           quick=((4, 32, 8, 4096, 128, 16, 16),), quick_dtypes=("fp32",)),
        # The notebook's kernels through its launchers: SwiGLU's backward at Llama-3-8B's MLP (8192 tokens × F 14336)
        # in the notebook's blocks of 64 columns and in the 1024 a GPU wants; RoPE at 32 heads of D 128, both layouts,
        # forward and backward.
        Op("11_mlp_and_rope", ("swiglu_bwd_kernel", "rope_kernel"), _nb11_mlp_rope, _nb11_shape,
           full=tuple((8192, 14336, 4, 4096, 32, 128, block) for block in (64, 1024)),
           quick=((8192, 14336, 4, 4096, 32, 128, 1024),), quick_dtypes=("bf16", "fp32")),
    )
}


# The GPUs students have (Colab's T4, consumer and small data-centre Ampere and Ada), and those the kernels are
# tuned for (A100, H100/H200, MI300X).
STUDENT_TARGETS = ("sm_75", "sm_86", "sm_89")
MAIN_TARGETS = tuple(name for name in GPUS if name not in STUDENT_TARGETS)


@dataclass(frozen=True)
class Case:
    op: Op
    shape: tuple
    dtype: str
    targets: tuple[str, ...] = tuple(GPUS)  # the GPUs it is compiled for

    @property
    def config(self) -> str:
        return self.op.describe(self.shape)


def grid(full: bool, ops=None, dtypes=None, targets=None) -> list[Case]:
    """The cases of the full or the quick grid, optionally only some ops, dtypes and targets.

    The full grid, and the quick grid on targets named here, compile every case for every target. The quick grid
    without named targets (``make compile-check``, CI) compiles its cases for MAIN_TARGETS and only each op's
    ``student_quick`` cells for STUDENT_TARGETS, to keep CI's time: see the module docstring for which.
    """
    cases = []
    for op in (OPS[name] for name in ops or OPS):
        cells: dict[tuple, list[str]] = {}
        for shape in op.full if full else op.quick:
            for dtype in dtypes or (list(DTYPES) if full else op.quick_dtypes):
                cells[(shape, dtype)] = list(targets or (GPUS if full else MAIN_TARGETS))
        if not (full or targets):
            for shape, dtype in op.student_quick:
                if not dtypes or dtype in dtypes:
                    cells.setdefault((shape, dtype), []).extend(STUDENT_TARGETS)
        cases += [Case(op, shape, dtype, tuple(gpus)) for (shape, dtype), gpus in cells.items()]
    return cases


# ----------------------------------------------------------------------------- rows and verdicts


@dataclass
class Row:
    """One (kernel, configuration, dtype, target) and what it takes from the GPU."""

    op: str
    kernel: str
    config: str
    dtype: str
    target: str
    status: str = "ok"  # or "FAIL", or "refused": the host code said this GPU cannot hold the launch (DoesNotFit)
    blocks: str = ""  # the launch's BLOCK* constexprs
    grid: tuple = ()  # programs launched (in --json only)
    registers: int | None = None
    spill: int | None = None
    shared: int | None = None
    warps: int | None = None
    stages: int | None = None
    blocks_per_sm: int | None = None
    notes: list[str] = field(default_factory=list)

    def fail(self, why: str) -> None:
        self.status = "FAIL"
        self.notes.append(why)


def _block_sizes(constexprs: dict) -> str:
    sizes = [(k, v) for k, v in constexprs.items() if k.startswith("BLOCK") and isinstance(v, int) and not isinstance(v, bool)]
    return " ".join(str(v) if k == "BLOCK" else f"{k.removeprefix('BLOCK_')}={v}" for k, v in sizes)


def row_for(case: Case, gpu: Gpu, launch: Launch) -> Row:
    """The row of one launch, with its verdict."""
    row = Row(case.op.name, launch.kernel, case.config, case.dtype, gpu.name, blocks=_block_sizes(launch.constexprs),
              grid=launch.grid)
    if launch.compiled is None:
        row.fail(f"does not compile: {launch.error}")
        return row
    used = usage(gpu, launch.compiled)
    row.registers, row.spill, row.shared = used.registers, used.spill_bytes, used.shared_bytes
    row.warps, row.stages, row.blocks_per_sm = used.num_warps, used.num_stages, used.blocks_per_sm
    if used.spill_bytes and case.dtype != "fp64":
        row.fail(f"spills {used.spill_bytes} B")
    elif used.spill_bytes:
        row.notes.append(f"spills {used.spill_bytes} B (allowed in fp64)")
    if used.shared_bytes > gpu.max_shared_per_block:
        row.fail(f"shared memory {used.shared_bytes} B > {gpu.max_shared_per_block} B per block")
    for overflow in int32_overflows(launch):
        row.fail(overflow)
    return row


def check_case(case: Case, gpu: Gpu) -> list[Row]:
    """Run one case's host code for one GPU; a row per launch, and a failing row for what went wrong."""
    refused = None
    with compiling_for(gpu) as launches:
        try:
            case.op.run(case.shape, DTYPES[case.dtype])
            host_error = None
        except DoesNotFit as exc:  # by design: no configuration fits this GPU, and the op says so before launching
            host_error, refused = None, str(exc)
        except Exception as exc:  # the host code refused or broke: report it with the launches made so far
            host_error = f"host code raised {type(exc).__name__}: {exc}"[:200]
    rows, seen = [], set()
    for launch in launches:
        row = row_for(case, gpu, launch)
        key = json.dumps(asdict(row), sort_keys=True)
        if key not in seen:
            seen.add(key)
            rows.append(row)
    if refused:
        rows.append(Row(case.op.name, "(host code)", case.config, case.dtype, gpu.name, status="refused", notes=[refused]))
    for kernel in case.op.kernels:
        if host_error is None and not refused and not any(launch.kernel == kernel for launch in launches):
            missing = Row(case.op.name, kernel, case.config, case.dtype, gpu.name)
            missing.fail("the host code did not launch it")
            rows.append(missing)
    if host_error:
        broken = Row(case.op.name, "(host code)", case.config, case.dtype, gpu.name)
        broken.fail(host_error)
        rows.append(broken)
    return rows


# ----------------------------------------------------------------------------- output

_COLUMNS = (("status", 6), ("target", 6), ("op", 26), ("kernel", 27), ("config", 26), ("dtype", 5), ("blocks", 16),
            ("regs", 4), ("spill", 5), ("smem", 6), ("warps", 5), ("stages", 6), ("blk/SM", 6), ("notes", 0))


def _cells(row: Row) -> list[str]:
    show = lambda v: "-" if v is None else str(v)  # noqa: E731
    return [row.status, row.target, row.op, row.kernel, row.config, row.dtype, row.blocks, show(row.registers),
            show(row.spill), show(row.shared), show(row.warps), show(row.stages), show(row.blocks_per_sm),
            "; ".join(row.notes)]


def per_kernel(rows: list[Row]) -> str:
    """One markdown row per (op, kernel, target): how many launches, and the worst of them.

    Registers, spill and shared memory are the largest over its configurations and dtypes
    (spill: fp16/bf16/fp32 only, fp64 being allowed to spill), blocks per SM the fewest.
    """
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.op, row.kernel, row.target), []).append(row)
    lines = ["| op | kernel | target | launches | status | max regs | max spill (16/32-bit) | max smem | min blk/SM |",
             "|---|---|---|---:|---|---:|---:|---:|---:|"]
    worst = lambda values, pick: "-" if not values else str(pick(values))  # noqa: E731
    for (op, kernel, target), group in groups.items():
        status = next((s for s in ("FAIL", "refused") if any(r.status == s for r in group)), "ok")
        regs = [r.registers for r in group if r.registers is not None]
        spill = [r.spill for r in group if r.spill is not None and r.dtype != "fp64"]
        smem = [r.shared for r in group if r.shared is not None]
        occupancy = [r.blocks_per_sm for r in group if r.blocks_per_sm is not None]
        lines.append(f"| {op} | {kernel} | {target} | {len(group)} | {status} | {worst(regs, max)} | "
                     f"{worst(spill, max)} | {worst(smem, max)} | {worst(occupancy, min)} |")
    return "\n".join(lines)


def format_row(row: Row, markdown: bool = False) -> str:
    cells = _cells(row)
    if markdown:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
    return "  ".join(c.ljust(w) for c, (_, w) in zip(cells, _COLUMNS)).rstrip()


def header(markdown: bool = False) -> str:
    names = [name for name, _ in _COLUMNS]
    if markdown:
        return "| " + " | ".join(names) + " |\n|" + "---|" * len(names)
    return "  ".join(n.ljust(w) for n, (_, w) in zip(names, _COLUMNS)).rstrip()


def summary(rows: list[Row], seconds: float) -> str:
    failing = [r for r in rows if r.status == "FAIL"]
    refused = [r for r in rows if r.status == "refused"]
    lines = [f"{len(rows)} rows, {len(rows) - len(failing) - len(refused)} ok, {len(failing)} FAIL"
             + (f", {len(refused)} refused by the host code (the GPU cannot hold them)" if refused else "") + f", in {seconds:.0f} s"]
    lines += [f"{r.status:7} {r.target:6}  {r.op}  {r.kernel}  {r.config}  {r.dtype}: {'; '.join(r.notes)}" for r in failing + refused]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- running


_WORK: list[tuple[Case, Gpu]] = []


def _check_one(index: int) -> list[Row]:
    case, gpu = _WORK[index]
    return check_case(case, gpu)


def run(cases: list[Case], jobs: int = 1, on_rows: Callable[[list[Row]], None] | None = None) -> list[Row]:
    """Check every case on each of its GPUs, in ``jobs`` processes; ``on_rows`` sees each (case, GPU)'s rows in order."""
    _WORK[:] = [(case, GPUS[name]) for case in cases for name in case.targets]
    for case in cases:  # load the notebooks once, before any worker process starts
        if case.op.name[0].isdigit():
            _notebook(case.op.name)
    with contextlib.ExitStack() as stack:
        if jobs == 1:
            batches = map(_check_one, range(len(_WORK)))
        else:
            pool = stack.enter_context(ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")))
            batches = pool.map(_check_one, range(len(_WORK)))
        rows: list[Row] = []
        for batch in batches:
            rows += batch
            if on_rows:
                on_rows(batch)
    return rows


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of processes")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.compile_check",
        description="Compile every Triton kernel for sm_75, sm_86, sm_89, sm_80, sm_90 and gfx942 at GPU-sized shapes, without a GPU; "
                    "exit 1 on a compile error, a spill (fp16/bf16/fp32), shared memory over the limit, or an int32 offset overflow.")
    parser.add_argument("--full", action="store_true", help="the full grid (every shape, bf16 fp16 fp32 fp64), not the quick one")
    parser.add_argument("--op", nargs="+", choices=list(OPS), metavar="OP", help=f"only these ops: {', '.join(OPS)}")
    parser.add_argument("--target", nargs="+", choices=list(GPUS), metavar="TARGET",
                        help=f"only these targets, each with every case of the grid: {', '.join(GPUS)}")
    parser.add_argument("--dtype", nargs="+", choices=list(DTYPES), metavar="DTYPE", help=f"only these dtypes: {', '.join(DTYPES)}")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--markdown", action="store_true", help="print a markdown table (the summary goes to stderr)")
    output.add_argument("--json", action="store_true", help="print the rows as JSON (the summary goes to stderr)")
    output.add_argument("--per-kernel", action="store_true",
                        help="a markdown table of one row per op, kernel and target: the worst of its rows "
                             "(what kernels/BENCHMARKS.md shows; the summary goes to stderr)")
    parser.add_argument("--jobs", type=_positive, default=1, help="compile in this many processes (default 1)")
    return parser


def _compile_in_a_fresh_process(argv: list[str]) -> int:
    """Run this check again in a process whose kernels are compiled ones: TRITON_INTERPRET=0 before ``kernels`` is imported."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where `kernels` is importable from
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", f"{__package__}.compile_check", *argv], env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from triton.runtime.jit import JITFunction

    from ._device import device_choice

    if not isinstance(_module("softmax")._softmax_fwd_kernel, JITFunction):
        choice = device_choice()
        if choice.chosen_here:
            # `import kernels` switched the interpreter on because there is no GPU here, before this
            # module ran; the kernels must be defined anew, so compile in a process that asks for the compiler.
            return _compile_in_a_fresh_process(sys.argv[1:] if argv is None else argv)
        parser.error(f"{choice.why} before kernels was imported, so its kernels were defined for Triton's CPU "
                     "interpreter; the compile check needs the compiler: run it with TRITON_INTERPRET unset or 0, "
                     "in a process that has not imported course")
    cases = grid(args.full, args.op, args.dtype, args.target)

    out = sys.stdout
    table = not (args.json or args.per_kernel)
    if table:
        print(header(args.markdown), file=out, flush=True)

    def show(batch):
        if table:
            for row in batch:
                print(format_row(row, args.markdown), file=out, flush=True)

    cache = tempfile.mkdtemp(prefix="compile-check-")
    os.environ["TRITON_CACHE_DIR"] = cache
    start = time.monotonic()
    try:
        rows = run(cases, args.jobs, show)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    text = summary(rows, time.monotonic() - start)
    if args.json:
        json.dump([asdict(r) for r in rows], out, indent=1, ensure_ascii=False)
        print(file=out, flush=True)
    if args.per_kernel:
        print(per_kernel(rows), file=out, flush=True)
    print(text, file=sys.stderr if not table or args.markdown else out)
    return 1 if any(r.status == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
