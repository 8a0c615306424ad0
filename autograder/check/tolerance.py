"""Notebook 08 Part C's rule, for the hidden checks: tol(dtype, n, κ) = 2·u(dtype) + 2·κ·√n·u(acc).

The rule is ``kernels.precision.backward_tolerance`` (its docstring derives it). The hidden checks
cannot import it from there: with the hidden tests in the student's kernel (``--no-trusted``) the
sandbox hides ``kernels`` from that process, and ``autograder.check`` must import all the same.
``course/`` may not hold it either (students receive ``course``, and Part C asks for the rule). So
it is written here a second time, and ``tests/autograder/test_check_mixed_precision.py`` holds the
two to the same values on a grid of dtypes, lengths and condition factors.
"""

from __future__ import annotations

import math

import torch


def _unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def backward_tolerance(dtype: torch.dtype, n: int, condition: float = 1.0) -> float:
    """The norm-wise relative error allowed to a gradient stored in ``dtype`` whose longest sum has ``n`` terms
    accumulated in float32 (float64 for float64), the accumulator's share scaled by the result's condition factor."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return 2 * _unit_roundoff(dtype) + 2 * condition * math.sqrt(n) * _unit_roundoff(acc)


def condition(result: torch.Tensor, magnitudes: torch.Tensor) -> float:
    """κ = ‖magnitudes‖ / ‖result‖, at least 1 (1 for a zero result)."""
    size = result.detach().to("cpu", torch.float64).norm().item()
    if size == 0:
        return 1.0
    return max(1.0, magnitudes.detach().to("cpu", torch.float64).norm().item() / size)
