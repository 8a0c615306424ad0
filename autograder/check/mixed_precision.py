"""Hidden checks for 08_mixed_precision_backward: the visible checks (``course.selfcheck.mixed_precision`` and
``.mixed_kernel``) on shapes, lengths and step sequences of their own, drawn fresh each run (docs/grading.md "Seeds").

Row lengths are never powers of two; each backward meets both half dtypes, a row longer than 2,000 and a parameter
gradient summed over hundreds of rows; the scaler meets an inf one step before growth was due. A half-precision
answer is held to notebook 08 Part C's rule (``autograder.check.tolerance``, which students do not receive), tol(dtype,
n, κ), κ the output's condition factor: the magnitudes its sums went through against what was left (each
``_magnitudes`` below says which). Each half-precision case draws its values from a family of
``autograder.inputs.FAMILIES``, every family once per run in an order the seed picks, so that code right only on
inputs that look like a check's is wrong on the others; each family keeps a reason for a row statistic to cancel (a
common part of ȳ, a ȳ along x̂, a row held by one entry), without which a statistic held in half precision is within
the bound (``tests/autograder/test_hidden_input_families.py`` measures both).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import torch

from course.diagnose import graded
from course.selfcheck import mixed_kernel
from course.selfcheck import softmax as sm
from course.selfcheck.mixed_precision import (
    BF16,
    F16,
    F32,
    F64,
    LAYERNORM,
    SOFTMAX,
    HalfCase,
    ScalerRun,
    check_grad_tolerance,
    check_scaler,
    name_of,
)
from course.spec import Runner

from ..inputs import activations, family_order, generator, row_offsets, signs, uniform
from .hidden import hidden
from .tolerance import backward_tolerance, condition

# (3, 301): N ≥ 256, the memory rule; last, the visible check's transposed case
SOFTMAX_EXACT = [(6,), (1, 9), (9, 9), (5, 13), (2, 4, 11), (3, 301), sm.TRANSPOSED]
SOFTMAX_HALF = [(BF16, 5, 24), (F16, 3, 257), (BF16, 2, 2047), (F16, 4, 33)]
LAYERNORM_EXACT = [
    (1, 7),
    (9, 9, {"note": "N = 9 rows: a row scalar broadcast across rows keeps its shape"}),
    (5, 17),
    (3, 2, 13),
    (2, 3, 10, {"transposed": True}),
]
LAYERNORM_HALF = [(BF16, 7, 40), (F16, 9, 129), (BF16, 700, 12), (F16, 2, 3001)]
TOL_LENGTHS = (12, 300, 5000, 100_000, 3 * 2**18)
SCALER_RUNS = [
    ScalerRun("growth", {"init_scale": 512.0, "growth_factor": 3.0, "growth_interval": 5}, (False,) * 11),
    ScalerRun("inf before growth", {"init_scale": 64.0, "growth_interval": 4},
              (False, False, False, True, False, False, False, False, False)),
    ScalerRun("repeated backoff", {"init_scale": 2.0**20, "backoff_factor": 0.125, "growth_interval": 2},
              (True, True, True, False, False, True)),
]


def _softmax_magnitudes(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Element by element, the magnitudes behind x̄ = y ⊙ (ȳ − s): y ⊙ (|ȳ| + |s|), s the row's hub."""
    s = (y * dy).sum(-1, keepdim=True)
    return y.abs() * (dy.abs() + s.abs())


def softmax_rule(case: HalfCase, index: int, dtype: torch.dtype) -> float:
    y, dy = (a.to(F64) for a in case.args)
    kappa = condition(case.expected[0], _softmax_magnitudes(y, dy))
    return backward_tolerance(dtype, case.lengths[index], kappa)


def layernorm_rule(case: HalfCase, index: int, dtype: torch.dtype) -> float:
    """x̄ goes through γȳ, its two row means and x̂ times one of them; γ̄ and β̄ through their terms over the rows."""
    dy, x, gamma, mean, rstd = (a.to(F64) for a in case.args)
    r = rstd[:, None]
    xhat = (x - mean[:, None]) * r
    g = gamma * dy  # the gradient reaching x̂
    c1, c2 = (xhat * g).mean(-1, keepdim=True), g.mean(-1, keepdim=True)
    magnitudes = (r * (g.abs() + c2.abs() + xhat.abs() * c1.abs()), (dy * xhat).abs().sum(0), dy.abs().sum(0))
    kappa = condition(case.expected[index], magnitudes[index])
    return backward_tolerance(dtype, case.lengths[index], kappa)


def kernel_rule(case: mixed_kernel.KernelCase, dtype: torch.dtype) -> float:
    return backward_tolerance(dtype, case.y.shape[1], condition(case.expected, _softmax_magnitudes(case.y, case.dy)))


SOFTMAX_RULE = replace(SOFTMAX, rule=softmax_rule)
LAYERNORM_RULE = replace(LAYERNORM, rule=layernorm_rule)


# ---------------------------------------------------------------------------
# The half-precision cases, one family of values each (module docstring). ȳ is scaled by 1 to 8 as well: nothing of
# the answer depends on its size, and a size is one more thing a check's inputs would otherwise give away.

COMMON = (16.0, 48.0)  # ȳ's common part per row, or its component along x̂: against a spread of 1, as the visible 32
SINK = (5.0, 7.0)  # how far a sink's logit is above log N: it holds all but e^-5 to e^-7 (×1.65) of its row


