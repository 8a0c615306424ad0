"""LayerNorm and RMSNorm from one kernel family: RMSNorm is LayerNorm without the mean and the bias.

The constexpr ``RMS`` picks the op inside one forward and one backward kernel; kernels.layer_norm and
kernels.rms_norm hold each op's math, its host functions and its autograd Function.

Forward, per row x of length N, one row per program:
    x_c = x − μ (LayerNorm) or x (RMSNorm),  rstd = 1/√(mean(x_c²) + eps),  y = x_c·rstd ⊙ g (+ b)
with g = offset + w (offset is a runtime scalar: RMSNorm's Gemma offset, 0.0 for LayerNorm).
Backward, per row, with x̂ = x_c·rstd and dx̂ = g ⊙ ȳ:
    c1 = mean(x̂ ⊙ dx̂),  c2 = mean(dx̂) (LayerNorm only),  x̄ = (dx̂ − (x̂·c1 + c2))·rstd
and across rows:  w̄ = Σ_rows ȳ ⊙ x̂,  b̄ = Σ_rows ȳ (LayerNorm only).

The parameter sums are deterministic and race-free by construction: program p walks a contiguous
group of rows and writes its own partial row of w̄ (and b̄) into a (programs, N) buffer; a second
pass sums that buffer over programs. No atomics, so every run gives the same bits.

The backward holds a whole row in registers while its accumulators fit (8192 float32 elements,
4096 float64). Past that it walks the row in blocks of BWD_COL_BLOCK, twice: once per row for c1
and c2, then per column block over the program's rows for x̄ and the partials. It reads x and ȳ
twice instead of once, so that no row length makes it spill. Rows are addressed through their
strides; only the columns must be contiguous.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._common import (
    RowLaunch,
    acc_dtype,
    acc_torch_dtype,
    check_floating,
    check_param,
    interpreted,
    launch_target,
    reduction_programs,
    row_launch,
    rows_view,
)

# The forward holds a whole row in one block, up to this many elements.
MAX_ROW_BLOCK = 16384
# Up to 1024 lanes on 4 warps (8 elements a thread), then 8 and 16 warps.
FOUR_WARPS_MAX = 1024
# The backward that holds a whole row keeps about five accumulator-dtype values per element live in
# registers (the row of x and ȳ, the weight, and the running w̄ and b̄ partials): 8192 float32
# elements is 80 registers a thread at 16 warps, under the 128 a 512-thread block may use; 16384
# would spill. Past this many bytes of one accumulator row it walks the row in blocks of BWD_COL_BLOCK.
MAX_BWD_ROW_BYTES = 8192 * 4
BWD_COL_BLOCK = 2048


def forward_launch(n_cols: int) -> RowLaunch:
    """The forward's block: the whole row, refused past MAX_ROW_BLOCK elements.

    Past 8192 lanes on NVIDIA, 32 warps (1024 threads, the most a block may have) rather than 16: on 16 warps
    ptxas keeps the 32 elements a thread holds in 64 registers and spills 8 B in float32 (LayerNorm on sm_75,
    RMSNorm on sm_86 and sm_89). AMD's 64-lane waves already give 16 elements a thread on 16 warps.
    """
    launch = row_launch(n_cols, whole_row_max=MAX_ROW_BLOCK, four_warps_max=FOUR_WARPS_MAX)
    if launch.block > 8192 and not interpreted() and launch_target().warp_size == 32:
        return RowLaunch(launch.block, launch.whole_row, 32)
    return launch


def backward_launch(n_cols: int, dtype: torch.dtype) -> RowLaunch:
    """The backward's block: the whole row while its accumulators fit the registers, else BWD_COL_BLOCK walked along it."""
    whole_row_max = MAX_BWD_ROW_BYTES // acc_torch_dtype(dtype).itemsize
    return row_launch(n_cols, whole_row_max=whole_row_max, loop_block=BWD_COL_BLOCK, four_warps_max=FOUR_WARPS_MAX)


