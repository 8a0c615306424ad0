"""Visible checks for 01_matmul_from_shapes: ``linear_backward``, ``linear_bias_backward``, ``reduce_to_shape``.

Each check runs the student's function on small fixed float64 inputs — batch 1 and
batch 7, a 3-D input, a square weight — and compares it with torch's own autograd.
A failure raises ``GradingFailure`` whose first line names the kind of bug; success
prints one line.

The bug-specific alternatives live here too (the hidden checks in ``autograder`` reuse
them, so a student reads the same sentence in both). Where it can, an alternative is
"the right answer, computed on the wrong inputs" — the reference applied to the first
sample only, to a transposed weight, to the summed batch — and otherwise the wrong
formula itself (dy summed over its features). Either way an alternative names a bug and
never spells out a solution.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import torch

from ..diagnose import Alternative, Case, graded, relative_error, run_cases

__all__ = ["linear_backward", "linear_bias_backward", "reduce_to_shape"]

F64 = torch.float64
SEED = 20240101  # fixed: the visible checks show the same numbers on every run

# (leading axes of x, K, N). Batch-1 cases first: run_cases reads "right at batch 1,
# wrong later" as a missing batch reduction.
LINEAR_SHAPES = [
    ((1,), 4, 4),  # batch 1, square w: a transposed placement keeps the right shape
    ((1,), 5, 3),  # batch 1, K ≠ N
    ((7,), 5, 3),  # batch 7: a missing sum over the batch shows up only here
    ((7, 3), 5, 3),  # 3-D input (B, T, K): every leading axis is a batch axis
]

# (shape of grad, target shape). The identity case comes first: it is "batch 1" for a reduction.
REDUCE_SHAPES = [
    ((5, 3), (5, 3)),  # nothing was broadcast: return grad as it is
    ((7, 3), torch.Size([3])),  # a leading axis was prepended (a bias)
    ((7, 3), (1, 3)),  # a size-1 axis was stretched: it stays, with size 1
    ((6, 6), (6,)),  # square: summing the wrong axis also gives shape (6,)
    ((4, 7, 3), (7, 1)),  # both at once
    ((4, 3), ()),  # a scalar broadcast everywhere
]


# ---------------------------------------------------------------------------
# References (torch autograd) and the bugs worth naming


def vjp(forward: Callable, inputs: Sequence[torch.Tensor], dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The gradient of ⟨forward(*inputs), dy⟩ with respect to every input, by torch autograd."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    with torch.enable_grad():
        grads = torch.autograd.grad(forward(*leaves), leaves, dy)
    return tuple(g.detach() for g in grads)


def _linear_reference(x, w, dy):
    return vjp(torch.matmul, (x, w), dy)


def _linear_bias_reference(x, w, b, dy):
    return vjp(lambda x, w, b: x @ w + b, (x, w, b), dy)


def _reduce_reference(grad, shape):
    # Broadcasting copies a tensor of `shape` out to grad's shape; its VJP is the reduction.
    return vjp(lambda t: t.expand(grad.shape), (torch.zeros(tuple(shape), dtype=grad.dtype),), grad)[0]


def _rows(t: torch.Tensor, width: int) -> torch.Tensor:
    return t.reshape(-1, width)


def _distinct(alts: list[Alternative], expected: torch.Tensor) -> list[Alternative]:
    """Drop alternatives that coincide with the right answer on these inputs: they name no bug here."""
    return [a for a in alts if a.value.shape != expected.shape or relative_error(a.value, expected) > 1e-9]


def linear_alternatives(reference: Callable, x, w, dy) -> dict[str, list[Alternative]]:
    """Named bugs of ``(dx, dw)`` for y = x @ w, each as the reference on the wrong inputs."""
    K, N = w.shape
    x2, dy2 = _rows(x, K), _rows(dy, N)  # (rows, K), (rows, N)
    rows = x2.shape[0]
    dx, dw = reference(x, w, dy)[:2]
    alts: dict[str, list[Alternative]] = {"dx": [], "dw": []}
    if K == N:
        alts["dx"].append(Alternative(
            "transpose",
            "dx is dy @ w where it must use wᵀ. With a square w both have the shape of x, so only the "
            "values tell: write the shapes with K ≠ N, and the one arrangement that fits is (B, N) @ (N, K).",
            reference(x, w.mT, dy)[0],
        ))
    if x.ndim > 2:
        alts["dx"].append(Alternative(
            "shape",
            f"dx is still flattened to (rows, K) = {tuple(x2.shape)}: reshape it back to the shape of x, "
            f"{tuple(x.shape)} — a gradient has the shape of its input.",
            _rows(dx, K),
        ))
    if rows > 1:
        first, last = (reference(x2[s], w, dy2[s])[1] for s in (slice(0, 1), slice(-1, None)))
        sums = reference(x2.sum(0, keepdim=True), w, dy2.sum(0, keepdim=True))[1]
        alts["dw"] += [
            Alternative("batch-reduction", "dw is the first sample's contribution alone: every row of x and dy "
                        "adds its own outer product to dw, so sum over all of them.", first),
            Alternative("batch-reduction", "dw is the last sample's contribution alone: a loop overwrote dw "
                        "where it must add to it (+=).", last),
            Alternative("batch-reduction", "dw is the outer product of x summed over the batch with dy summed "
                        "over the batch. That mixes samples (x of one row times dy of another); sum the "
                        "per-sample products instead.", sums),
            Alternative("scale", f"dw is the mean over the {rows} rows instead of the sum: every row's "
                        "contribution counts in full — the chain rule adds, it never averages.", dw / rows),
        ]
    return {"dx": _distinct(alts["dx"], dx), "dw": _distinct(alts["dw"], dw)}


def bias_alternatives(reference: Callable, x, w, b, dy) -> dict[str, list[Alternative]]:
    """Named bugs of ``(dx, dw, db)`` for y = x @ w + b."""
    N = w.shape[1]
    dy2 = _rows(dy, N)
    rows = dy2.shape[0]
    alts = linear_alternatives(lambda x, w, dy: reference(x, w, b, dy), x, w, dy)
    db = reference(x, w, b, dy)[2]
    wrong_axis = "db sums dy over its last axis (the features); b is copied along the rows, so sum over " \
                 "every row instead and keep the feature axis: db has shape (N,)."
    alts["db"] = [Alternative("broadcast-axis", wrong_axis, dy.sum(-1))]
    if dy.ndim > 2:
        alts["db"].append(Alternative("broadcast-axis", wrong_axis, dy2.sum(-1)))
    if rows > 1:
        alts["db"] += [
            Alternative("batch-reduction", "db is dy itself: b is added to every row, so every row's dy adds "
                        "up into db.", dy),
            Alternative("batch-reduction", "db is the first row of dy alone: b is added to every row, so "
                        "every row's dy adds up into db.", dy2[0]),
            Alternative("batch-reduction", "db is the last row of dy alone: a loop overwrote db where it must "
                        "add to it (+=).", dy2[-1]),
            Alternative("scale", f"db is the mean of dy over the {rows} rows instead of the sum: b received "
                        "the gradient of every row it was added to, in full.", db / rows),
        ]
    alts["db"] = _distinct(alts["db"], db)
    return alts


def reduce_alternatives(grad: torch.Tensor, shape, expected: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``reduce_to_shape(grad, shape)``; ``expected`` is the right answer."""
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    stretched = [i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1]
    alts = []
    copies = grad.numel() // max(math.prod(shape), 1)
    if copies > 1:
        alts.append(Alternative(
            "scale", f"the result is the mean over the {copies} copies instead of the sum: a value copied "
                     "forward receives every copy's gradient, in full.", expected / copies))
    if lead > 0:
        # Broadcasting lines shapes up from the right; summing the trailing axes is the classic slip.
        wrong = grad.sum(dim=tuple(range(len(shape), grad.ndim)))
        for i, n in enumerate(shape):
            if n == 1 and wrong.shape[i] != 1:
                wrong = wrong.sum(i, keepdim=True)
        alts.append(Alternative(
            "broadcast-axis", "the result sums the trailing axes of grad, but broadcasting lines shapes up "
                              "from the right: the axes it added are the leading ones.", wrong))
        kept = grad
        for i in stretched:
            kept = kept.sum(lead + i, keepdim=True)
        alts.append(Alternative(
            "batch-reduction", f"the result keeps the leading axes {tuple(grad.shape[:lead])} that broadcasting "
                               "prepended: every copy along them contributed, so sum them away.", kept))
    if stretched:
        alts.append(Alternative(
            "shape", f"the result lost the size-1 axes {tuple(stretched)} of the target shape {shape}: sum "
                     "them with keepdim=True so they stay, with size 1.", expected.squeeze(tuple(stretched))))
    if lead == 0 and not stretched and grad.ndim > 0:
        # grad.sum(dim=()) sums over *every* axis: an empty tuple does not mean "no axes".
        for value in (grad.sum(), grad.sum(dim=tuple(range(grad.ndim)), keepdim=True)):
            alts.append(Alternative(
                "shape", "the result is the sum of every element of grad, but nothing was broadcast here "
                         "(shape == grad.shape). Careful: grad.sum(dim=()) sums over all axes — when there is "
                         "nothing to reduce, return grad as it is.", value))
    return _distinct(alts, expected)


