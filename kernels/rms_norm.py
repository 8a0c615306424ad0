"""RMSNorm over the last dimension: LayerNorm's skeleton with one row scalar instead of two.

Forward, per row x of length N, with an optional weight offset o (0.0 by default; Gemma uses 1.0,
its weights stored as the difference from 1):
    rrms = 1/√(mean(x²) + eps),  x̂ = x·rrms,  g = o + w,  y = x̂ ⊙ g
The forward saves rrms (one scalar per row).

Backward, per row, with dx̂ = g ⊙ ȳ = (o + w) ⊙ ȳ, the gradient that reaches x̂:
    c1 = mean(x̂ ⊙ dx̂),  x̄ = (dx̂ − x̂·c1)·rrms
(x̂_j depends on every x_k through rrms: ∂x̂_j/∂x_k = rrms·(δ_jk − x̂_j·x̂_k/N), so
x̄_k = Σ_j dx̂_j ∂x̂_j/∂x_k = rrms·(dx̂_k − x̂_k·mean(x̂ ⊙ dx̂)).) Across rows, since ∂y/∂w = x̂ whatever o is:
    w̄ = Σ_rows ȳ ⊙ x̂  (per-program partial rows, then a second pass; no atomics).
The offset changes only the factor that scales ȳ on its way to x̂; w̄ keeps its form.

The kernels are kernels._norm's, LayerNorm's with the mean, c2 and b̄ switched off (RMS=True): the
backward walks rows longer than 8192 float32 elements (4096 float64) in blocks, c1 per row first,
then x̄ and w̄ per column block, reading x and ȳ twice. The offset is a runtime argument (no new
compiled variant); it reaches the kernels as a float32 scalar, as eps does.

Under ``torch.autocast`` on a GPU the op computes in float32, as PyTorch's rms_norm does there (float16
and bfloat16 inputs are cast; the CPU's autocast leaves the op in the input's dtype). w̄ comes back in
w's dtype.

Limitations: as for kernels.layer_norm — forward rows up to 16384 elements, float16/float32/float64
everywhere and bfloat16 on a GPU, float32 statistics (float64 for float64 input).
"""

from __future__ import annotations

import torch

from ._common import autocast_to_float32
from ._norm import norm_backward, norm_forward


def rms_norm_forward(x, weight=None, eps: float = 1e-6, offset: float = 0.0):
    """y and the rrms per row that the backward needs."""
    y, _, rrms = norm_forward(x, weight, None, eps, rms=True, offset=offset)
    return y, rrms


def rms_norm_backward(dy, x, weight, rrms, offset: float = 0.0):
    """x̄ and w̄ (w̄ reduced over every row in two race-free passes)."""
    dx, dw, _ = norm_backward(dy, x, weight, rrms, rrms, rms=True, offset=offset)
    return dx, dw


class RMSNormFunction(torch.autograd.Function):
    """Saves x, w and rrms; x̂ is rebuilt in the backward."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset):
        y, rrms = rms_norm_forward(x, weight, eps, offset)
        ctx.save_for_backward(x, weight, rrms)
        ctx.offset = offset
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rrms = ctx.saved_tensors
        dx, dw = rms_norm_backward(dy, x, weight, rrms, ctx.offset)
        return dx, (dw if weight is not None else None), None, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, offset: float = 0.0) -> torch.Tensor:
    """RMSNorm over the last dim: ``x · rsqrt(mean(x², -1) + eps) · (offset + weight)``.

    With offset 0.0 it matches ``torch.nn.functional.rms_norm(x, (N,), weight, eps)``; Gemma's RMSNorm
    is offset=1.0.
    """
    x, weight = autocast_to_float32(x, weight)
    return RMSNormFunction.apply(x, weight, eps, offset)