@triton.jit
def _norm_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) input
    Y_ptr,  # (n_rows, n_cols) output
    W_ptr,  # (n_cols,) weight, read only if HAS_WEIGHT
    B_ptr,  # (n_cols,) bias, read only if HAS_BIAS
    Mean_ptr,  # (n_rows,) saved μ, written only for LayerNorm
    Rstd_ptr,  # (n_rows,) saved rstd (RMSNorm's rrms)
    x_row_stride,
    y_row_stride,
    n_cols,
    eps,
    offset,  # added to every weight (RMSNorm's Gemma offset; 0.0 for LayerNorm)
    RMS: tl.constexpr,  # RMSNorm: no mean to subtract
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """y = x_c·rstd ⊙ (offset + w) + b with x_c = x − μ, or x for RMSNorm, one row per program; stores μ and rstd."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(ACC)
    if RMS:
        xc = x  # the padding lanes loaded as 0
    else:
        mean = tl.sum(x, axis=0) / n_cols
        # Zero the padding lanes so they add nothing to the variance.
        xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    y = xc * rstd
    if HAS_WEIGHT:
        y = y * (tl.load(W_ptr + cols, mask=mask, other=0.0).to(ACC) + offset)
    if HAS_BIAS:
        y = y + tl.load(B_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(Y_ptr + row * y_row_stride + cols, y.to(Y_ptr.dtype.element_ty), mask=mask)
    if not RMS:
        tl.store(Mean_ptr + row, mean)
    tl.store(Rstd_ptr + row, rstd)


@triton.jit
def _row_stats(Mean_ptr, Rstd_ptr, row, RMS: tl.constexpr, ACC: tl.constexpr):
    """(μ, rstd) that the forward saved for one row; RMSNorm saved no μ."""
    mean = 0.0
    if not RMS:
        mean = tl.load(Mean_ptr + row).to(ACC)
    return mean, tl.load(Rstd_ptr + row).to(ACC)


@triton.jit
def _x_hat(x, mask, mean, rstd, RMS: tl.constexpr):
    """x̂ rebuilt from x and two saved scalars instead of read back (N more bytes a row); 0 on padding lanes."""
    if RMS:
        xhat = x * rstd  # the padding lanes loaded as 0
    else:
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    return xhat


@triton.jit
def _x_bar(xhat, wdy, c1, c2, rstd, RMS: tl.constexpr):
    """x̄ = (dx̂ − (x̂·c1 + c2))·rstd; RMSNorm has no c2."""
    if RMS:
        dx = (wdy - xhat * c1) * rstd
    else:
        dx = (wdy - (xhat * c1 + c2)) * rstd
    return dx


@triton.jit
def _norm_bwd_row_sums(
    X_ptr, DY_ptr, W_ptr, Mean_ptr, Rstd_ptr, C_ptr, x_row_stride, dy_row_stride, n_rows, n_cols, first, last, offset,
    RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr,
):
    """Pass 1 over rows longer than BLOCK, row by row: c1 into C[0, row] and c2 into C[1, row]."""
    cols = tl.arange(0, BLOCK)
    x_row = X_ptr + first.to(tl.int64) * x_row_stride
    dy_row = DY_ptr + first.to(tl.int64) * dy_row_stride
    for row in range(first, last):
        mean, rstd = _row_stats(Mean_ptr, Rstd_ptr, row, RMS, ACC)
        xhat_wdy = tl.zeros([BLOCK], dtype=ACC)
        if not RMS:
            wdy_sum = tl.zeros([BLOCK], dtype=ACC)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_row + start + cols, mask=mask, other=0.0).to(ACC)
            if HAS_WEIGHT:
                wdy = dy * (tl.load(W_ptr + start + cols, mask=mask, other=0.0).to(ACC) + offset)
            else:
                wdy = dy
            xhat_wdy += _x_hat(x, mask, mean, rstd, RMS) * wdy
            if not RMS:
                wdy_sum += wdy
        tl.store(C_ptr + row, tl.sum(xhat_wdy, axis=0) / n_cols)
        if not RMS:
            tl.store(C_ptr + n_rows + row, tl.sum(wdy_sum, axis=0) / n_cols)
        x_row += x_row_stride
        dy_row += dy_row_stride


@triton.jit
def _norm_bwd_columns(
    start, X_ptr, DY_ptr, DX_ptr, W_ptr, Mean_ptr, Rstd_ptr, C_ptr, DW_row_ptr, DB_row_ptr,
    x_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols, first, last, offset,
    RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr, WHOLE_ROW: tl.constexpr, ACC: tl.constexpr,
):
    """x̄ in columns [start, start + BLOCK) of rows [first, last), and these columns' w̄ and b̄ partials.

    WHOLE_ROW: the block is the row, so c1 and c2 are summed here; otherwise pass 1 stored them in C.
    Columns outer, rows inner: the partials of one column block stay in registers."""
    cols = start + tl.arange(0, BLOCK)
    mask = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(ACC) + offset
    dw_acc = tl.zeros([BLOCK], dtype=ACC)
    if not RMS:
        db_acc = tl.zeros([BLOCK], dtype=ACC)
    # Walk the rows by advancing 64-bit pointers: row * stride may not fit in 32 bits.
    x_ptrs = X_ptr + first.to(tl.int64) * x_row_stride + cols
    dy_ptrs = DY_ptr + first.to(tl.int64) * dy_row_stride + cols
    dx_ptrs = DX_ptr + first.to(tl.int64) * dx_row_stride + cols
    for row in range(first, last):
        x = tl.load(x_ptrs, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptrs, mask=mask, other=0.0).to(ACC)
        mean, rstd = _row_stats(Mean_ptr, Rstd_ptr, row, RMS, ACC)
        xhat = _x_hat(x, mask, mean, rstd, RMS)
        if HAS_WEIGHT:
            wdy = dy * w
        else:
            wdy = dy
        c2 = 0.0
        if WHOLE_ROW:
            c1 = tl.sum(xhat * wdy, axis=0) / n_cols
            if not RMS:
                c2 = tl.sum(wdy, axis=0) / n_cols
        else:
            c1 = tl.load(C_ptr + row)
            if not RMS:
                c2 = tl.load(C_ptr + n_rows + row)
        tl.store(dx_ptrs, _x_bar(xhat, wdy, c1, c2, rstd, RMS).to(DX_ptr.dtype.element_ty), mask=mask)
        dw_acc += dy * xhat
        if not RMS:
            db_acc += dy
        x_ptrs += x_row_stride
        dy_ptrs += dy_row_stride
        dx_ptrs += dx_row_stride
    tl.store(DW_row_ptr + cols, dw_acc, mask=mask)
    if not RMS:
        tl.store(DB_row_ptr + cols, db_acc, mask=mask)


@triton.jit
def _norm_bwd_kernel(
    X_ptr,  # (n_rows, n_cols) input
    DY_ptr,  # (n_rows, n_cols) upstream gradient ȳ
    DX_ptr,  # (n_rows, n_cols) result x̄
    W_ptr,  # (n_cols,) weight, read only if HAS_WEIGHT
    Mean_ptr,  # (n_rows,) saved μ, read only for LayerNorm
    Rstd_ptr,  # (n_rows,) saved rstd (RMSNorm's rrms)
    C_ptr,  # (2, n_rows) scratch for c1 and c2 (RMSNorm: (1, n_rows), c1 only), used only if not WHOLE_ROW
    DW_partial_ptr,  # (n_programs, n_cols) this program's share of w̄
    DB_partial_ptr,  # (n_programs, n_cols) this program's share of b̄, written only for LayerNorm
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    rows_per_program,
    offset,  # added to every weight before it scales ȳ (RMSNorm's Gemma offset; 0.0 for LayerNorm)
    RMS: tl.constexpr,  # RMSNorm: no mean, so no c2 and no b̄
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    WHOLE_ROW: tl.constexpr,
    ACC: tl.constexpr,
):
    """x̄ = (dx̂ − (x̂·c1 + c2))·rstd with c1 = mean(x̂ ⊙ dx̂), c2 = mean(dx̂) (0 for RMSNorm);
    partial w̄ = Σ ȳ ⊙ x̂ and b̄ = Σ ȳ over this program's rows.

    WHOLE_ROW: one BLOCK holds a row, read once. Otherwise the row is walked in BLOCK-wide
    pieces twice: a first pass per row for c1 and c2, then a pass per column block over this
    program's rows for x̄, w̄ and b̄."""
    pid = tl.program_id(0)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, n_rows)
    dw_row = DW_partial_ptr + pid.to(tl.int64) * n_cols
    db_row = DB_partial_ptr + pid.to(tl.int64) * n_cols
    if WHOLE_ROW:
        _norm_bwd_columns(0, X_ptr, DY_ptr, DX_ptr, W_ptr, Mean_ptr, Rstd_ptr, C_ptr, dw_row, db_row,
                          x_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols, first, last, offset,
                          RMS, HAS_WEIGHT, BLOCK, WHOLE_ROW, ACC)
    else:
        # c1 and c2 need the whole row before any of x̄ can be written.
        _norm_bwd_row_sums(X_ptr, DY_ptr, W_ptr, Mean_ptr, Rstd_ptr, C_ptr, x_row_stride, dy_row_stride, n_rows, n_cols,
                           first, last, offset, RMS, HAS_WEIGHT, BLOCK, ACC)
        # Let every thread of this program see the c1 and c2 that pass 1 stored.
        tl.debug_barrier()
        for start in range(0, n_cols, BLOCK):
            _norm_bwd_columns(start, X_ptr, DY_ptr, DX_ptr, W_ptr, Mean_ptr, Rstd_ptr, C_ptr, dw_row, db_row,
                              x_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols, first, last, offset,
                              RMS, HAS_WEIGHT, BLOCK, WHOLE_ROW, ACC)


