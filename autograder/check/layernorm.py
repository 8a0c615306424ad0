"""Hidden checks for 04_layernorm: random float64 inputs, references students never see.

The checking flow (what is called, in which order, how a failure is worded) is the visible
check's, from ``course.selfcheck.layernorm``, so a student who passed the visible check and
fails here reads the same kind of diagnosis. What is hidden is here: the inputs (fresh each
run; AUTOGRADER_SEED replays one), closed-form references, and bug-specific alternatives
that would give the formulas away.

- ``layernorm_forward``: batch 1 and 7, a 3-D x, N never a power of two, eps=0.05 passed
  by keyword, a transposed (non-contiguous) x; rows with means far from 0 and spreads far from 1.
- ``layernorm_backward`` and ``rmsnorm_backward``: batch 1, a square case (N = rows, where
  a row scalar broadcast across rows keeps its shape), batch 7, 3-D, batch 13, transposed x
  and dy; against the closed form x̄ = (dxhat − (x̂c1 + c2))·rstd, dxhat = γ ⊙ ȳ the gradient
  reaching x̂ (one scalar fewer for RMSNorm), with c1 and c2 swapped, one of them left out, a
  sum for a mean, and an rstd recomputed with N − 1 named.
- ``TritonLayerNorm``: the kernel on 1, 3 and 4 programs (ragged last groups), N a power of
  two then not, float64 and float32, each row in one block; then the class at batch 1, 7 and
  13; then the kernel on rows of several blocks (BLOCK < N, the last block ragged or not).
- ``triton_layernorm``: 1-D, batch 1 and 7, two 3-D shapes, a transposed view, eps.
"""

from __future__ import annotations

import torch

from course.diagnose import Alternative, Case, graded
from course.selfcheck.layernorm import (
    EPS, F32, HINTS, RMS_EPS, TRANSPOSED, ClassCase, FunctionCase, KernelCase, backward_alternatives, check_backward,
    check_forward, check_function_class, check_layernorm_function, check_rms, forward_alternatives,
    rms_alternatives, row_stats, shape_label, transposed_view,
)

from ..inputs import DTYPE, generator, randn

# ---------------------------------------------------------------------------
# Inputs


