"""Hidden checks for 04_layernorm: the visible checks on fresh random inputs, and the slips that name a formula.

Each runs the visible module's spec, so a student who passed the visible check reads the same kind of diagnosis
here. Only what is hidden is here (docs/design.md, "A lesson is a spec"): the shapes, and the bugs whose wrong
answer can only be built from the closed form of the backward, which the visible module must not print.
"""

from __future__ import annotations

import torch

from course.diagnose import Alternative, Case
from course.selfcheck.layernorm import (
    BACKWARD,
    EPS,
    F32,
    F64,
    FORWARD,
    RMS,
    TRITON_LAYERNORM,
    WRAPPER,
    class_cases,
    function_cases,
    row_stats,
)
from course.spec import merged

from .hidden import hidden

# ---------------------------------------------------------------------------
# The closed forms, for the named slips only: the expected values are the visible module's, by autograd.
# Private, because tests call them from inside a fake student's code.


def _ln_dx(dy, x, gamma, mean, rstd, *, swap=False, drop=None):
    """x̄ = (dxhat − (x̂c1 + c2))·rstd with dxhat = γ ⊙ ȳ, or a named variant of it."""
    xhat = (x - mean[..., None]) * rstd[..., None]
    dxhat = gamma * dy  # the gradient reaching x̂
    c1 = (xhat * dxhat).mean(dim=-1, keepdim=True)
    c2 = dxhat.mean(dim=-1, keepdim=True)
    if swap:
        c1, c2 = c2, c1
    if drop == "c1":
        c1 = torch.zeros_like(c1)
    if drop == "c2":
        c2 = torch.zeros_like(c2)
    return (dxhat - (xhat * c1 + c2)) * rstd[..., None]


def _ln_backward(dy, x, gamma, mean, rstd):
    xhat = (x - mean[..., None]) * rstd[..., None]
    N = x.shape[-1]
    return _ln_dx(dy, x, gamma, mean, rstd), (dy * xhat).reshape(-1, N).sum(0), dy.reshape(-1, N).sum(0)


def _ln_slips(case: Case) -> dict[str, list[Alternative]]:
    dy, x, gamma, mean, rstd = case.args
    _, rstd_unbiased = row_stats(x, EPS, correction=1)
    dx_unbiased, dgamma_unbiased, _ = _ln_backward(dy, x, gamma, mean, rstd_unbiased)
    return {
        "dx": [
            Alternative("wrong-values", "dx has c1 and c2 swapped: the row scalar that comes from σ's dependence on x "
                        "belongs with x̂, the one from μ's stands alone.", _ln_dx(dy, x, gamma, mean, rstd, swap=True)),
            Alternative("wrong-values", "dx is missing the x̂·c1 term: σ depends on every x of the row too, and that "
                        "dependence is what c1 carries.", _ln_dx(dy, x, gamma, mean, rstd, drop="c1")),
            Alternative("wrong-values", "dx is missing c2: μ depends on every x of the row, and that dependence is what "
                        "c2 carries.", _ln_dx(dy, x, gamma, mean, rstd, drop="c2")),
            Alternative("wrong-values", "dx uses an rstd recomputed with the unbiased variance (N − 1), not the rstd "
                        "the forward saved, which divides by N.", dx_unbiased),
        ],
        "dgamma": [Alternative(
            "wrong-values", "dgamma uses an x̂ recomputed with the unbiased variance (N − 1), not the rstd the forward "
            "saved.", dgamma_unbiased)],
    }


def _rms_backward(dy, x, g, rrms, *, sum_not_mean=False, drop_c1=False):
    xhat = x * rrms[..., None]
    dxhat = g * dy  # the gradient reaching x̂
    c1 = (xhat * dxhat).sum(dim=-1, keepdim=True) if sum_not_mean else (xhat * dxhat).mean(dim=-1, keepdim=True)
    if drop_c1:
        c1 = torch.zeros_like(c1)
    return (dxhat - xhat * c1) * rrms[..., None], (dy * xhat).reshape(-1, x.shape[-1]).sum(0)


