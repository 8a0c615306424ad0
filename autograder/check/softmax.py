"""Hidden checks for 02_softmax_collapse: the visible checks' exercises (``course.selfcheck.softmax``,
the same hints) on fresh float64 inputs (``autograder.inputs.generator``; AUTOGRADER_SEED replays a
run), logits with no ties, on the shapes below, each commented with the bug it exposes.

The long rows of ``softmax_backward`` keep rows × N below N², so an honest O(N)-per-row
backward never comes near the ``materialized-jacobian`` threshold.
"""

from __future__ import annotations

import torch

from course.selfcheck.softmax import (
    BACKWARD,
    CE,
    JACOBIAN,
    LOG_SOFTMAX,
    SHIFT,
    Saturated,
    Transposed,
    shift_large_cases,
)

from ..inputs import distinct
from .hidden import hidden

TRANSPOSED = Transposed((6, 7))  # (rows, columns) of the transposed (non-contiguous) case, last in every table

# Shapes of y. Batch 1 first, square cases before the others of their batch (why: course.selfcheck.softmax).
JACOBIAN_SHAPES = [
    (6,),  # one row, no batch axis
    (1, 5),  # batch 1
    (7, 7),  # batch 7, square: an outer product across rows keeps the shape
    (7, 3),  # batch 7
    (3, 2, 7),  # 3-D
    (2, 5, 5),  # 3-D, square trailing axes
    TRANSPOSED,
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
    (1, 4099),  # a row so long that an N×N tensor (134 MB) stands far above what an honest call touches (~10 MB of
    # the worker's own, counted by the OS in the grader: course.witness.counted_by_os), wherever it was made
    TRANSPOSED,
]
# Shapes of z = log_softmax(x).
LOG_SOFTMAX_SHAPES = [
    (10,),  # one row, no batch axis
    (1, 7),  # batch 1
    (7, 7),  # batch 7, square: a row total without keepdim broadcasts along the wrong axis silently
    (7, 12),  # batch 7
    (3, 2, 9),  # 3-D
    (2, 2, 263),  # long rows, N prime: 4 rows × 263 ≪ 263², and an N×N tensor is caught
    (1, 4099),  # an N×N tensor counted by the OS wherever it was made (as in BACKWARD_SHAPES)
    TRANSPOSED,
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
    TRANSPOSED,
]
# Shapes of x for shifted_softmax_vjp (c is (..., 1)).
SHIFT_SHAPES = [
    (8,),  # one row, no batch axis
    (1, 9),  # batch 1
    (7, 7),  # batch 7, square: a row max without its axis shifts along the wrong axis silently
    (7, 11),  # batch 7, N prime
    (3, 2, 6),  # 3-D
    TRANSPOSED,
]
SHIFT_LARGE_ROWS = 5  # rows of float32 logits up to ±1000 with c = 0


def logits(gen: torch.Generator, shape) -> torch.Tensor:
    """Logits with no two entries of a row equal (``inputs.distinct``)."""
    return distinct(gen, *shape)


def _shift_cases(gen: torch.Generator) -> list:
    """The shapes above, then float32 logits up to ±1000 on a fresh row length in [6, 13]."""
    cases = SHIFT.cases(gen, SHIFT_SHAPES, logits=logits)
    n = int(torch.randint(6, 14, (1,), generator=gen))
    return cases + shift_large_cases(gen, rows=SHIFT_LARGE_ROWS, n=n)


softmax_jacobian = hidden(JACOBIAN, JACOBIAN_SHAPES, logits=logits)
softmax_backward = hidden(BACKWARD, BACKWARD_SHAPES, logits=logits)
shifted_softmax_vjp = hidden(SHIFT, _shift_cases)
softmax_cross_entropy_backward = hidden(CE, CE_SHAPES, logits=logits)
log_softmax_backward = hidden(LOG_SOFTMAX, LOG_SOFTMAX_SHAPES, logits=logits)