def _x(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Rows with |mean| in [1, 2] and standard deviations in [1.5, 3]: rstd is far from 1."""
    lead = (*shape[:-1], 1)
    scale = 1.5 + 1.5 * torch.rand(lead, generator=gen, dtype=DTYPE)
    offset = (1.0 + torch.rand(lead, generator=gen, dtype=DTYPE)) * torch.sign(randn(gen, *lead))
    return offset + scale * randn(gen, *shape)


def _weight(gen: torch.Generator, n: int) -> torch.Tensor:
    return 1.0 + randn(gen, n, scale=0.7)


def _rows(shape) -> int:
    n = 1
    for s in shape[:-1]:
        n *= s
    return n


# ---------------------------------------------------------------------------
# References, in closed form


def _xhat(x, mean, rstd):
    """x̂ = (x − μ)·rstd, one μ and rstd per row (a private copy: tests call these references inside student code)."""
    return (x - mean[..., None]) * rstd[..., None]


def _forward(x, gamma, beta, eps=EPS):
    mean = x.mean(dim=-1)
    var = ((x - mean[..., None]) ** 2).mean(dim=-1)
    rstd = 1.0 / torch.sqrt(var + eps)
    return _xhat(x, mean, rstd) * gamma + beta, mean, rstd


def _ln_dx(dy, x, gamma, mean, rstd, *, swap=False, drop=None):
    """x̄ = (dxhat − (x̂c1 + c2))·rstd with dxhat = γ ⊙ ȳ, or a named variant of it."""
    xhat = _xhat(x, mean, rstd)
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
    xhat = _xhat(x, mean, rstd)
    N = x.shape[-1]
    return _ln_dx(dy, x, gamma, mean, rstd), (dy * xhat).reshape(-1, N).sum(0), dy.reshape(-1, N).sum(0)


def _ln_alternatives(case: Case) -> dict[str, list[Alternative]]:
    alts = backward_alternatives(case)
    dy, x, gamma, mean, rstd = case.args
    N = x.shape[-1]
    _, rstd_unbiased = row_stats(x, EPS, correction=1)
    alts["dx"] = alts["dx"] + [
        Alternative("wrong-values", "dx has c1 and c2 swapped: the row scalar that comes from σ's dependence on x "
                    "belongs with x̂, the one from μ's stands alone.", _ln_dx(dy, x, gamma, mean, rstd, swap=True)),
        Alternative("wrong-values", "dx is missing the x̂·c1 term: σ depends on every x of the row too, and that "
                    "dependence is what c1 carries.", _ln_dx(dy, x, gamma, mean, rstd, drop="c1")),
        Alternative("wrong-values", "dx is missing c2: μ depends on every x of the row, and that dependence is what "
                    "c2 carries.", _ln_dx(dy, x, gamma, mean, rstd, drop="c2")),
        Alternative("wrong-values", "dx uses an rstd recomputed with the unbiased variance (N − 1), not the rstd the "
                    "forward saved, which divides by N.", _ln_dx(dy, x, gamma, mean, rstd_unbiased)),
    ]
    alts["dgamma"] = alts["dgamma"] + [Alternative(
        "wrong-values", "dgamma uses an x̂ recomputed with the unbiased variance (N − 1), not the rstd the forward "
        "saved.", (dy * _xhat(x, mean, rstd_unbiased)).reshape(-1, N).sum(0))]
    return alts


def _rms_backward(dy, x, g, rrms, *, sum_not_mean=False, drop_c1=False):
    xhat = x * rrms[..., None]
    dxhat = g * dy  # the gradient reaching x̂
    c1 = (xhat * dxhat).sum(dim=-1, keepdim=True) if sum_not_mean else (xhat * dxhat).mean(dim=-1, keepdim=True)
    if drop_c1:
        c1 = torch.zeros_like(c1)
    return (dxhat - xhat * c1) * rrms[..., None], (dy * xhat).reshape(-1, x.shape[-1]).sum(0)


def _rms_alternatives(case: Case) -> dict[str, list[Alternative]]:
    alts = rms_alternatives(case)
    alts["dx"] = alts["dx"] + [
        Alternative("wrong-values", "dx uses a sum over the row where the mean is needed: the 1/N comes from the mean "
                    "inside rrms.", _rms_backward(*case.args, sum_not_mean=True)[0]),
        Alternative("wrong-values", "dx leaves out rrms's own dependence on x: rrms depends on every x of the row.",
                    _rms_backward(*case.args, drop_c1=True)[0]),
    ]
    return alts


# ---------------------------------------------------------------------------
# The PyTorch exercises


def _forward_case(gen, *shape: int, eps: float | None = None, transposed: bool = False) -> Case:
    N = shape[-1]
    x = _x(gen, *shape)
    args = (transposed_view(x) if transposed else x, _weight(gen, N), randn(gen, N, scale=0.5))
    kwargs = {} if eps is None else {"eps": eps}
    note = TRANSPOSED if transposed else (f"eps={eps:g}" if eps is not None else "")
    return Case(shape_label(shape, _rows(shape), note), args, batch=_rows(shape), kwargs=kwargs)


@graded
def layernorm_forward(fn) -> None:
    gen = generator("layernorm_forward")
    cases = [
        _forward_case(gen, 1, 10),  # batch 1
        _forward_case(gen, 7, 19),  # batch 7 (prime), N prime
        _forward_case(gen, 3, 5, 12),  # 3-D: mean and rstd are (3, 5)
        _forward_case(gen, 7, 9, eps=0.05),  # eps passed by keyword must be used
        _forward_case(gen, 3, 4, 11, transposed=True),  # rows not contiguous: a .view(-1, N) of x fails
    ]
    check_forward(fn, cases, reference=_forward, alternatives=forward_alternatives)


def _backward_case(gen, *shape: int, note: str = "", transposed: bool = False) -> Case:
    x = _x(gen, *shape)
    mean, rstd = row_stats(x)
    dy = randn(gen, *shape)
    if transposed:
        dy, x, note = transposed_view(dy), transposed_view(x), f"x and dy {TRANSPOSED}"
    args = (dy, x, _weight(gen, shape[-1]), mean, rstd)
    return Case(shape_label(shape, _rows(shape), note), args, batch=_rows(shape))


SQUARE = "N = rows: a row scalar broadcast across rows keeps its shape"


@graded
def layernorm_backward(fn) -> None:
    gen = generator("layernorm_backward")
    cases = [
        _backward_case(gen, 1, 10),  # batch 1
        _backward_case(gen, 7, 7, note=SQUARE),
        _backward_case(gen, 7, 19),  # batch 7, N prime
        _backward_case(gen, 3, 5, 12),  # 3-D: γ̄ sums over 15 rows
        _backward_case(gen, 13, 6),  # more rows than features
        _backward_case(gen, 3, 4, 11, transposed=True),  # rows not contiguous: a .view(-1, N) fails
    ]
    check_backward(fn, cases, reference=_ln_backward, alternatives=_ln_alternatives)


def _rms_case(gen, *shape: int, note: str = "", transposed: bool = False) -> Case:
    x = _x(gen, *shape)
    rrms = 1.0 / torch.sqrt((x * x).mean(dim=-1) + RMS_EPS)
    dy = randn(gen, *shape)
    if transposed:
        dy, x, note = transposed_view(dy), transposed_view(x), f"x and dy {TRANSPOSED}"
    args = (dy, x, _weight(gen, shape[-1]), rrms)
    return Case(shape_label(shape, _rows(shape), note), args, batch=_rows(shape))


@graded
def rmsnorm_backward(fn) -> None:
    gen = generator("rmsnorm_backward")
    cases = [
        _rms_case(gen, 1, 10),  # batch 1
        _rms_case(gen, 7, 7, note=SQUARE),
        _rms_case(gen, 7, 19),  # batch 7
        _rms_case(gen, 3, 5, 12),  # 3-D
        _rms_case(gen, 13, 6),
        _rms_case(gen, 3, 4, 11, transposed=True),  # rows not contiguous: a .view(-1, N) fails
    ]
    check_rms(fn, cases, reference=_rms_backward, alternatives=_rms_alternatives)


# ---------------------------------------------------------------------------
# The Triton exercises


def _layernorm_reference(x, gamma, beta, dy, eps=EPS):
    """y and (x̄, γ̄, β̄) in closed form, float64."""
    y, mean, rstd = _forward(x, gamma, beta, eps)
    return (y, *_ln_backward(dy, x, gamma, mean, rstd))


def _kernel_dx(dy, x, gamma, mean, rstd):
    return _ln_dx(dy, x, gamma, mean, rstd)


def _kernel_cases(gen, shapes) -> list[KernelCase]:
    """(rows, N, programs, dtype[, BLOCK]) each; without a BLOCK, one that holds the whole row."""
    return [KernelCase(randn(gen, r, n), _x(gen, r, n), _weight(gen, n), dt, p, *block) for r, n, p, dt, *block in shapes]


KERNEL_CASES = [  # (rows, N, programs, dtype)
    (1, 16, 1, DTYPE),  # batch 1, N a power of two
    (1, 10, 1, DTYPE),  # batch 1, N not a power of two
    (7, 10, 3, DTYPE),  # groups of 3, 3, 1
    (13, 19, 4, DTYPE),  # groups of 4, 4, 4, 1
    (7, 10, 3, F32),
]
LONG_ROW_CASES = [  # (rows, N, programs, dtype, BLOCK): rows longer than a block
    (1, 19, 1, DTYPE, 8),  # blocks of 8, 8, 3
    (13, 19, 4, DTYPE, 4),  # five blocks per row, the last of 3; groups of 4, 4, 4, 1
    (7, 32, 3, DTYPE, 8),  # four whole blocks
    (7, 10, 3, F32, 4),
]


@graded
def TritonLayerNorm(cls) -> None:  # noqa: N802 — named after the exercise it checks
    gen = generator("TritonLayerNorm")

    def case(rows, n, dtype=DTYPE):
        return ClassCase(_x(gen, rows, n), _weight(gen, n), randn(gen, n, scale=0.5), randn(gen, rows, n), dtype)

    cases = [case(1, 12), case(7, 10), case(13, 7), case(7, 10, F32)]
    kernel_cases = _kernel_cases(gen, KERNEL_CASES)
    check_function_class(cls, kernel_cases, cases, reference=_layernorm_reference, dx_reference=_kernel_dx,
                         long_row_cases=_kernel_cases(gen, LONG_ROW_CASES))


@graded
def triton_layernorm(fn) -> None:
    gen = generator("triton_layernorm")

    def case(shape, dtype=DTYPE, *, eps=None, transposed=False, note=""):
        n = shape[-1]
        return FunctionCase(_x(gen, *shape), _weight(gen, n), randn(gen, n, scale=0.5), randn(gen, *shape), dtype,
                            eps, transposed, note)

    cases = [
        case((10,), note="1-D"),
        case((1, 10), note="batch 1"),
        case((7, 10), note="batch 7"),
        case((2, 3, 10), F32, note="3-D"),
        case((3, 5, 7), note="3-D"),
        case((7, 9), transposed=True),
        case((5, 6), eps=0.05),
    ]
    check_layernorm_function(fn, _kernel_cases(gen, KERNEL_CASES[:3]), cases,
                             reference=_layernorm_reference, dx_reference=_kernel_dx)


__all__ = ["layernorm_forward", "layernorm_backward", "rmsnorm_backward", "TritonLayerNorm", "triton_layernorm"]