def _scale(gen: torch.Generator) -> float:
    return float(2 ** uniform(gen, 0.0, 3.0))


def softmax_values(family: str, gen: torch.Generator, rows: int, n: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Float64 y and ȳ of ``family``, and what they are. ``normal`` and ``outliers``: ȳ of the family, with no
    common part, and each row of y held by one entry (its logit log N + SINK, the others N(0, 1), as attention on a
    sink token), so that s ≈ ȳ there and ȳ − s cancels; ``shifted`` and ``heavy``: logits of spread 2 and ȳ of the
    family with a common part per row."""
    logits = torch.randn(rows, n, generator=gen, dtype=F64)
    if family in ("normal", "outliers"):
        sink = torch.randint(0, n, (rows,), generator=gen)
        logits[torch.arange(rows), sink] = math.log(n) + uniform(gen, *SINK, rows)
        dy, what = activations(gen, family, rows, n), f"dy {family}, each row of y held by one entry"
    else:
        logits = 2 * logits
        dy = activations(gen, family, rows, n, offset=COMMON)
        if family != "shifted":  # it has a common part of its own
            dy = dy + row_offsets(gen, rows, n, low=COMMON[0], high=COMMON[1])
        what = f"dy {family}, a common part of ±{COMMON[0]:g} to {COMMON[1]:g} a row"
    scale = _scale(gen)
    return torch.softmax(logits, dim=-1), scale * dy, f"{what}, scaled by {scale:.2f}"


def layernorm_values(family: str, gen: torch.Generator, rows: int, n: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Float64 x and ȳ of ``family``, and what they are: x of the family (``shifted``: a common part of ±2 to 8 a row);
    ȳ with a component a·x̂ along the output (``normal``, ``heavy``; it cancels in x̂ · mean(γȳ ⊙ x̂)) or a common part
    per row (``shifted``, ``outliers``; it cancels in mean(γȳ))."""
    x = activations(gen, family, rows, n, offset=(2.0, 8.0))
    noise = activations(gen, "heavy" if family == "heavy" else "normal", rows, n)
    if family in ("normal", "heavy"):
        xhat = (x - x.mean(-1, keepdim=True)) / x.std(-1, unbiased=False, keepdim=True)
        a = float(signs(gen) * uniform(gen, *COMMON))
        dy, what = a * xhat + noise, f"x {family}, dy = {a:.1f}·x̂ + {family} noise"
    else:
        dy = noise + row_offsets(gen, rows, n, low=COMMON[0], high=COMMON[1])
        what = f"x {family}, dy with a common part of ±{COMMON[0]:g} to {COMMON[1]:g} a row"
    scale = _scale(gen)
    return x * _scale(gen) / 2, scale * dy, f"{what}, scaled by {scale:.2f}"  # x by 1/2 to 4: rstd is not 1 either


def in_families(values):
    """``MixedExercise.cases``' ``values``: each half-precision case (and the shorter rows its diagnosis tries) drawn
    by ``values`` in the family ``family_order`` gives it; the float64 probe in the first family."""
    return lambda gen, k: [partial(values, family) for family in family_order(gen, k)]


softmax_backward_mixed = hidden(SOFTMAX_RULE, SOFTMAX_HALF, exact=SOFTMAX_EXACT, values=in_families(softmax_values))
layernorm_backward_mixed = hidden(LAYERNORM_RULE, LAYERNORM_HALF, exact=LAYERNORM_EXACT,
                                  values=in_families(layernorm_values))
grad_tolerance = hidden(Runner("grad_tolerance", partial(check_grad_tolerance, lengths=TOL_LENGTHS)), lambda gen: gen)
DynamicLossScaler = hidden(Runner("DynamicLossScaler", partial(check_scaler, runs=SCALER_RUNS)), lambda gen: gen)  # noqa: N816


def kernel_half_case(gen: torch.Generator, family: str, label: str, rows: int, n: int, dtype: torch.dtype,
                     block: int) -> mixed_kernel.KernelCase:
    """A half-precision launch on values of ``family`` (:func:`softmax_values`), rounded to ``dtype``."""
    y, dy, what = softmax_values(family, gen, rows, n)
    y, dy = (v.to(dtype).to(F64) for v in (y, dy))
    return mixed_kernel.KernelCase(f"{label}: y and dy ({rows}, {n}) {name_of(dtype)}, {what}, BLOCK = {block}",
                                   y, dy, dtype, block)


def _kernel_cases(gen):
    make = mixed_kernel.kernel_case
    half = [("float16", 3, 130, F16, 16), ("float16, long rows", 2, 2100, F16, 256),
            ("bfloat16 (GPU only)", 3, 777, BF16, 64)]
    cases = [
        make(gen, "batch 1", 1, 7, F32, 2),
        make(gen, "batch 5", 5, 45, F32, 8),
        make(gen, "float64", 4, 23, F64, 8),
        # Families as the backwards' (module docstring); bfloat16 last, since only a GPU runs it.
        *(kernel_half_case(gen, family, *shape) for family, shape in zip(family_order(gen, len(half)), half)),
    ]
    return cases, make(gen, "gradcheck", 3, 9, F64, 2)


@graded
def softmax_bwd_mixed_kernel(kernel) -> None:
    """The visible check's flow on this run's rows, held to Part C's rule."""
    mixed_kernel.check_mixed_kernel(kernel, *_kernel_cases(generator("softmax_bwd_mixed_kernel")), kernel_rule)
