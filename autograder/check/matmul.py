"""Hidden checks for 01_matmul_from_shapes: ``linear_backward``, ``linear_bias_backward``, ``reduce_to_shape``.

Every call draws fresh float64 inputs (``autograder.inputs.generator``; set
AUTOGRADER_SEED to replay a run) on shapes chosen to expose one kind of bug each — the
comment beside each shape says which — and compares the student's result with the
closed-form references below. The named bugs (a transposed weight, one sample instead
of the batch, the wrong reduction axis, a mean for a sum, ...) are the same
alternatives the visible checks use, so a student reads the same diagnosis in both.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from course.diagnose import Alternative, Case, graded
from course.selfcheck.matmul import bias_alternatives, linear_alternatives, reduce_alternatives, run_checked

from ..inputs import generator, randn

# (leading axes of x, K, N). Batch-1 cases first: a failure that appears only above
# batch 1 is then read as a missing batch reduction. Sizes are not powers of two.
LINEAR_SHAPES = [
    ((1,), 6, 6),  # batch 1, square w: a transposed placement still has the right shape
    ((1,), 5, 3),  # batch 1, K ≠ N: exactly one arrangement of the shapes fits
    ((7,), 5, 3),  # batch 7 (prime): a missing sum over the batch shows up here
    ((7,), 6, 6),  # batch 7, square w
    ((6,), 4, 6),  # batch = N: dy is square, so a reduction over the wrong axis keeps the right shape
    ((7, 3), 5, 11),  # 3-D x (B, T, K): every leading axis is a batch axis
    ((2, 3, 7), 9, 5),  # 4-D x
    ((1, 1), 7, 2),  # leading axes that are all size 1 must still vanish from dw and db
]

# (shape of grad, target shape). The identity comes first: it is "batch 1" for a reduction.
REDUCE_SHAPES = [
    ((5, 3), (5, 3)),  # nothing was broadcast (and grad.sum(dim=()) would sum everything)
    ((7, 3), (3,)),  # a bias: one leading axis prepended
    ((7, 3), torch.Size([1, 3])),  # a stretched size-1 axis stays, with size 1 (torch.Size target)
    ((7, 3), (7, 1)),  # the other axis
    ((6, 6), (6,)),  # square: summing the trailing axis also gives shape (6,)
    ((5, 5, 5), (5, 1)),  # cube: the wrong axes still give shape (5, 1)
    ((1, 4), (4,)),  # a leading axis of size 1
    ((4, 7, 3), (7, 1)),  # a leading axis and a size-1 axis at once
    ((2, 5, 4, 3), torch.Size([5, 1, 3])),  # two leading axes and a size-1 axis in the middle
    ((3, 1, 5), (1, 5)),  # grad has a size-1 axis of its own
    ((4, 3), ()),  # a scalar broadcast everywhere: sum all
    ((2, 3, 5), torch.Size([])),  # the same, given as torch.Size
]


# ---------------------------------------------------------------------------
# References: the closed forms, in float64.


def linear_reference(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x̄ = ȳ Wᵀ keeps x's leading axes; W̄ = xᵀ ȳ sums over every one of them."""
    K, N = w.shape
    dx = dy @ w.mT  # (..., N) @ (N, K) -> (..., K)
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)  # (R, K), (R, N)
    dw = (x_rows[:, :, None] * dy_rows[:, None, :]).sum(dim=0)  # Σ_r x[r, k] ȳ[r, n], the elementwise definition
    return dx, dw


def linear_bias_reference(x, w, b, dy):
    """As ``linear_reference``, plus b̄ = ȳ summed over every row (b was copied to each)."""
    dx, dw = linear_reference(x, w, dy)
    return dx, dw, dy.reshape(-1, w.shape[1]).sum(dim=0)


def reduce_reference(grad: torch.Tensor, shape) -> torch.Tensor:
    """Sum the axes broadcasting prepended; sum, keeping them, the size-1 axes it stretched."""
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    out = grad.sum(dim=tuple(range(lead))) if lead else grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and out.shape[i] != 1)
    return out.sum(dim=stretched, keepdim=True) if stretched else out.clone()


# ---------------------------------------------------------------------------
# Inputs


def linear_cases(gen: torch.Generator, *, bias: bool) -> list[Case]:
    cases = []
    for lead, K, N in LINEAR_SHAPES:
        x = randn(gen, *lead, K)  # (..., K)
        w = randn(gen, K, N)  # (K, N)
        b = randn(gen, N)  # (N,)
        dy = randn(gen, *lead, N)  # (..., N), the shape of y
        args = (x, w, b, dy) if bias else (x, w, dy)
        label = f"x {tuple(x.shape)}, w {tuple(w.shape)}, " + (f"b {tuple(b.shape)}, " if bias else "") + f"dy {tuple(dy.shape)}"
        cases.append(Case(label, args, batch=math.prod(lead)))
    return cases


def reduce_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for grad_shape, shape in REDUCE_SHAPES:
        grad = randn(gen, *grad_shape)
        copies = grad.numel() // max(math.prod(shape), 1)
        cases.append(Case(f"grad {grad_shape} → shape {tuple(shape)}", (grad, shape), batch=copies))
    return cases


def _reduce_alternatives(case: Case) -> dict[str, list[Alternative]]:
    grad, shape = case.args
    return {"result": reduce_alternatives(grad, shape, reduce_reference(grad, shape))}


# ---------------------------------------------------------------------------
# The checks


@graded
def linear_backward(fn: Callable) -> None:
    """Grade ``fn(x, w, dy) -> (dx, dw)`` for y = x @ w; raise GradingFailure on a wrong answer."""
    run_checked(
        "linear_backward", fn, linear_cases(generator("linear_backward"), bias=False), linear_reference,
        outputs=("dx", "dw"), of=("x", "w"),
        alternatives=lambda case: linear_alternatives(linear_reference, *case.args),
    )


@graded
def linear_bias_backward(fn: Callable) -> None:
    """Grade ``fn(x, w, b, dy) -> (dx, dw, db)`` for y = x @ w + b."""
    run_checked(
        "linear_bias_backward", fn, linear_cases(generator("linear_bias_backward"), bias=True), linear_bias_reference,
        outputs=("dx", "dw", "db"), of=("x", "w", "b"),
        alternatives=lambda case: bias_alternatives(linear_bias_reference, *case.args),
    )


@graded
def reduce_to_shape(fn: Callable) -> None:
    """Grade ``fn(grad, shape)``: grad summed back to the shape it was broadcast from."""
    run_checked(
        "reduce_to_shape", fn, reduce_cases(generator("reduce_to_shape")), reduce_reference,
        outputs=("result",), of=("the tensor before broadcasting",), alternatives=_reduce_alternatives,
    )
