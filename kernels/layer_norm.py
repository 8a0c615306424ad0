"""LayerNorm over the last dimension: Triton forward and backward, weight/bias gradients without races.

Forward, per row x of length N:
    μ = mean(x),  rstd = 1/√(var(x) + eps),  x̂ = (x − μ)·rstd,  y = x̂ ⊙ w + b
The forward saves μ and rstd (two scalars per row), not x̂: x̂ is rebuilt from x in the backward.

Backward, per row, with dx̂ = w ⊙ ȳ, the gradient that reaches x̂:
    c1 = mean(x̂ ⊙ dx̂),  c2 = mean(dx̂),  x̄ = (dx̂ − (x̂·c1 + c2))·rstd
and across rows (every row touches every weight, so the sum crosses programs):
    w̄ = Σ_rows ȳ ⊙ x̂,  b̄ = Σ_rows ȳ

The kernels are kernels._norm's, shared with kernels.rms_norm: there the parameter sums are
deterministic and race-free (per-program partial rows, then a second pass; no atomics), and rows
longer than 8192 float32 elements (4096 float64) are walked in blocks by the backward.

Under ``torch.autocast`` on a GPU the op computes in float32, as PyTorch's layer_norm does there
(float16 and bfloat16 inputs are cast to float32; the CPU's autocast leaves layer_norm in the input's
dtype). w̄ and b̄ come back in w's and b's dtypes.

Limitations: the forward holds a row of up to 16384 elements in one block (longer rows are
refused with a message); float16/float32/float64 everywhere, bfloat16 on a GPU; statistics are
accumulated in float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import torch

from ._common import autocast_to_float32
from ._norm import norm_backward, norm_forward


def layer_norm_forward(x, weight=None, bias=None, eps: float = 1e-5):
    """y, and the μ and rstd per row that the backward needs (each shaped like x without its last dim)."""
    return norm_forward(x, weight, bias, eps, rms=False)


def layer_norm_backward(dy, x, weight, mean, rstd, bias_dtype=None):
    """x̄, w̄ and b̄ (w̄/b̄ reduced over every row in two race-free passes; b̄ in ``bias_dtype``, default x's)."""
    return norm_backward(dy, x, weight, mean, rstd, rms=False, bias_dtype=bias_dtype)


class LayerNormFunction(torch.autograd.Function):
    """Saves x, w, μ and rstd; x̂ is rebuilt in the backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = layer_norm_forward(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layer_norm_backward(dy, x, weight, mean, rstd, ctx.bias_dtype)
        return dx, (dw if weight is not None else None), (db if ctx.bias_dtype is not None else None), None


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim; matches ``torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)``."""
    x, weight, bias = autocast_to_float32(x, weight, bias)
    return LayerNormFunction.apply(x, weight, bias, eps)
