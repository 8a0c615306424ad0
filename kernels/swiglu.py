"""SwiGLU's gate, h = silu(a) ⊙ b over (..., F): Triton forward and fused backward behind autograd.

a and b are the MLP's gate and up projections (Llama: a = x W_gate, b = x W_up), each (..., F).

Forward, per element:   σ = 1 / (1 + e^(−a)),  h = a·σ·b
Backward: ā and b̄ from a, b and h̄ (``_swiglu_bwd_kernel``).

What the backward keeps: a and b, the op's inputs, which the autograd graph holds for the
matmuls that made them anyway. σ is recomputed from a in the backward: one exponential per
element, free in a kernel bound by memory, where saving σ (or silu(a)) would add a T·F write to
the forward and a T·F read to the backward. The backward is one kernel that reads a, b and h̄
once and writes ā and b̄: 5·T·F elements moved, the forward 3·T·F.

Each program takes one block of one row (grid: rows × blocks of F), masked past F, so F need not
be a multiple of anything. Rows are addressed through their strides; the last dimension must be
contiguous (a row view copies it otherwise). Arithmetic is float32 for float16 and bfloat16 inputs
(float64 for float64), rounded once to the output's dtype.

Dtypes: a and b as PyTorch's ``F.silu(a) * b`` takes them — the two are promoted to one dtype
(float16 with float32 gives float32). torch.autocast casts neither silu nor mul, and neither does
this op. Float16, float32 and float64 on the CPU interpreter; bfloat16 on a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, check_floating, interpreted, rows_view

# Lanes per program: 1024 on a GPU (8 float32 elements a thread at 4 warps, with a, b and h̄ live in
# the backward); larger in the interpreter, where each program costs Python-level work.
GPU_BLOCK = 1024
INTERPRETER_BLOCK = 8192


@triton.jit
def _swiglu_fwd_kernel(
    A_ptr, B_ptr, H_ptr,  # (n_rows, n_cols) each, columns contiguous
    a_row_stride, b_row_stride, h_row_stride,
    n_cols,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,  # float32, or float64 for float64 inputs
):
    """h = a·σ(a)·b for columns [pid₁·BLOCK, pid₁·BLOCK + BLOCK) of row pid₀."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(A_ptr + row * a_row_stride + cols, mask=mask, other=0.0).to(ACC)
    b = tl.load(B_ptr + row * b_row_stride + cols, mask=mask, other=0.0).to(ACC)
    sigma = 1.0 / (1.0 + tl.exp(-a))
    tl.store(H_ptr + row * h_row_stride + cols, (a * sigma * b).to(H_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd_kernel(
    A_ptr, B_ptr, DH_ptr, DA_ptr, DB_ptr,  # (n_rows, n_cols) each, columns contiguous
    a_row_stride, b_row_stride, dh_row_stride, da_row_stride, db_row_stride,
    n_cols,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """ā and b̄ from a, b and h̄, each read once; σ(a) recomputed rather than read back."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(A_ptr + row * a_row_stride + cols, mask=mask, other=0.0).to(ACC)
    b = tl.load(B_ptr + row * b_row_stride + cols, mask=mask, other=0.0).to(ACC)
    dh = tl.load(DH_ptr + row * dh_row_stride + cols, mask=mask, other=0.0).to(ACC)
    sigma = 1.0 / (1.0 + tl.exp(-a))
    silu = a * sigma
    da = dh * b * sigma * (1.0 + a * (1.0 - sigma))
    tl.store(DA_ptr + row * da_row_stride + cols, da.to(DA_ptr.dtype.element_ty), mask=mask)
    tl.store(DB_ptr + row * db_row_stride + cols, (dh * silu).to(DB_ptr.dtype.element_ty), mask=mask)


def _block(n_cols: int) -> int:
    return min(triton.next_power_of_2(n_cols), INTERPRETER_BLOCK if interpreted() else GPU_BLOCK)


def _check_pair(a, b) -> None:
    """a and b: floating tensors of one shape on one device, with a feature dimension."""
    for name, t in (("a", a), ("b", b)):
        if isinstance(t, torch.Tensor) and (t.ndim == 0 or t.shape[-1] == 0):
            raise ValueError(f"{name} has shape {tuple(t.shape)}; swiglu needs a last dimension F ≥ 1 (the MLP's width)")
        check_floating(name, t)
    if a.shape != b.shape:
        raise ValueError(f"b has shape {tuple(b.shape)} but must match a's {tuple(a.shape)} (gate and up projections "
                         "of the same tokens)")
    if a.device != b.device:
        raise ValueError(f"b is on {b.device} but a is on {a.device}")


def swiglu_forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """h = silu(a)·b, a new tensor shaped like a (a and b of one dtype: swiglu promotes them first)."""
    _check_pair(a, b)
    a2, b2 = rows_view(a), rows_view(b.to(a.dtype))
    n_rows, n_cols = a2.shape
    h2 = torch.empty_like(a2)
    block = _block(n_cols)
    if n_rows:
        _swiglu_fwd_kernel[(n_rows, triton.cdiv(n_cols, block))](
            a2, b2, h2, a2.stride(0), b2.stride(0), h2.stride(0), n_cols, BLOCK=block, ACC=acc_dtype(a.dtype))
    return h2.view(a.shape)


def swiglu_backward(a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ā, b̄) from the saved a and b and the upstream gradient dh, in one kernel."""
    _check_pair(a, b)
    if dh.shape != a.shape:
        raise ValueError(f"dh has shape {tuple(dh.shape)} but must match a's {tuple(a.shape)}")
    a2, b2, dh2 = rows_view(a), rows_view(b.to(a.dtype)), rows_view(dh.to(a.dtype))
    n_rows, n_cols = a2.shape
    da2, db2 = torch.empty_like(a2), torch.empty_like(a2)
    block = _block(n_cols)
    if n_rows:
        _swiglu_bwd_kernel[(n_rows, triton.cdiv(n_cols, block))](
            a2, b2, dh2, da2, db2, a2.stride(0), b2.stride(0), dh2.stride(0), da2.stride(0), db2.stride(0), n_cols,
            BLOCK=block, ACC=acc_dtype(a.dtype))
    return da2.view(a.shape), db2.view(a.shape)


class SwiGLUFunction(torch.autograd.Function):
    """Saves a and b; σ(a) is recomputed in the backward."""

    @staticmethod
    def forward(ctx, a, b):
        h = swiglu_forward(a, b)
        ctx.save_for_backward(a, b)
        return h

    @staticmethod
    def backward(ctx, dh):
        return swiglu_backward(*ctx.saved_tensors, dh)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a)·b over (..., F), differentiable; matches ``torch.nn.functional.silu(a) * b``."""
    _check_pair(a, b)
    dtype = torch.promote_types(a.dtype, b.dtype)
    return SwiGLUFunction.apply(a.to(dtype), b.to(dtype))
