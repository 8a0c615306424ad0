"""The course's tolerance for a half-precision backward, checked against a float64 reference (notebook 08).

A gradient stored in ``dtype`` whose reductions of length n are accumulated in float32 (float64 for
float64 inputs) is held to a norm-wise relative error ‖got − ref‖ / ‖ref‖ of

    tol(dtype, n, κ) = 2·u(dtype) + 2·κ·√n·u(acc),    acc = float64 if dtype is float64 else float32

where u is the unit roundoff, 2^-(mantissa bits + 1) = torch.finfo(dtype).eps / 2, and ref is
computed in float64 from the same, already rounded, inputs. The first term is the rounding of the
stored output (with room for one more rounding of a saved half-precision tensor); the second is
the typical error of an n-term sum in the accumulator (Higham and Mary's probabilistic bound: √n·u,
where the worst case is n·u for a sequential sum and log2(n)·u for a tree). That error is relative to
Σ|xᵢ|, the magnitudes the sum went through, not to the result: where the result cancels, the
condition factor κ = Σ|xᵢ| / |Σxᵢ| ≥ 1 (:func:`condition`, norm-wise over an output) scales it. The
rule is a typical size, not a guarantee: rounding errors that do not behave independently can pass
it. Notebook 08 Part C asks students for this rule; the hidden checks hold Parts A, B and E to it.
A sum accumulated in
``dtype`` itself instead errs by about √n·u(dtype), past the bound once a bfloat16 sum has a few dozen
terms: the half-accumulation bug this bound exists to catch.
"""

from __future__ import annotations

import math

import torch


def unit_roundoff(dtype: torch.dtype) -> float:
    """u(dtype) = 2^-(mantissa bits + 1): float64 2^-53, float32 2^-24, float16 2^-11, bfloat16 2^-8."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a torch floating-point dtype (torch.float16, torch.bfloat16, torch.float32 or "
                        f"torch.float64), got {dtype!r}")
    return torch.finfo(dtype).eps / 2


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel sums in for ``dtype`` inputs: float64 for float64, float32 for everything else."""
    unit_roundoff(dtype)  # the same check and message
    return torch.float64 if dtype == torch.float64 else torch.float32


def backward_tolerance(dtype: torch.dtype, n: int, condition: float = 1.0) -> float:
    """tol(dtype, n, κ) = 2·u(dtype) + 2·κ·√n·u(acc): the norm-wise relative error allowed to a gradient stored in
    ``dtype`` whose longest reduction has ``n`` terms accumulated in float32 (float64 for float64), with the
    accumulator's share scaled by the condition factor κ of the result (1 when nothing cancels)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int (the length of the gradient's reduction), got {n!r}")
    if not math.isfinite(condition) or condition < 1:
        raise ValueError(f"condition must be a finite number >= 1 (Σ|terms| / |result|), got {condition!r}")
    return 2 * unit_roundoff(dtype) + 2 * condition * math.sqrt(n) * unit_roundoff(accumulation_dtype(dtype))


def condition(result: torch.Tensor, magnitudes: torch.Tensor) -> float:
    """κ = ‖magnitudes‖ / ‖result‖, at least 1: how much larger what was added and subtracted is than what was
    left. ``magnitudes`` holds, element by element, the sum of the absolute values of the terms behind ``result``."""
    size = result.detach().to("cpu", torch.float64).norm().item()
    if size == 0:
        return 1.0
    return max(1.0, magnitudes.detach().to("cpu", torch.float64).norm().item() / size)


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """‖got − ref‖ / ‖ref‖ in float64, on the CPU: the norm-wise relative error the tolerance bounds."""
    got64, ref64 = got.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    if got64.shape != ref64.shape:
        raise ValueError(f"got has shape {tuple(got64.shape)} but ref has {tuple(ref64.shape)}")
    ref_norm = ref64.norm().item()
    if ref_norm == 0:
        raise ValueError("ref is all zeros: a relative error needs a nonzero reference")
    return (got64 - ref64).norm().item() / ref_norm