def check_offset(offset, weight) -> None:
    """The weight offset must be a finite real number, and scales nothing without a weight."""
    if isinstance(offset, bool) or not isinstance(offset, (int, float)) or not math.isfinite(offset):
        raise TypeError(f"offset must be a finite float (Gemma's RMSNorm uses 1.0), got {offset!r}")
    if offset != 0 and weight is None:
        raise ValueError(f"offset={offset} is added to the weight, but weight is None: pass a weight, or offset=0.0")


def norm_forward(x, weight, bias, eps: float, rms: bool, offset: float = 0.0):
    """y, and the μ (LayerNorm; for RMSNorm the rstd tensor again) and rstd per row that the backward needs.

    ``offset`` is added to every weight (y = x̂ ⊙ (offset + w)); it needs a weight."""
    check_floating("x", x)
    check_param(x, "weight", weight)
    check_param(x, "bias", bias)
    check_offset(offset, weight)
    x2 = rows_view(x)
    n_rows, n_cols = x2.shape
    y2 = torch.empty_like(x2)
    acc = acc_torch_dtype(x.dtype)
    rstd = torch.empty(n_rows, dtype=acc, device=x.device)
    mean = rstd if rms else torch.empty(n_rows, dtype=acc, device=x.device)
    launch = forward_launch(n_cols)
    if n_rows:
        _norm_fwd_kernel[(n_rows,)](
            x2, y2, weight if weight is not None else x2, bias if bias is not None else x2, mean, rstd,
            x2.stride(0), y2.stride(0), n_cols, eps, float(offset),
            RMS=rms, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, BLOCK=launch.block,
            ACC=acc_dtype(x.dtype), num_warps=launch.num_warps,
        )
    return y2.view(x.shape), mean, rstd


