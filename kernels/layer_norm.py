"""LayerNorm over the last dimension: Triton forward and backward, weight/bias gradients without races.

Forward, per row x of length N:
    μ = mean(x),  rstd = 1/√(var(x) + eps),  x̂ = (x − μ)·rstd,  y = x̂ ⊙ w + b
The forward saves μ and rstd (two scalars per row), not x̂: x̂ is rebuilt from x in the backward.

Backward, per row, with dx̂ = w ⊙ ȳ, the gradient that reaches x̂:
    c1 = mean(x̂ ⊙ dx̂),  c2 = mean(dx̂),  x̄ = (dx̂ − (x̂·c1 + c2))·rstd
and across rows (every row touches every weight, so the sum crosses programs):
    w̄ = Σ_rows ȳ ⊙ x̂,  b̄ = Σ_rows ȳ

The parameter sums are deterministic and race-free by construction: program p walks a
contiguous group of rows and writes its own partial row of w̄ and b̄ into a
(programs, N) buffer; a second pass sums that buffer over programs. No atomics, so the
result is the same on every run and no lock is contended.

The backward holds a whole row in registers while its accumulators fit (8192 float32 elements,
4096 float64). Past that it walks the row in blocks of 2048, twice: once per row for c1 and c2,
then per column block over the program's rows for x̄ and the w̄, b̄ partials. It reads x and ȳ
twice instead of once, so that no row length makes it spill.

Limitations: the forward holds a row of up to 16384 elements in one block (longer rows are
refused with a message); float32/float64 everywhere, float16/bfloat16 on a GPU; statistics are
accumulated in float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import (acc_dtype, acc_torch_dtype, backward_row_block, check_floating, check_param, reduction_programs, row_block,
                      row_num_warps, rows_view)

@triton.jit
def _layer_norm_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) input
    Y_ptr,  # (n_rows, n_cols) output
    W_ptr,  # (n_cols,) weight, read only if HAS_WEIGHT
    B_ptr,  # (n_cols,) bias, read only if HAS_BIAS
    Mean_ptr,  # (n_rows,) saved μ
    Rstd_ptr,  # (n_rows,) saved rstd
    x_row_stride,
    y_row_stride,
    n_cols,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """y = (x − μ)·rstd ⊙ w + b, one row per program; stores μ and rstd for the backward."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(ACC)
    mean = tl.sum(x, axis=0) / n_cols
    # Zero the padding lanes so they add nothing to the variance.
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    y = xc * rstd
    if HAS_WEIGHT:
        y = y * tl.load(W_ptr + cols, mask=mask, other=0.0).to(ACC)
    if HAS_BIAS:
        y = y + tl.load(B_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(Y_ptr + row * y_row_stride + cols, y.to(Y_ptr.dtype.element_ty), mask=mask)
    tl.store(Mean_ptr + row, mean)
    tl.store(Rstd_ptr + row, rstd)


@triton.jit
def _layer_norm_bwd_kernel(
    X_ptr,  # (n_rows, n_cols) input
    DY_ptr,  # (n_rows, n_cols) upstream gradient ȳ
    DX_ptr,  # (n_rows, n_cols) result x̄
    W_ptr,  # (n_cols,) weight, read only if HAS_WEIGHT
    Mean_ptr,  # (n_rows,) saved μ
    Rstd_ptr,  # (n_rows,) saved rstd
    C_ptr,  # (2, n_rows) scratch for c1 and c2, used only if not WHOLE_ROW
    DW_partial_ptr,  # (n_programs, n_cols) this program's share of w̄
    DB_partial_ptr,  # (n_programs, n_cols) this program's share of b̄
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
    """x̄ = (dx̂ − (x̂·c1 + c2))·rstd with c1 = mean(x̂ ⊙ dx̂), c2 = mean(dx̂);
    partial w̄ = Σ ȳ ⊙ x̂ and b̄ = Σ ȳ over this program's rows.

    WHOLE_ROW: one BLOCK holds a row, read once. Otherwise the row is walked in BLOCK-wide
    pieces twice: a first pass per row for c1 and c2, then a pass per column block over this
    program's rows for x̄, w̄ and b̄ (so the partials of one column block stay in registers)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, n_rows)
    dw_partial_ptrs = DW_partial_ptr + pid.to(tl.int64) * n_cols + cols
    db_partial_ptrs = DB_partial_ptr + pid.to(tl.int64) * n_cols + cols
    if WHOLE_ROW:
        mask = cols < n_cols
        if HAS_WEIGHT:
            w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(ACC)
        dw_acc = tl.zeros([BLOCK], dtype=ACC)
        db_acc = tl.zeros([BLOCK], dtype=ACC)
        # Walk the rows by advancing 64-bit pointers: row * stride may not fit in 32 bits.
        x_ptrs = X_ptr + first.to(tl.int64) * x_row_stride + cols
        dy_ptrs = DY_ptr + first.to(tl.int64) * dy_row_stride + cols
        dx_ptrs = DX_ptr + first.to(tl.int64) * dx_row_stride + cols
        for row in range(first, last):
            x = tl.load(x_ptrs, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_ptrs, mask=mask, other=0.0).to(ACC)
            mean = tl.load(Mean_ptr + row).to(ACC)
            rstd = tl.load(Rstd_ptr + row).to(ACC)
            # Rebuild x̂ from x and two saved scalars instead of reading a saved x̂ (N more bytes).
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            if HAS_WEIGHT:
                wdy = dy * w
            else:
                wdy = dy
            c1 = tl.sum(xhat * wdy, axis=0) / n_cols
            c2 = tl.sum(wdy, axis=0) / n_cols
            dx = (wdy - (xhat * c1 + c2)) * rstd
            tl.store(dx_ptrs, dx.to(DX_ptr.dtype.element_ty), mask=mask)
            dw_acc += dy * xhat
            db_acc += dy
            x_ptrs += x_row_stride
            dy_ptrs += dy_row_stride
            dx_ptrs += dx_row_stride
        tl.store(dw_partial_ptrs, dw_acc, mask=mask)
        tl.store(db_partial_ptrs, db_acc, mask=mask)
    else:
        # Pass 1, row by row: c1 and c2 need the whole row before any of x̄ can be written.
        x_row = X_ptr + first.to(tl.int64) * x_row_stride
        dy_row = DY_ptr + first.to(tl.int64) * dy_row_stride
        for row in range(first, last):
            mean = tl.load(Mean_ptr + row).to(ACC)
            rstd = tl.load(Rstd_ptr + row).to(ACC)
            xhat_wdy = tl.zeros([BLOCK], dtype=ACC)
            wdy_sum = tl.zeros([BLOCK], dtype=ACC)
            for start in range(0, n_cols, BLOCK):
                mask = start + cols < n_cols
                x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(ACC)
                dy = tl.load(dy_row + start + cols, mask=mask, other=0.0).to(ACC)
                xhat = tl.where(mask, (x - mean) * rstd, 0.0)
                if HAS_WEIGHT:
                    wdy = dy * tl.load(W_ptr + start + cols, mask=mask, other=0.0).to(ACC)
                else:
                    wdy = dy
                xhat_wdy += xhat * wdy
                wdy_sum += wdy
            tl.store(C_ptr + row, tl.sum(xhat_wdy, axis=0) / n_cols)
            tl.store(C_ptr + n_rows + row, tl.sum(wdy_sum, axis=0) / n_cols)
            x_row += x_row_stride
            dy_row += dy_row_stride
        # Let every thread of this program see the c1 and c2 that pass 1 stored.
        tl.debug_barrier()
        # Pass 2, column block by column block: x̄ for each row, and this block's w̄ and b̄ partials.
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            if HAS_WEIGHT:
                w = tl.load(W_ptr + start + cols, mask=mask, other=0.0).to(ACC)
            dw_acc = tl.zeros([BLOCK], dtype=ACC)
            db_acc = tl.zeros([BLOCK], dtype=ACC)
            x_ptrs = X_ptr + first.to(tl.int64) * x_row_stride + start + cols
            dy_ptrs = DY_ptr + first.to(tl.int64) * dy_row_stride + start + cols
            dx_ptrs = DX_ptr + first.to(tl.int64) * dx_row_stride + start + cols
            for row in range(first, last):
                x = tl.load(x_ptrs, mask=mask, other=0.0).to(ACC)
                dy = tl.load(dy_ptrs, mask=mask, other=0.0).to(ACC)
                mean = tl.load(Mean_ptr + row).to(ACC)
                rstd = tl.load(Rstd_ptr + row).to(ACC)
                c1 = tl.load(C_ptr + row)
                c2 = tl.load(C_ptr + n_rows + row)
                xhat = tl.where(mask, (x - mean) * rstd, 0.0)
                if HAS_WEIGHT:
                    wdy = dy * w
                else:
                    wdy = dy
                dx = (wdy - (xhat * c1 + c2)) * rstd
                tl.store(dx_ptrs, dx.to(DX_ptr.dtype.element_ty), mask=mask)
                dw_acc += dy * xhat
                db_acc += dy
                x_ptrs += x_row_stride
                dy_ptrs += dy_row_stride
                dx_ptrs += dx_row_stride
            tl.store(dw_partial_ptrs + start, dw_acc, mask=mask)
            tl.store(db_partial_ptrs + start, db_acc, mask=mask)


def layer_norm_forward(x, weight=None, bias=None, eps: float = 1e-5):
    """y, and the μ and rstd per row that the backward needs (each shaped like x without its last dim)."""
    check_floating("x", x)
    check_param(x, "weight", weight)
    check_param(x, "bias", bias)
    x2 = rows_view(x)
    n_rows, n_cols = x2.shape
    y2 = torch.empty_like(x2)
    acc = acc_torch_dtype(x.dtype)
    mean = torch.empty(n_rows, dtype=acc, device=x.device)
    rstd = torch.empty(n_rows, dtype=acc, device=x.device)
    block = row_block(n_cols)
    if n_rows:
        _layer_norm_fwd_kernel[(n_rows,)](
            x2, y2, weight if weight is not None else x2, bias if bias is not None else x2, mean, rstd,
            x2.stride(0), y2.stride(0), n_cols, eps,
            HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, BLOCK=block, ACC=acc_dtype(x.dtype),
            num_warps=row_num_warps(block),
        )
    return y2.view(x.shape), mean, rstd


def layer_norm_backward(dy, x, weight, mean, rstd):
    """x̄, w̄ and b̄ (w̄/b̄ reduced over every row in two race-free passes)."""
    x2, dy2 = rows_view(x), rows_view(dy.to(x.dtype))
    n_rows, n_cols = x2.shape
    dx2 = torch.empty_like(x2)
    programs = reduction_programs(n_rows, x.device)
    acc = acc_torch_dtype(x.dtype)
    dw_partial = torch.zeros(programs, n_cols, dtype=acc, device=x.device)
    db_partial = torch.zeros(programs, n_cols, dtype=acc, device=x.device)
    block, whole_row = backward_row_block(n_cols, x.dtype)
    # Rows too long for one block keep c1 and c2 here between their two passes.
    c = mean if whole_row else torch.empty(2, n_rows, dtype=acc, device=x.device)
    if n_rows:
        _layer_norm_bwd_kernel[(programs,)](
            x2, dy2, dx2, weight if weight is not None else x2, mean, rstd, c, dw_partial, db_partial,
            x2.stride(0), dy2.stride(0), dx2.stride(0), n_rows, n_cols, triton.cdiv(n_rows, programs),
            HAS_WEIGHT=weight is not None, BLOCK=block, WHOLE_ROW=whole_row, ACC=acc_dtype(x.dtype),
            num_warps=row_num_warps(block),
        )
    # Second pass: sum the per-program partials. Same order every run, so bit-reproducible.
    return dx2.view(x.shape), dw_partial.sum(0).to(x.dtype), db_partial.sum(0).to(x.dtype)


class LayerNormFunction(torch.autograd.Function):
    """Saves x, w, μ and rstd; x̂ is rebuilt in the backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = layer_norm_forward(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layer_norm_backward(dy, x, weight, mean, rstd)
        return dx, (dw if weight is not None else None), (db if ctx.has_bias else None), None


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim; matches ``torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)``."""
    return LayerNormFunction.apply(x, weight, bias, eps)
