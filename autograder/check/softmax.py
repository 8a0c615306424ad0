"""Hidden checks for 02_softmax_collapse: ``softmax_jacobian``, ``softmax_backward``,
``shifted_softmax_vjp``, ``softmax_cross_entropy_backward``.

Every call draws fresh float64 inputs (``autograder.inputs.generator``; set
AUTOGRADER_SEED to replay a run): logits with no ties from ``inputs.distinct``, on shapes
chosen to expose one kind of bug each — the comment beside each shape says which, and
every check has one transposed (non-contiguous) input — and compares the student's result
with the closed forms below. The named bugs are the alternatives of the visible checks
(``course.selfcheck.softmax``), so a student reads the same diagnosis in both, and the
same ``HINTS`` point to the notebook's hints.

``shifted_softmax_vjp`` also gets float32 logits up to ±1000 with shifts that do not help
(``course.selfcheck.softmax.shift_large_cases``, on fresh random rows): without a shift of
its own, a forward gives inf or NaN there (``non-finite``).

``softmax_backward`` is graded on a property as well: it runs under
``course.memory.AllocationRecorder``, and on rows of N ≥ 256 any allocation of N² elements
or more is ``materialized-jacobian``, even with every value right. The long-row shapes keep
rows × N below N², so an honest O(N)-per-row backward never comes near the threshold. Both
backwards are also refused torch's own backward kernels (``autograd-in-backward``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from course.diagnose import Case, graded
from course.selfcheck.softmax import (  # noqa: F401 — HINTS: the hint pointers course.diagnose.graded reads
    HINTS, MEMORY_MIN_N, RecordedCalls, ShiftCase, backward_alternatives, ce_alternatives, check_no_jacobian,
    check_no_library_backward, check_shift, jacobian_alternatives, rows_of, run_checked, saturated_logits,
    shift_large_cases, transposed,
)

from ..inputs import distinct, generator, randint, randn

# Shapes of y. Batch-1 cases first (a failure that appears only above batch 1 is then read as
# a missing batch reduction); square cases before the others of their batch, so that a row
# sum that lost its keepdim is diagnosed (broadcast-axis) before it can crash on a mismatch.
JACOBIAN_SHAPES = [
    (6,),  # one row, no batch axis
    (1, 5),  # batch 1
    (7, 7),  # batch 7, square: an outer product across rows keeps the shape
    (7, 3),  # batch 7
    (3, 2, 7),  # 3-D
    (2, 5, 5),  # 3-D, square trailing axes
]
BACKWARD_SHAPES = [
    (9,),  # one row, no batch axis
    (1, 6),  # batch 1
    (7, 7),  # batch 7, square: s without keepdim broadcasts along the wrong axis silently
    (2, 5, 5),  # 3-D, square trailing axes: the same bug in three dimensions
    (7, 13),  # batch 7, N prime
    (2, 3, 11),  # 3-D
    (1, 300),  # a long row, batch 1: N² = 90,000
    (2, 3, 257),  # long rows, 3-D, N just past a power of two: 6 rows × 257 ≪ 257²
]
# (shape of the logits, saturated?)
CE_SHAPES = [
    ((1, 5), False),  # batch 1
    ((1, 12), False),  # batch 1, more classes
    ((7, 7), False),  # batch 7, square: a normaliser along the wrong axis keeps the shape
    ((7, 10), False),  # batch 7
    ((2, 3, 6), False),  # (B, T, C): the mean over all B·T rows
    ((1, 11), True),  # saturated logits, the least likely class as target: y_t is 0 in float64. One row, so that
                      # run_cases does not read a wrong answer here as a missing batch reduction
]
# Shapes of x for shifted_softmax_vjp (c is (..., 1)); the float32 cases come from shift_large_cases.
SHIFT_SHAPES = [
    (8,),  # one row, no batch axis
    (1, 9),  # batch 1
    (7, 7),  # batch 7, square: a row max without its axis shifts along the wrong axis silently
    (7, 11),  # batch 7, N prime
    (3, 2, 6),  # 3-D
]
TRANSPOSED_SHAPE = (6, 7)  # (rows, columns) of the transposed (non-contiguous) case of every check


# ---------------------------------------------------------------------------
# References: the closed forms, in float64.


def jacobian_reference(y: torch.Tensor) -> torch.Tensor:
    """J = diag(y) − y yᵀ for every row: (..., N) -> (..., N, N)."""
    return torch.diag_embed(y) - torch.einsum("...i,...j->...ij", y, y)


def backward_reference(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """x̄ = y ⊙ (ȳ − ⟨y, ȳ⟩), the hub taken along each row."""
    hub = torch.einsum("...n,...n->...", y, dy).unsqueeze(-1)  # (..., 1)
    return y * (dy - hub)


def shift_reference(x: torch.Tensor, c: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """y = softmax(x − c) = softmax(x); x̄ = y ⊙ (ȳ − ⟨y, ȳ⟩), the same for every c; c̄ = −1ᵀ J ȳ = 0."""
    x, dy = x.to(torch.float64), dy.to(torch.float64)
    y = torch.log_softmax(x, dim=-1).exp()  # stable however large the logits
    return y, backward_reference(y, dy), torch.zeros(c.shape, dtype=torch.float64)


def ce_reference(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(softmax(logits) − onehot(target)) / M, with M every row over every leading axis."""
    C = logits.shape[-1]
    probs = torch.log_softmax(logits, dim=-1).exp()  # stable however large the logits
    return (probs - F.one_hot(target, C).to(logits.dtype)) / rows_of(logits.shape)


# ---------------------------------------------------------------------------
# Inputs


