"""Scatter-add: the backward of every gather, where repeated indices must add, not overwrite.

    out[index[i], :] += src[i, :]   for every row i of src;   out is (n, D), zero elsewhere

This is the gradient of y = x[index]: each row of x receives the sum of the gradients of
every output row that read it. When index repeats (an embedding lookup of a repeated token,
a gather), several programs add into the same output row at once, so the add must be
atomic: a plain store keeps one contribution and silently drops the rest.

Atomics make the summation order depend on scheduling, so float results can differ in
the last bits from run to run (nondeterministic); torch's index_add_ on CUDA has the same
property. Deterministic alternatives sort by index and reduce segments, at the cost of a sort.

Half-precision sources are added into a float32 buffer (an (n, D) copy the size of the output, twice its
bytes), then rounded once: atomics on half types are slow, and a half-precision running sum loses the
small additions of a row that many tokens hit.

``skip`` leaves out the rows of one index (an embedding's padding_idx): the kernel masks them, so they
are never read.

Limitations: float16, float32 and float64 (bfloat16 on a GPU only); index values are checked on the host,
which costs a synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import acc_torch_dtype, check_floating, row_launch

BLOCK_D_MAX = 1024


@triton.jit
def _scatter_add_kernel(
    SRC_ptr,  # (n_src, D) rows to add
    INDEX_ptr,  # (n_src,) int64 destination row of each source row
    OUT_ptr,  # (n, D) zero-initialised result
    src_row_stride,
    out_row_stride,
    n_cols,
    skip,  # rows with this index add nothing (an embedding's padding_idx); -1 skips none
    BLOCK_D: tl.constexpr,
):
    """out[index[i]] += src[i] with tl.atomic_add: one program per source row and column block."""
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    dest = tl.load(INDEX_ptr + i)
    # A skipped row is neither read nor added (no column is in range): its destination keeps its zeros.
    mask = cols < tl.where(dest == skip, 0, n_cols)
    row = tl.load(SRC_ptr + i * src_row_stride + cols, mask=mask, other=0.0)
    # Atomic, because another program may be adding into the same destination row right now.
    tl.atomic_add(OUT_ptr + dest * out_row_stride + cols, row.to(OUT_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gather_rows_kernel(
    W_ptr,  # (n, D) table
    INDEX_ptr,  # (n_out,) int64 rows to read
    OUT_ptr,  # (n_out, D) result
    w_row_stride,
    n_cols,
    BLOCK_D: tl.constexpr,
):
    """out[i] = W[index[i]]: the forward whose backward is the scatter-add above."""
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < n_cols
    src = tl.load(INDEX_ptr + i)
    tl.store(OUT_ptr + i * n_cols + cols, tl.load(W_ptr + src * w_row_stride + cols, mask=mask), mask=mask)


def check_index(name: str, index: torch.Tensor, n: int, rows: int | None = None) -> None:
    """Indices must be integers in [0, n); say which value is not."""
    if not isinstance(index, torch.Tensor) or index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an integer tensor (int64), got {getattr(index, 'dtype', type(index).__name__)}")
    if rows is not None and index.numel() != rows:
        raise ValueError(f"{name} has {index.numel()} entries but there are {rows} rows to place")
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= n):
        bad = index[(index < 0) | (index >= n)].flatten()[0].item()
        raise IndexError(f"{name} holds {bad}, outside [0, {n})")


def _block_d(n_cols: int) -> int:
    """Columns per program: the row, up to BLOCK_D_MAX (the grid's second axis covers the rest)."""
    return row_launch(n_cols, loop_block=BLOCK_D_MAX).block


def scatter_add(src: torch.Tensor, index: torch.Tensor, n: int, *, skip: int | None = None) -> torch.Tensor:
    """An (n, D) tensor whose row r is the sum of the rows of ``src`` (M, D) with index == r.

    ``skip`` (in [0, n)): the source rows whose index equals it add nothing, so output row ``skip`` is zero.
    """
    check_floating("src", src)
    if src.ndim != 2:
        raise ValueError(f"src must be (rows, D); got shape {tuple(src.shape)}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int (the number of output rows), got {n!r}")
    check_index("index", index, n, rows=src.shape[0])
    if skip is not None and (isinstance(skip, bool) or not isinstance(skip, int) or not 0 <= skip < n):
        raise ValueError(f"skip must be None or an int in [0, {n}) (an output row), got {skip!r}")
    src = src if src.stride(-1) == 1 else src.contiguous()
    # Added into float32 (float64 for float64): a row hit hundreds of times is a sum of hundreds of terms, and a
    # half-precision running sum breaks notebook 08's bound there (tests/kernels/test_half_precision_backward.py).
    out = torch.zeros(n, src.shape[1], dtype=acc_torch_dtype(src.dtype), device=src.device)
    if src.shape[0] and src.shape[1]:
        block = _block_d(src.shape[1])
        _scatter_add_kernel[(src.shape[0], triton.cdiv(src.shape[1], block))](
            src, index.reshape(-1).to(torch.int64).contiguous(), out, src.stride(0), out.stride(0), src.shape[1],
            -1 if skip is None else skip, BLOCK_D=block,
        )
    return out.to(src.dtype)


def gather_rows(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """weight[ids] for an (n, D) table and integer ids of any shape: shape ids.shape + (D,)."""
    check_floating("weight", weight)
    if weight.ndim != 2:
        raise ValueError(f"weight must be (num_embeddings, D); got shape {tuple(weight.shape)}")
    check_index("ids", ids, weight.shape[0])
    flat = ids.reshape(-1).to(torch.int64).contiguous()
    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    out = torch.empty(flat.numel(), weight.shape[1], dtype=weight.dtype, device=weight.device)
    if flat.numel() and weight.shape[1]:
        block = _block_d(weight.shape[1])
        _gather_rows_kernel[(flat.numel(), triton.cdiv(weight.shape[1], block))](
            weight, flat, out, weight.stride(0), weight.shape[1], BLOCK_D=block,
        )
    return out.view(*ids.shape, weight.shape[1])
