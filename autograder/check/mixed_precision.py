"""Hidden checks for 08_mixed_precision_backward: the visible checks' runners (``course.selfcheck.mixed_precision``
and ``course.selfcheck.mixed_kernel``) on shapes, lengths and step sequences of their own, drawn fresh each run
(``autograder.inputs.generator``; AUTOGRADER_SEED replays a run, docs/grading.md "Seeds").

Row lengths are never powers of two; each half-precision backward meets both half dtypes, a row longer than 2,000
and a parameter gradient summed over hundreds of rows; the tolerance rule is probed at lengths between the visible
ones; the scaler at other factors and intervals, with an inf arriving one step before growth was due.
"""

from __future__ import annotations

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
    ScalerRun,
    check_grad_tolerance,
    check_scaler,
)

from ..inputs import generator

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


@graded
def softmax_backward_mixed(fn) -> None:
    """The visible check's flow on this run's shapes."""
    SOFTMAX.check(fn, generator("softmax_backward_mixed"), SOFTMAX_HALF, SOFTMAX_EXACT)


@graded
def layernorm_backward_mixed(fn) -> None:
    """The visible check's flow on this run's shapes."""
    LAYERNORM.check(fn, generator("layernorm_backward_mixed"), LAYERNORM_HALF, LAYERNORM_EXACT)


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
    """The visible check's flow on this run's rows."""
    mixed_kernel.check_mixed_kernel(kernel, *_kernel_cases(generator("softmax_bwd_mixed_kernel")))