def _rms_slips(case: Case) -> dict[str, list[Alternative]]:
    return {"dx": [
        Alternative("wrong-values", "dx uses a sum over the row where the mean is needed: the 1/N comes from the mean "
                    "inside rrms.", _rms_backward(*case.args, sum_not_mean=True)[0]),
        Alternative("wrong-values", "dx leaves out rrms's own dependence on x: rrms depends on every x of the row.",
                    _rms_backward(*case.args, drop_c1=True)[0]),
    ]}


# ---------------------------------------------------------------------------
# The PyTorch exercises: rows of ``build`` (shape, then options), batch 1 first

FORWARD_SHAPES = [
    (1, 10),  # batch 1
    (7, 19),  # batch 7 (prime), N prime
    (3, 5, 12),  # 3-D: mean and rstd are (3, 5)
    (7, 9, {"eps": 0.05}),  # eps passed by keyword must be used
    (3, 4, 11, {"transposed": True}),  # rows not contiguous: a .view(-1, N) of x fails
]
BACKWARD_SHAPES = [  # layernorm_backward and rmsnorm_backward
    (1, 10),  # batch 1
    (7, 7, {"note": "N = rows: a row scalar broadcast across rows keeps its shape"}),
    (7, 19),  # batch 7, N prime
    (3, 5, 12),  # 3-D: γ̄ sums over 15 rows
    (13, 6),  # more rows than features
    (3, 4, 11, {"transposed": True}),  # rows not contiguous: a .view(-1, N) fails
]


layernorm_forward = hidden(FORWARD, FORWARD_SHAPES)
layernorm_backward = hidden(BACKWARD, BACKWARD_SHAPES, merged(BACKWARD.alternatives, _ln_slips))
rmsnorm_backward = hidden(RMS, BACKWARD_SHAPES, merged(RMS.alternatives, _rms_slips))



# ---------------------------------------------------------------------------
# The Triton exercises

KERNEL_CASES = [  # (rows, N, programs, dtype)
    (1, 16, 1, F64),  # batch 1, N a power of two
    (1, 10, 1, F64),  # batch 1, N not a power of two
    (7, 10, 3, F64),  # groups of 3, 3, 1
    (13, 19, 4, F64),  # groups of 4, 4, 4, 1
    (7, 10, 3, F32),
]
LONG_ROW_CASES = [  # (rows, N, programs, dtype, BLOCK): rows longer than a block
    (1, 19, 1, F64, 8),  # blocks of 8, 8, 3
    (13, 19, 4, F64, 4),  # five blocks per row, the last of 3; groups of 4, 4, 4, 1
    (7, 32, 3, F64, 8),  # four whole blocks
    (7, 10, 3, F32, 4),
]
CLASS_CASES = [((1, 12),), ((7, 10),), ((13, 7),), ((7, 10), F32)]  # (shape[, dtype]) of x: batch 1, 7 and 13
HALF_SHAPE = (160, 12)  # float16 rows, 40 a program on four programs: the sums over rows must be held in float32
FUNCTION_CASES = [  # (shape[, dtype][, options]) of x
    ((10,), {"note": "1-D"}),
    ((1, 10), {"note": "batch 1"}),
    ((7, 10), {"note": "batch 7"}),
    ((2, 3, 10), F32, {"note": "3-D"}),
    ((3, 5, 7), {"note": "3-D"}),
    ((7, 9), {"transposed": True}),
    ((5, 6), {"eps": 0.05}),
]


TritonLayerNorm = hidden(TRITON_LAYERNORM, lambda gen: class_cases(gen, CLASS_CASES, KERNEL_CASES, LONG_ROW_CASES,
                                                                    HALF_SHAPE))
triton_layernorm = hidden(WRAPPER, lambda gen: function_cases(gen, FUNCTION_CASES, KERNEL_CASES[:3]))