# ---------------------------------------------------------------------------
# Running a check


def run_checked(name: str, fn: Callable, cases: Sequence[Case], reference: Callable, *,
                outputs: Sequence[str], of: Sequence[str], alternatives: Callable) -> None:
    """``run_cases`` with warnings silenced while the student's code runs.

    nbgrader scores a test cell that writes to stderr zero, even when every value is right,
    so a deprecation warning from a correct answer must not reach the notebook.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_cases(name, fn, cases, reference, outputs=outputs, of=of, alternatives=alternatives)


def _linear_cases(bias: bool) -> list[Case]:
    gen = torch.Generator().manual_seed(SEED)
    cases = []
    for lead, K, N in LINEAR_SHAPES:
        x = torch.randn(*lead, K, generator=gen, dtype=F64)  # (..., K)
        w = torch.randn(K, N, generator=gen, dtype=F64)  # (K, N)
        b = torch.randn(N, generator=gen, dtype=F64)  # (N,)
        dy = torch.randn(*lead, N, generator=gen, dtype=F64)  # (..., N), the shape of y
        args = (x, w, b, dy) if bias else (x, w, dy)
        label = f"x {tuple(x.shape)}, w {tuple(w.shape)}, " + (f"b {tuple(b.shape)}, " if bias else "") + f"dy {tuple(dy.shape)}"
        cases.append(Case(label, args, batch=math.prod(lead)))
    return cases


def _reduce_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(SEED + 1)
    cases = []
    for grad_shape, shape in REDUCE_SHAPES:
        grad = torch.randn(grad_shape, generator=gen, dtype=F64)
        copies = grad.numel() // max(math.prod(shape), 1)
        cases.append(Case(f"grad {grad_shape} → shape {tuple(shape)}", (grad, shape), batch=copies))
    return cases


def _reduce_case_alternatives(case: Case) -> dict[str, list[Alternative]]:
    grad, shape = case.args
    return {"result": reduce_alternatives(grad, shape, _reduce_reference(grad, shape))}


@graded
def linear_backward(fn: Callable) -> None:
    """Check ``fn(x, w, dy) -> (dx, dw)`` for y = x @ w against torch autograd."""
    run_checked(
        "linear_backward", fn, _linear_cases(bias=False), _linear_reference,
        outputs=("dx", "dw"), of=("x", "w"),
        alternatives=lambda case: linear_alternatives(_linear_reference, *case.args),
    )
    print("✓ linear_backward passes the visible checks (batch 1, batch 7, 3-D input, square w)")


@graded
def linear_bias_backward(fn: Callable) -> None:
    """Check ``fn(x, w, b, dy) -> (dx, dw, db)`` for y = x @ w + b against torch autograd."""
    run_checked(
        "linear_bias_backward", fn, _linear_cases(bias=True), _linear_bias_reference,
        outputs=("dx", "dw", "db"), of=("x", "w", "b"),
        alternatives=lambda case: bias_alternatives(_linear_bias_reference, *case.args),
    )
    print("✓ linear_bias_backward passes the visible checks (batch 1, batch 7, 3-D input, square w)")


@graded
def reduce_to_shape(fn: Callable) -> None:
    """Check ``fn(grad, shape)`` against the autograd VJP of broadcasting a ``shape`` tensor to grad's shape."""
    run_checked(
        "reduce_to_shape", fn, _reduce_cases(), _reduce_reference,
        outputs=("result",), of=("the tensor before broadcasting",), alternatives=_reduce_case_alternatives,
    )
    print("✓ reduce_to_shape passes the visible checks (leading axes, size-1 axes, a scalar, nothing to reduce)")
