"""Fused softmax + cross-entropy: the forward saves one log-sum-exp per row, not the probabilities.

Per row i with logits x (length C) and target t:
    lse_i  = m + log Σ_j exp(x_j − m),  m = max_j x_j
    loss_i = lse_i − x_t
    x̄_j    = g_i · (exp(x_j − lse_i) − 1[j = t])      (softmax − onehot, scaled)
where g_i is the gradient reaching loss_i: ḡ/M for ``reduction="mean"`` (M = rows whose
target is not ``ignore_index``), ḡ for ``"sum"``, ḡ_i for ``"none"``; ignored rows get 0.

The composite never forms log-probabilities, so it cannot produce the −1/y_t blow-up of
an unfused log(softmax) when the softmax saturates. Memory: the forward reads C per row
and writes two scalars; the backward reads C and writes C, rebuilding the softmax from lse.

Layout: logits (..., C) with the classes on the LAST axis and target (...) of int64.
(torch.nn.functional.cross_entropy puts classes on axis 1 for inputs above 2-D; for 2-D
inputs the two agree.)

Limitations: float16/float32/float64 logits everywhere, bfloat16 on a GPU; accumulation in
float32 (float64 for float64 logits). Target values are checked on the host, which costs a
device synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, acc_torch_dtype, check_floating, looped_block, row_launch, rows_view


@triton.jit
def row_logsumexp(row_ptr, n_cols, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """log Σ exp over one row of n_cols values, walked BLOCK at a time with a per-lane running max and rescaled sum
    (online softmax), in ACC: the first sweep of this file's forward and of kernels.fused_linear_cross_entropy."""
    cols = tl.arange(0, BLOCK)
    # The max starts at a huge finite negative, not −inf, so that no lane ever computes −inf − (−inf) = NaN.
    m_vec = tl.full([BLOCK], -1.0e30, dtype=ACC)
    l_vec = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(row_ptr + offs, mask=offs < n_cols, other=-float("inf")).to(ACC)
        m_new = tl.maximum(m_vec, x)
        l_vec = l_vec * tl.exp(m_vec - m_new) + tl.exp(x - m_new)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    return m + tl.log(tl.sum(l_vec * tl.exp(m_vec - m), axis=0))


@triton.jit
def _cross_entropy_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) logits
    T_ptr,  # (n_rows,) int64 targets
    LOSS_ptr,  # (n_rows,) per-row loss, 0 where ignored
    LSE_ptr,  # (n_rows,) log-sum-exp, saved for the backward
    x_row_stride,
    n_cols,
    ignore_index,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """loss = lse − x_t with an online max/sum over blocks of the row."""
    row = tl.program_id(0).to(tl.int64)
    x_row = X_ptr + row * x_row_stride
    lse = row_logsumexp(x_row, n_cols, BLOCK, ACC)
    t = tl.load(T_ptr + row)
    ignored = t == ignore_index
    x_t = tl.load(x_row + tl.where(ignored, 0, t)).to(ACC)
    tl.store(LSE_ptr + row, lse)
    tl.store(LOSS_ptr + row, tl.where(ignored, 0.0, lse - x_t))