def _rows_and_grad(gen: torch.Generator, shape) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.softmax(distinct(gen, *shape), dim=-1)  # (..., N), no two entries of a row equal
    dy = randn(gen, *shape)  # ȳ, the shape of y
    return y, dy


def jacobian_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape in JACOBIAN_SHAPES:
        y, _ = _rows_and_grad(gen, shape)
        cases.append(Case(f"y {shape}", (y,), batch=rows_of(shape)))
    y, _ = _rows_and_grad(gen, TRANSPOSED_SHAPE)
    cases.append(Case(f"y {TRANSPOSED_SHAPE}, a transposed (non-contiguous) view", (transposed(y),),
                      batch=rows_of(TRANSPOSED_SHAPE)))
    return cases


def backward_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape in BACKWARD_SHAPES:
        y, dy = _rows_and_grad(gen, shape)
        cases.append(Case(f"y {shape}, dy {shape}", (y, dy), batch=rows_of(shape)))
    y, dy = _rows_and_grad(gen, TRANSPOSED_SHAPE)
    cases.append(Case(f"y {TRANSPOSED_SHAPE}, dy {TRANSPOSED_SHAPE}, both transposed (non-contiguous) views",
                      (transposed(y), transposed(dy)), batch=rows_of(TRANSPOSED_SHAPE)))
    return cases


def shift_cases(gen: torch.Generator) -> list[ShiftCase]:
    cases = []
    for shape in SHIFT_SHAPES:
        x, dy = distinct(gen, *shape), randn(gen, *shape)  # (..., N) each
        c = randn(gen, *shape[:-1], 1, scale=3.0)  # (..., 1): any shift, one per row
        cases.append(ShiftCase(f"x {shape}, c {(*shape[:-1], 1)}, dy {shape}", (x, c, dy), batch=rows_of(shape)))
    x, dy = distinct(gen, *TRANSPOSED_SHAPE), randn(gen, *TRANSPOSED_SHAPE)
    c = randn(gen, TRANSPOSED_SHAPE[0], 1, scale=3.0)
    cases.append(ShiftCase(f"x {TRANSPOSED_SHAPE}, c {(TRANSPOSED_SHAPE[0], 1)}, dy {TRANSPOSED_SHAPE}, x and dy "
                           "transposed (non-contiguous) views", (transposed(x), c, transposed(dy)),
                           batch=rows_of(TRANSPOSED_SHAPE)))
    n = int(torch.randint(6, 14, (1,), generator=gen))
    u = lambda *shape: torch.rand(shape, generator=gen, dtype=torch.float64)  # noqa: E731 — uniform in [0, 1)
    return cases + shift_large_cases(2 * u(5, n) - 1, u(2, n), 2 * u(3, n) - 1)


def ce_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape, saturated in CE_SHAPES:
        logits = distinct(gen, *shape)  # (..., C), no ties
        target = randint(gen, shape[-1], *shape[:-1])  # (...), int64
        if saturated:
            logits, target = saturated_logits(logits)
        label = f"logits {shape}, target {shape[:-1]}" + (", saturated logits (softmax one-hot)" if saturated else "")
        cases.append(Case(label, (logits, target), batch=rows_of(shape)))
    logits = distinct(gen, *TRANSPOSED_SHAPE)
    target = randint(gen, TRANSPOSED_SHAPE[-1], *TRANSPOSED_SHAPE[:-1])
    cases.append(Case(f"logits {TRANSPOSED_SHAPE}, target {TRANSPOSED_SHAPE[:-1]}, logits a transposed "
                      "(non-contiguous) view", (transposed(logits), target), batch=rows_of(TRANSPOSED_SHAPE)))
    return cases


# ---------------------------------------------------------------------------
# The checks


@graded
def softmax_jacobian(fn: Callable) -> None:
    """Grade ``fn(y) -> J``, the (..., N, N) softmax Jacobian from its output."""
    run_checked(
        "softmax_jacobian", fn, jacobian_cases(generator("softmax_jacobian")), jacobian_reference,
        output="J", of="y with one more N axis",
        alternatives=lambda case: jacobian_alternatives(case.args[0], jacobian_reference(*case.args)),
    )


@graded
def softmax_backward(fn: Callable) -> None:
    """Grade ``fn(y, dy) -> dx``: the values, then that no call on rows of N ≥ 256 allocated N² elements."""
    recorded = RecordedCalls()
    run_checked(
        "softmax_backward", fn, backward_cases(generator("softmax_backward")), backward_reference,
        output="dx", of="y",
        alternatives=lambda case: backward_alternatives(*case.args, backward_reference(*case.args)),
        call_wrapper=recorded,
    )
    check_no_library_backward("softmax_backward", recorded.calls)
    check_no_jacobian("softmax_backward", recorded.calls, MEMORY_MIN_N)


@graded
def shifted_softmax_vjp(fn: Callable) -> None:
    """Grade ``fn(x, c, dy) -> (y, dx, dc)``: y = softmax(x − c) and its VJP for any c, finite in float32."""
    check_shift("shifted_softmax_vjp", fn, shift_cases(generator("shifted_softmax_vjp")), shift_reference)


@graded
def softmax_cross_entropy_backward(fn: Callable) -> None:
    """Grade ``fn(logits, target) -> dlogits`` for the mean cross-entropy over every row."""
    recorded = RecordedCalls()
    run_checked(
        "softmax_cross_entropy_backward", fn, ce_cases(generator("softmax_cross_entropy_backward")), ce_reference,
        output="dlogits", of="logits",
        alternatives=lambda case: ce_alternatives(*case.args, ce_reference(*case.args)),
        call_wrapper=recorded,
    )
    check_no_library_backward("softmax_cross_entropy_backward", recorded.calls)
