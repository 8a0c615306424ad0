"""Softmax over the last dimension: forward and backward Triton kernels behind autograd.

Forward, per row of length N:   y = exp(x − max x) / Σ exp(x − max x)
Backward, per row:              x̄ = y ⊙ (ȳ − s),  s = ⟨y, ȳ⟩

The backward needs only y (saved by the forward) and one scalar per row, never the
N×N Jacobian diag(y) − y yᵀ. Memory traffic per row: forward reads N and writes N;
backward reads 2N (y, ȳ) and writes N. Both are bandwidth-bound.

One program handles one row. A row that fits in one block (N ≤ BLOCK) is loaded once;
a longer row is walked block by block: the forward keeps a running max m and a running
sum ℓ rescaled by exp(m_old − m_new) (the online softmax), then writes y in a second
sweep; the backward accumulates s in one sweep and writes x̄ in a second.

Under ``torch.autocast`` on a GPU the op computes and returns float32, as PyTorch's softmax does there
(float16 and bfloat16 inputs are cast; the CPU's autocast leaves softmax in the input's dtype).

Limitations: float16, float32 and float64 everywhere; bfloat16 only on a GPU (the
CPU interpreter mishandles bfloat16). Arithmetic is float32 for half inputs, and the
input's dtype otherwise.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import RowLaunch, acc_dtype, autocast_to_float32, check_floating, looped_block, row_launch, rows_view

# Rows up to this length are held in registers in one block; longer rows loop.
MAX_FUSED_BLOCK = 8192


@triton.jit
def _softmax_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) input
    Y_ptr,  # (n_rows, n_cols) output
    x_row_stride,
    y_row_stride,
    n_cols,
    BLOCK: tl.constexpr,
    SINGLE_BLOCK: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype: float32, or float64 for float64 inputs
):
    """y = exp(x − m) / ℓ with m = max x and ℓ = Σ exp(x − m), one row per program."""
    row = tl.program_id(0).to(tl.int64)
    x_row = X_ptr + row * x_row_stride
    y_row = Y_ptr + row * y_row_stride
    cols = tl.arange(0, BLOCK)
    if SINGLE_BLOCK:
        # Mask the tail: BLOCK is the next power of two, which may exceed n_cols.
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(ACC)
        m = tl.max(x, axis=0)
        e = tl.exp(x - m)
        e = tl.where(mask, e, 0.0)
        y = e / tl.sum(e, axis=0)
        tl.store(y_row + cols, y.to(Y_ptr.dtype.element_ty), mask=mask)
    else:
        # Sweep 1: running max m and running sum ℓ, rescaled whenever m grows.
        first = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(ACC)
        m = tl.max(first, axis=0)
        l = tl.sum(tl.where(cols < n_cols, tl.exp(first - m), 0.0), axis=0)  # noqa: E741
        for start in range(BLOCK, n_cols, BLOCK):
            offs = start + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf")).to(ACC)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            l = l * tl.exp(m - m_new) + tl.sum(tl.where(offs < n_cols, tl.exp(x - m_new), 0.0), axis=0)  # noqa: E741
            m = m_new
        # Sweep 2: write y; one more read of x, no extra write.
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"))
            y = tl.exp(x.to(ACC) - m) / l
            tl.store(y_row + offs, y.to(Y_ptr.dtype.element_ty), mask=offs < n_cols)


@triton.jit
def _softmax_bwd_kernel(
    DY_ptr,  # (n_rows, n_cols) upstream gradient ȳ
    Y_ptr,  # (n_rows, n_cols) saved forward output y
    DX_ptr,  # (n_rows, n_cols) result x̄
    dy_row_stride,
    y_row_stride,
    dx_row_stride,
    n_cols,
    BLOCK: tl.constexpr,
    SINGLE_BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """x̄ = y ⊙ (ȳ − s) with s = Σ y ȳ over the row: one scalar instead of an N×N Jacobian."""
    row = tl.program_id(0).to(tl.int64)
    dy_row = DY_ptr + row * dy_row_stride
    y_row = Y_ptr + row * y_row_stride
    dx_row = DX_ptr + row * dx_row_stride
    cols = tl.arange(0, BLOCK)
    if SINGLE_BLOCK:
        mask = cols < n_cols
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(ACC)
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(ACC)
        s = tl.sum(y * dy, axis=0)
        tl.store(dx_row + cols, (y * (dy - s)).to(DX_ptr.dtype.element_ty), mask=mask)
    else:
        # Sweep 1: s = ⟨y, ȳ⟩. Sweep 2: x̄ = y ⊙ (ȳ − s). Reads 2N twice, writes N.
        partial = tl.zeros([BLOCK], dtype=ACC)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            dy = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0).to(ACC)
            y = tl.load(y_row + offs, mask=offs < n_cols, other=0.0).to(ACC)
            partial += y * dy
        s = tl.sum(partial, axis=0)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            dy = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0).to(ACC)
            y = tl.load(y_row + offs, mask=offs < n_cols, other=0.0).to(ACC)
            tl.store(dx_row + offs, (y * (dy - s)).to(DX_ptr.dtype.element_ty), mask=offs < n_cols)


def _launch(n_cols: int) -> RowLaunch:
    """The whole row in one block up to MAX_FUSED_BLOCK elements, past that walked a block at a time;
    4 warps up to 2048 lanes (16 elements a thread), 8 up to 8192."""
    return row_launch(n_cols, whole_row_max=MAX_FUSED_BLOCK, loop_block=looped_block(MAX_FUSED_BLOCK), four_warps_max=2048)


def softmax_forward(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of ``x`` (any rank); returns a new tensor shaped like x."""
    check_floating("x", x)
    x2 = rows_view(x)
    n_rows, n_cols = x2.shape
    y2 = torch.empty_like(x2)
    launch = _launch(n_cols)
    if n_rows:
        _softmax_fwd_kernel[(n_rows,)](
            x2, y2, x2.stride(0), y2.stride(0), n_cols,
            BLOCK=launch.block, SINGLE_BLOCK=launch.whole_row, ACC=acc_dtype(x.dtype), num_warps=launch.num_warps,
        )
    return y2.view(x.shape)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """x̄ = y ⊙ (ȳ − ⟨y, ȳ⟩) per row, from the forward output ``y`` and upstream gradient ``dy``."""
    check_floating("y", y)
    if dy.shape != y.shape:
        raise ValueError(f"dy has shape {tuple(dy.shape)} but must match y's {tuple(y.shape)}")
    y2, dy2 = rows_view(y), rows_view(dy.to(y.dtype))
    n_rows, n_cols = y2.shape
    dx2 = torch.empty_like(y2)
    launch = _launch(n_cols)
    if n_rows:
        _softmax_bwd_kernel[(n_rows,)](
            dy2, y2, dx2, dy2.stride(0), y2.stride(0), dx2.stride(0), n_cols,
            BLOCK=launch.block, SINGLE_BLOCK=launch.whole_row, ACC=acc_dtype(y.dtype), num_warps=launch.num_warps,
        )
    return dx2.view(y.shape)


class SoftmaxFunction(torch.autograd.Function):
    """Saves y only: the backward is written entirely in terms of the output."""

    @staticmethod
    def forward(ctx, x):
        y = softmax_forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, differentiable; matches ``torch.softmax(x, -1)``."""
    (x,) = autocast_to_float32(x)
    return SoftmaxFunction.apply(x)