def norm_backward(dy, x, weight, mean, rstd, rms: bool, offset: float = 0.0, bias_dtype: torch.dtype | None = None):
    """x̄, w̄ and b̄ (for RMSNorm b̄ is None), w̄ and b̄ reduced over every row in two race-free passes.

    w̄ comes in w's dtype and b̄ in ``bias_dtype`` (default: x's), each rounded once from the float32
    (float64) sums: a float32 weight of a float16 x gets float32 gradients."""
    x2, dy2 = rows_view(x), rows_view(dy.to(x.dtype))
    n_rows, n_cols = x2.shape
    dx2 = torch.empty_like(x2)
    programs = reduction_programs(n_rows, x.device)
    acc = acc_torch_dtype(x.dtype)
    dw_partial = torch.zeros(programs, n_cols, dtype=acc, device=x.device)
    db_partial = dw_partial if rms else torch.zeros(programs, n_cols, dtype=acc, device=x.device)
    launch = backward_launch(n_cols, x.dtype)
    # Rows too long for one block keep c1 (and c2) here between their two passes.
    c = rstd if launch.whole_row else torch.empty(1 if rms else 2, n_rows, dtype=acc, device=x.device)
    if n_rows:
        _norm_bwd_kernel[(programs,)](
            x2, dy2, dx2, weight if weight is not None else x2, mean, rstd, c, dw_partial, db_partial,
            x2.stride(0), dy2.stride(0), dx2.stride(0), n_rows, n_cols, triton.cdiv(n_rows, programs), float(offset),
            RMS=rms, HAS_WEIGHT=weight is not None, BLOCK=launch.block, WHOLE_ROW=launch.whole_row,
            ACC=acc_dtype(x.dtype), num_warps=launch.num_warps,
        )
    # Second pass: sum the per-program partials. Same order every run, so bit-reproducible.
    db = None if rms else db_partial.sum(0).to(bias_dtype or x.dtype)
    return dx2.view(x.shape), dw_partial.sum(0).to(weight.dtype if weight is not None else x.dtype), db