@triton.jit
def _cross_entropy_bwd_kernel(
    X_ptr,  # (n_rows, n_cols) logits
    T_ptr,  # (n_rows,) int64 targets
    LSE_ptr,  # (n_rows,) saved log-sum-exp
    G_ptr,  # (n_rows,) gradient reaching each row's loss (0 where ignored)
    DX_ptr,  # (n_rows, n_cols) result
    x_row_stride,
    dx_row_stride,
    n_cols,
    ignore_index,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """x̄ = g · (exp(x − lse) − onehot(t)): softmax rebuilt from one saved scalar."""
    row = tl.program_id(0).to(tl.int64)
    x_row = X_ptr + row * x_row_stride
    dx_row = DX_ptr + row * dx_row_stride
    cols = tl.arange(0, BLOCK)
    lse = tl.load(LSE_ptr + row).to(ACC)
    t = tl.load(T_ptr + row)
    g = tl.where(t == ignore_index, 0.0, tl.load(G_ptr + row).to(ACC))
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(ACC)
        p = tl.exp(x - lse)
        dx = g * (p - tl.where(offs == t, 1.0, 0.0))
        tl.store(dx_row + offs, dx.to(DX_ptr.dtype.element_ty), mask=offs < n_cols)


def _block(n_cols: int) -> int:
    """Both kernels walk the row (the vocabulary can be far longer than a block), on Triton's default 4 warps."""
    return row_launch(n_cols, loop_block=looped_block()).block


def _check_target(logits: torch.Tensor, target: torch.Tensor, ignore_index: int) -> None:
    if not isinstance(target, torch.Tensor) or target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"target must be an integer tensor (int64) of class indices, got {getattr(target, 'dtype', type(target).__name__)}")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"target has shape {tuple(target.shape)} but logits {tuple(logits.shape)} need "
                         f"{tuple(logits.shape[:-1])} (one class index per row)")
    n_classes = logits.shape[-1]
    valid = target != ignore_index
    if bool(((target < 0) | (target >= n_classes))[valid].any()):
        bad = target[valid & ((target < 0) | (target >= n_classes))][0].item()
        raise ValueError(f"target holds {bad}, outside [0, {n_classes}) (and not ignore_index={ignore_index})")


def cross_entropy_forward(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row losses (0 where ignored) and per-row log-sum-exp, each shaped like ``target``."""
    check_floating("logits", logits)
    _check_target(logits, target, ignore_index)
    x2 = rows_view(logits)
    t = target.reshape(-1).to(torch.int64).contiguous()
    n_rows, n_cols = x2.shape
    stats = acc_torch_dtype(logits.dtype)
    loss = torch.empty(n_rows, dtype=stats, device=logits.device)
    lse = torch.empty(n_rows, dtype=stats, device=logits.device)
    if n_rows:
        _cross_entropy_fwd_kernel[(n_rows,)](x2, t, loss, lse, x2.stride(0), n_cols, ignore_index,
                                             BLOCK=_block(n_cols), ACC=acc_dtype(logits.dtype))
    return loss.view(target.shape), lse.view(target.shape)


def cross_entropy_backward(logits, target, lse, row_grad, ignore_index: int = -100) -> torch.Tensor:
    """x̄ = row_grad · (softmax(logits) − onehot(target)), with the softmax rebuilt from ``lse``."""
    x2 = rows_view(logits)
    t = target.reshape(-1).to(torch.int64).contiguous()
    n_rows, n_cols = x2.shape
    dx = torch.empty_like(x2)
    if n_rows:
        _cross_entropy_bwd_kernel[(n_rows,)](
            x2, t, lse.reshape(-1).contiguous(), row_grad.reshape(-1).to(lse.dtype).contiguous(), dx,
            x2.stride(0), dx.stride(0), n_cols, ignore_index, BLOCK=_block(n_cols), ACC=acc_dtype(logits.dtype),
        )
    return dx.view(logits.shape)


class CrossEntropyFunction(torch.autograd.Function):
    """Saves logits, target and one lse per row; no probabilities are kept."""

    @staticmethod
    def forward(ctx, logits, target, reduction, ignore_index):
        loss, lse = cross_entropy_forward(logits, target, ignore_index)
        n_valid = int((target != ignore_index).sum())
        ctx.save_for_backward(logits, target, lse)
        ctx.reduction, ctx.ignore_index, ctx.n_valid = reduction, ignore_index, n_valid
        if reduction == "none":
            return loss.to(logits.dtype)
        total = loss.sum()
        # torch divides by the number of non-ignored rows; with none left the mean is NaN, as in torch.
        out = total / n_valid if reduction == "mean" else total
        return out.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        logits, target, lse = ctx.saved_tensors
        if ctx.reduction == "none":
            row_grad = grad_out
        else:
            scale = 1.0 / ctx.n_valid if ctx.reduction == "mean" and ctx.n_valid else 1.0
            row_grad = (grad_out * scale).expand(lse.shape)
        dlogits = cross_entropy_backward(logits, target, lse, row_grad, ctx.ignore_index)
        return dlogits, None, None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean", ignore_index: int = -100) -> torch.Tensor:
    """Cross-entropy of softmax(logits) against class indices, fused; differentiable in ``logits``."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return CrossEntropyFunction.apply(logits, target, reduction, ignore_index)
