"""RMSNorm over the last dimension: LayerNorm's skeleton with one row scalar instead of two.

Forward, per row x of length N:
    rrms = 1/√(mean(x²) + eps),  x̂ = x·rrms,  y = x̂ ⊙ w
The forward saves rrms (one scalar per row).

Backward, per row, with dx̂ = w ⊙ ȳ, the gradient that reaches x̂:
    c1 = mean(x̂ ⊙ dx̂),  x̄ = (dx̂ − x̂·c1)·rrms
and across rows:  w̄ = Σ_rows ȳ ⊙ x̂  (per-program partial rows, then a second pass; no atomics).

The kernels are kernels._norm's, LayerNorm's with the mean, c2 and b̄ switched off (RMS=True): the
backward walks rows longer than 8192 float32 elements (4096 float64) in blocks, c1 per row first,
then x̄ and w̄ per column block, reading x and ȳ twice.

Limitations: as for kernels.layer_norm — forward rows up to 16384 elements, float16/float32/float64
everywhere and bfloat16 on a GPU, float32 statistics (float64 for float64 input).
"""

from __future__ import annotations

import torch

from ._norm import norm_backward, norm_forward


def rms_norm_forward(x, weight=None, eps: float = 1e-6):
    """y and the rrms per row that the backward needs."""
    y, _, rrms = norm_forward(x, weight, None, eps, rms=True)
    return y, rrms


def rms_norm_backward(dy, x, weight, rrms):
    """x̄ and w̄ (w̄ reduced over every row in two race-free passes)."""
    dx, dw, _ = norm_backward(dy, x, weight, rrms, rrms, rms=True)
    return dx, dw


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
