"""Hidden checks for 08_mixed_precision_backward: the visible checks' runners (``course.selfcheck.mixed_precision``
and ``course.selfcheck.mixed_kernel``) on shapes, lengths and step sequences of their own, drawn fresh each run
(``autograder.inputs.generator``; AUTOGRADER_SEED replays a run, docs/grading.md "Seeds").

Row lengths are never powers of two; each half-precision backward meets both half dtypes, a row longer than 2,000
and a parameter gradient summed over hundreds of rows; the tolerance rule is probed at lengths between the visible
ones; the scaler at other factors and intervals, with an inf arriving one step before growth was due.

Where the visible checks hold a half-precision answer to a multiple of what right code measured on the same values,
these hold it to notebook 08 Part C's rule (``autograder.check.tolerance``, which students do not receive):
tol(dtype, n, κ) for an output stored in ``dtype`` whose sums of n terms ran in float32, with κ the condition factor
of the output — the magnitudes its sums and subtractions went through, against what was left (each ``_magnitudes``
below says which those are for its backward).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from course.diagnose import graded
from course.selfcheck import mixed_kernel
from course.selfcheck.mixed_precision import (
    BF16,
    F16,
    F32,
    F64,
    HINTS,  # noqa: F401  (course.diagnose.graded reads the hint pointers from this module)
    LAYERNORM,
    SOFTMAX,
    HalfCase,
    ScalerRun,
    check_grad_tolerance,
    check_scaler,
)

from ..inputs import generator
from .tolerance import backward_tolerance, condition

SOFTMAX_EXACT = [(6,), (1, 9), (9, 9), (5, 13), (2, 4, 11), (3, 301)]  # the last: N ≥ 256, the memory rule
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


@graded
def softmax_backward_mixed(fn) -> None:
    """The visible check's flow on this run's shapes, held to Part C's rule."""
    SOFTMAX_RULE.check(fn, generator("softmax_backward_mixed"), SOFTMAX_HALF, SOFTMAX_EXACT)


@graded
def layernorm_backward_mixed(fn) -> None:
    """The visible check's flow on this run's shapes, held to Part C's rule."""
    LAYERNORM_RULE.check(fn, generator("layernorm_backward_mixed"), LAYERNORM_HALF, LAYERNORM_EXACT)


@graded
def grad_tolerance(fn) -> None:
    """The visible check's flow at lengths of its own, errors measured on fresh draws."""
    check_grad_tolerance(fn, generator("grad_tolerance"), TOL_LENGTHS)


@graded
def DynamicLossScaler(cls) -> None:  # noqa: N802 — named after the exercise it checks
    """The visible check's flow on runs of steps of its own."""
    check_scaler(cls, generator("DynamicLossScaler"), SCALER_RUNS)


def _kernel_cases(gen):
    make = mixed_kernel.kernel_case
    cases = [
        make(gen, "batch 1", 1, 7, F32, 2),
        make(gen, "batch 5", 5, 45, F32, 8),
        make(gen, "float64", 4, 23, F64, 8),
        make(gen, "float16", 3, 130, F16, 16, mixed_kernel.OFFSET),
        make(gen, "float16, long rows", 2, 2100, F16, 256, mixed_kernel.OFFSET),
        make(gen, "bfloat16 (GPU only)", 3, 777, BF16, 64, mixed_kernel.OFFSET),
    ]
    return cases, make(gen, "gradcheck", 3, 9, F64, 2)


@graded
def softmax_bwd_mixed_kernel(kernel) -> None:
    """The visible check's flow on this run's rows, held to Part C's rule."""
    mixed_kernel.check_mixed_kernel(kernel, *_kernel_cases(generator("softmax_bwd_mixed_kernel")), kernel_rule)
