"""RMSNorm over the last dimension: LayerNorm's skeleton with one row scalar instead of two.

Forward, per row x of length N:
    rrms = 1/√(mean(x²) + eps),  x̂ = x·rrms,  y = x̂ ⊙ w
The forward saves rrms (one scalar per row).

Backward, per row, with dx̂ = w ⊙ ȳ, the gradient that reaches x̂:
    c1 = mean(x̂ ⊙ dx̂),  x̄ = (dx̂ − x̂·c1)·rrms
and across rows:  w̄ = Σ_rows ȳ ⊙ x̂  (per-program partial rows, then a second pass; no atomics).

As in kernels.layer_norm, the backward walks rows longer than 8192 float32 elements (4096
float64) in blocks: c1 per row first, then x̄ and w̄ per column block, reading x and ȳ twice.

Limitations: as for kernels.layer_norm — forward rows up to 16384 elements, float32/float64
everywhere and float16/bfloat16 on a GPU, float32 statistics (float64 for float64 input).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import (acc_dtype, acc_torch_dtype, backward_row_block, check_floating, check_param, reduction_programs, row_block,
                      row_num_warps, rows_view)


@triton.jit
def _rms_norm_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) input
    Y_ptr,  # (n_rows, n_cols) output
    W_ptr,  # (n_cols,) weight, read only if HAS_WEIGHT
    Rrms_ptr,  # (n_rows,) saved 1/rms
    x_row_stride,
    y_row_stride,
    n_cols,
    eps,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """y = x·rrms ⊙ w with rrms = 1/√(mean(x²) + eps), one row per program."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(ACC)
    rrms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = x * rrms
    if HAS_WEIGHT:
        y = y * tl.load(W_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(Y_ptr + row * y_row_stride + cols, y.to(Y_ptr.dtype.element_ty), mask=mask)
    tl.store(Rrms_ptr + row, rrms)


@triton.jit
def _rms_norm_bwd_kernel(
    X_ptr,  # (n_rows, n_cols) input
    DY_ptr,  # (n_rows, n_cols) upstream gradient ȳ
    DX_ptr,  # (n_rows, n_cols) result x̄
    W_ptr,  # (n_cols,) weight, read only if HAS_WEIGHT
    Rrms_ptr,  # (n_rows,) saved 1/rms
    C1_ptr,  # (n_rows,) scratch for c1, used only if not WHOLE_ROW
    DW_partial_ptr,  # (n_programs, n_cols) this program's share of w̄
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    rows_per_program,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    WHOLE_ROW: tl.constexpr,
    ACC: tl.constexpr,
):
    """x̄ = (dx̂ − x̂·c1)·rrms with c1 = mean(x̂ ⊙ dx̂); partial w̄ = Σ ȳ ⊙ x̂ over this program's rows.

    WHOLE_ROW: one BLOCK holds a row, read once. Otherwise the row is walked in BLOCK-wide
    pieces twice, as in kernels.layer_norm: c1 per row, then x̄ and w̄ per column block."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, n_rows)
    dw_partial_ptrs = DW_partial_ptr + pid.to(tl.int64) * n_cols + cols
    if WHOLE_ROW:
        mask = cols < n_cols
        if HAS_WEIGHT:
            w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(ACC)
        dw_acc = tl.zeros([BLOCK], dtype=ACC)
        x_ptrs = X_ptr + first.to(tl.int64) * x_row_stride + cols
        dy_ptrs = DY_ptr + first.to(tl.int64) * dy_row_stride + cols
        dx_ptrs = DX_ptr + first.to(tl.int64) * dx_row_stride + cols
        for row in range(first, last):
            x = tl.load(x_ptrs, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_ptrs, mask=mask, other=0.0).to(ACC)
            rrms = tl.load(Rrms_ptr + row).to(ACC)
            xhat = x * rrms
            if HAS_WEIGHT:
                wdy = dy * w
            else:
                wdy = dy
            c1 = tl.sum(xhat * wdy, axis=0) / n_cols
            tl.store(dx_ptrs, ((wdy - xhat * c1) * rrms).to(DX_ptr.dtype.element_ty), mask=mask)
            dw_acc += dy * xhat
            x_ptrs += x_row_stride
            dy_ptrs += dy_row_stride
            dx_ptrs += dx_row_stride
        tl.store(dw_partial_ptrs, dw_acc, mask=mask)
    else:
        # Pass 1, row by row: c1 needs the whole row before any of x̄ can be written.
        x_row = X_ptr + first.to(tl.int64) * x_row_stride
        dy_row = DY_ptr + first.to(tl.int64) * dy_row_stride
        for row in range(first, last):
            rrms = tl.load(Rrms_ptr + row).to(ACC)
            xhat_wdy = tl.zeros([BLOCK], dtype=ACC)
            for start in range(0, n_cols, BLOCK):
                mask = start + cols < n_cols
                x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(ACC)
                dy = tl.load(dy_row + start + cols, mask=mask, other=0.0).to(ACC)
                if HAS_WEIGHT:
                    wdy = dy * tl.load(W_ptr + start + cols, mask=mask, other=0.0).to(ACC)
                else:
                    wdy = dy
                xhat_wdy += x * rrms * wdy
            tl.store(C1_ptr + row, tl.sum(xhat_wdy, axis=0) / n_cols)
            x_row += x_row_stride
            dy_row += dy_row_stride
        # Let every thread of this program see the c1 that pass 1 stored.
        tl.debug_barrier()
        # Pass 2, column block by column block: x̄ for each row, and this block's w̄ partial.
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            if HAS_WEIGHT:
                w = tl.load(W_ptr + start + cols, mask=mask, other=0.0).to(ACC)
            dw_acc = tl.zeros([BLOCK], dtype=ACC)
            x_ptrs = X_ptr + first.to(tl.int64) * x_row_stride + start + cols
            dy_ptrs = DY_ptr + first.to(tl.int64) * dy_row_stride + start + cols
            dx_ptrs = DX_ptr + first.to(tl.int64) * dx_row_stride + start + cols
            for row in range(first, last):
                x = tl.load(x_ptrs, mask=mask, other=0.0).to(ACC)
                dy = tl.load(dy_ptrs, mask=mask, other=0.0).to(ACC)
                rrms = tl.load(Rrms_ptr + row).to(ACC)
                c1 = tl.load(C1_ptr + row)
                xhat = x * rrms
                if HAS_WEIGHT:
                    wdy = dy * w
                else:
                    wdy = dy
                tl.store(dx_ptrs, ((wdy - xhat * c1) * rrms).to(DX_ptr.dtype.element_ty), mask=mask)
                dw_acc += dy * xhat
                x_ptrs += x_row_stride
                dy_ptrs += dy_row_stride
                dx_ptrs += dx_row_stride
            tl.store(dw_partial_ptrs + start, dw_acc, mask=mask)


def rms_norm_forward(x, weight=None, eps: float = 1e-6):
    """y and the rrms per row that the backward needs."""
    check_floating("x", x)
    check_param(x, "weight", weight)
    x2 = rows_view(x)
    n_rows, n_cols = x2.shape
    y2 = torch.empty_like(x2)
    rrms = torch.empty(n_rows, dtype=acc_torch_dtype(x.dtype), device=x.device)
    block = row_block(n_cols)
    if n_rows:
        _rms_norm_fwd_kernel[(n_rows,)](
            x2, y2, weight if weight is not None else x2, rrms, x2.stride(0), y2.stride(0), n_cols, eps,
            HAS_WEIGHT=weight is not None, BLOCK=block, ACC=acc_dtype(x.dtype), num_warps=row_num_warps(block),
        )
    return y2.view(x.shape), rrms


def rms_norm_backward(dy, x, weight, rrms):
    """x̄ and w̄ (w̄ reduced over every row in two race-free passes)."""
    x2, dy2 = rows_view(x), rows_view(dy.to(x.dtype))
    n_rows, n_cols = x2.shape
    dx2 = torch.empty_like(x2)
    programs = reduction_programs(n_rows, x.device)
    dw_partial = torch.zeros(programs, n_cols, dtype=acc_torch_dtype(x.dtype), device=x.device)
    block, whole_row = backward_row_block(n_cols, x.dtype)
    # Rows too long for one block keep c1 here between their two passes.
    c1 = rrms if whole_row else torch.empty(n_rows, dtype=acc_torch_dtype(x.dtype), device=x.device)
    if n_rows:
        _rms_norm_bwd_kernel[(programs,)](
            x2, dy2, dx2, weight if weight is not None else x2, rrms, c1, dw_partial,
            x2.stride(0), dy2.stride(0), dx2.stride(0), n_rows, n_cols, triton.cdiv(n_rows, programs),
            HAS_WEIGHT=weight is not None, BLOCK=block, WHOLE_ROW=whole_row, ACC=acc_dtype(x.dtype),
            num_warps=row_num_warps(block),
        )
    return dx2.view(x.shape), dw_partial.sum(0).to(x.dtype)


class RMSNormFunction(torch.autograd.Function):
    """Saves x, w and rrms; x̂ is rebuilt in the backward."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rrms = rms_norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rrms)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rrms = ctx.saved_tensors
        dx, dw = rms_norm_backward(dy, x, weight, rrms)
        return dx, (dw if weight is not None else None), None


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``x · rsqrt(mean(x², -1) + eps) · weight``."""
    return RMSNormFunction.apply(x, weight, eps)
