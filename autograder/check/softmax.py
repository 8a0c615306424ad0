"""Hidden checks for 02_softmax_collapse: ``softmax_jacobian``, ``softmax_backward``,
``shifted_softmax_vjp``, ``softmax_cross_entropy_backward``.

The exercises are the visible checks' declarations (``course.selfcheck.softmax``): the same
input builders, autograd references, named bugs and properties, so a student reads the
same diagnosis in both, and the same ``HINTS`` point to the notebook's hints. What is
hidden is the data: every call draws fresh float64 inputs (``autograder.inputs.generator``;
set AUTOGRADER_SEED to replay a run), logits with no ties from ``inputs.distinct``, on the
shapes below — the comment beside each says which bug it exposes, and every check ends
with one transposed (non-contiguous) case. ``shifted_softmax_vjp`` also gets float32
logits up to ±1000 on rows of a fresh length, with shifts that do not help.

The long rows of ``softmax_backward`` keep rows × N below N², so an honest O(N)-per-row
backward never comes near the ``materialized-jacobian`` threshold.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course.diagnose import graded
from course.selfcheck.softmax import (  # noqa: F401 — HINTS: the hint pointers course.diagnose.graded reads
    BACKWARD,
    CE,
    HINTS,
    JACOBIAN,
    SHIFT,
    Saturated,
    shift_large_cases,
)

from ..inputs import distinct, generator

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
# Shapes of the logits, classes last.
CE_SHAPES = [
    (1, 5),  # batch 1
    (1, 12),  # batch 1, more classes
    (7, 7),  # batch 7, square: a normaliser along the wrong axis keeps the shape
    (7, 10),  # batch 7
    (2, 3, 6),  # (B, T, C): the mean over all B·T rows
    Saturated((1, 11)),  # the least likely class as target: y_t is 0 in float64. One row, so that run_cases
                         # does not read a wrong answer here as a missing batch reduction
]
# Shapes of x for shifted_softmax_vjp (c is (..., 1)).
SHIFT_SHAPES = [
    (8,),  # one row, no batch axis
    (1, 9),  # batch 1
    (7, 7),  # batch 7, square: a row max without its axis shifts along the wrong axis silently
    (7, 11),  # batch 7, N prime
    (3, 2, 6),  # 3-D
]
TRANSPOSED_SHAPE = (6, 7)  # (rows, columns) of the transposed (non-contiguous) case of every check
SHIFT_LARGE_ROWS = 5  # rows of float32 logits up to ±1000 with c = 0, of a fresh length in [6, 13]


def logits(gen: torch.Generator, shape) -> torch.Tensor:
    """Logits with no two entries of a row equal (``inputs.distinct``)."""
    return distinct(gen, *shape)


@graded
def softmax_jacobian(fn: Callable) -> None:
    """Grade ``fn(y) -> J``, the (..., N, N) softmax Jacobian from its output."""
    JACOBIAN.check(fn, JACOBIAN.cases(generator("softmax_jacobian"), JACOBIAN_SHAPES, TRANSPOSED_SHAPE, logits))


@graded
def softmax_backward(fn: Callable) -> None:
    """Grade ``fn(y, dy) -> dx``: the values, then that no call on rows of N ≥ 256 allocated N² elements."""
    BACKWARD.check(fn, BACKWARD.cases(generator("softmax_backward"), BACKWARD_SHAPES, TRANSPOSED_SHAPE, logits))


@graded
def shifted_softmax_vjp(fn: Callable) -> None:
    """Grade ``fn(x, c, dy) -> (y, dx, dc)``: y = softmax(x − c) and its VJP for any c, finite in float32."""
    gen = generator("shifted_softmax_vjp")
    cases = SHIFT.cases(gen, SHIFT_SHAPES, TRANSPOSED_SHAPE, logits)
    n = int(torch.randint(6, 14, (1,), generator=gen))
    SHIFT.check(fn, cases + shift_large_cases(gen, rows=SHIFT_LARGE_ROWS, n=n))


@graded
def softmax_cross_entropy_backward(fn: Callable) -> None:
    """Grade ``fn(logits, target) -> dlogits`` for the mean cross-entropy over every row."""
    CE.check(fn, CE.cases(generator("softmax_cross_entropy_backward"), CE_SHAPES, TRANSPOSED_SHAPE, logits))
