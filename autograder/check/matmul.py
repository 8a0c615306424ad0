"""Hidden checks for 01_matmul_from_shapes: ``linear_backward``, ``linear_bias_backward``,
``reduce_to_shape``, ``name_the_bug``, ``batched_matmul_backward``.

Every call draws fresh float64 inputs (``autograder.inputs.generator``; set
AUTOGRADER_SEED to replay a run) on shapes chosen to expose one kind of bug each — the
comment beside each shape says which — and compares the student's result with the
closed-form references below; every check ends with transposed (non-contiguous) inputs.
The named bugs (a transposed weight, one sample instead of the batch, the wrong
reduction axis, a mean for a sum, ...) are the same alternatives the visible checks use,
so a student reads the same diagnosis in both.

``name_the_bug`` is handed broken backwards drawn afresh on every run from the families
below (``BROKEN``), several flavours per bug class, each built as a closure around a
right backward: neither their names nor their code say which bug they carry.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from course.diagnose import Alternative, Case, graded
from course.selfcheck.matmul import (  # noqa: F401 (HINTS: graded reads it from this module)
    HINTS, batched_alternatives, bias_alternatives, check_name_the_bug, linear_alternatives, reduce_alternatives,
    run_checked,
)

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

# (B, M, the shape of c, K, N) for y = a @ c with a (B, M, K).
BATCHED_SHAPES = [
    (1, 5, "per-element", 4, 6),  # batch 1: a per-element and a shared c cannot differ yet
    (1, 3, "shared", 6, 6),  # batch 1, c (K, N), square
    (7, 5, "per-element", 4, 6),  # batch 7 (prime): a sum over the batch where c is not shared shows here
    (7, 3, "shared", 4, 6),  # one c (K, N) for every element: its gradient sums them
    (7, 5, "shared-1", 6, 4),  # c (1, K, N): the same, with the size-1 batch axis kept
    (6, 4, "per-element", 5, 5),  # square c: a transposed dc keeps its shape
    (6, 6, "shared", 5, 6),  # B = M = N: a wrong axis keeps the shape
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
    # Last: x (2, 7, 5) and w, dy non-contiguous, each a transpose of a stored tensor.
    x, w = randn(gen, 2, 5, 7).mT, randn(gen, 3, 5).T  # (2, 7, 5), (5, 3)
    b, dy = randn(gen, 3), randn(gen, 2, 3, 7).mT  # (3,), (2, 7, 3)
    args = (x, w, b, dy) if bias else (x, w, dy)
    cases.append(Case("x (2, 7, 5), w (5, 3), dy (2, 7, 3), all three non-contiguous (transposes)", args, batch=14))
    return cases


def reduce_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for grad_shape, shape in REDUCE_SHAPES:
        grad = randn(gen, *grad_shape)
        copies = grad.numel() // max(math.prod(shape), 1)
        cases.append(Case(f"grad {grad_shape} → shape {tuple(shape)}", (grad, shape), batch=copies))
    grad = randn(gen, 2, 3, 5, 4).mT  # (2, 3, 4, 5), non-contiguous
    cases.append(Case("grad (2, 3, 4, 5), non-contiguous (a transpose) → shape (1, 4, 1)", (grad, (1, 4, 1)), batch=30))
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
        library=False,
    )


# ---------------------------------------------------------------------------
# name_the_bug: broken backwards for y = x @ w + b, drawn afresh on every run


def _right(x, w, b, dy):
    """(dx, dw, db) of y = x @ w + b, with (rows, K) and (rows, N) views for the edits below."""
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    return dy @ w.mT, x_rows.mT @ dy_rows, dy_rows.sum(dim=0), x_rows, dy_rows


def _variant(edit):
    """A backward: the right outputs with ``edit`` applied. Its name and its code say nothing of the bug."""
    def backward(x, w, b, dy):
        dx, dw, db, xr, dyr = _right(x, w, b, dy)
        return edit(dx, dw, db, xr, dyr)
    return backward


def _with_inputs(edit):
    """As ``_variant``, for an edit that needs the inputs themselves."""
    def backward(x, w, b, dy):
        dx, dw, db, _, _ = _right(x, w, b, dy)
        return edit(x, w, b, dx, dw, db)
    return backward


def _right_by_einsum(x, w, b, dy):
    return torch.einsum("...n,kn->...k", dy, w), torch.einsum("...k,...n->kn", x, dy), dy.reshape(-1, w.shape[1]).sum(0)


def _every_other_row(xr, dyr):
    return xr[::2].mT @ dyr[::2]


# class -> groups of (what is wrong, backward). Every run draws one flavour from each group, so the
# draw always holds what tells a careless classifier apart: a factor that shows only above batch 1
# and one that shows at once, a bug in dw and one in db.
BROKEN = {
    "transpose": [
        [("dw is the transpose of the right one", _variant(lambda dx, dw, db, xr, dyr: (dx, dw.mT, db)))],
        [("dx is the transpose of the right one", _variant(lambda dx, dw, db, xr, dyr: (dx.mT, dw, db)))],
    ],
    "batch-reduction": [
        [
            ("dw is the first sample's contribution alone",
             _variant(lambda dx, dw, db, xr, dyr: (dx, torch.outer(xr[0], dyr[0]), db))),
            ("dw is the last sample's contribution alone",
             _variant(lambda dx, dw, db, xr, dyr: (dx, torch.outer(xr[-1], dyr[-1]), db))),
            ("dw is the outer product of x and dy each summed over the batch",
             _variant(lambda dx, dw, db, xr, dyr: (dx, torch.outer(xr.sum(0), dyr.sum(0)), db))),
            ("dw sums every other sample only",
             _variant(lambda dx, dw, db, xr, dyr: (dx, _every_other_row(xr, dyr), db))),
        ],
        [
            ("db is the first row of dy alone", _variant(lambda dx, dw, db, xr, dyr: (dx, dw, dyr[0]))),
            ("db is the last row of dy alone", _variant(lambda dx, dw, db, xr, dyr: (dx, dw, dyr[-1].clone()))),
        ],
    ],
    "sign": [
        [
            ("dx is the negative of the right one", _variant(lambda dx, dw, db, xr, dyr: (-dx, dw, db))),
            ("dw is the negative of the right one", _variant(lambda dx, dw, db, xr, dyr: (dx, -dw, db))),
        ],
        [("db is the negative of the right one", _variant(lambda dx, dw, db, xr, dyr: (dx, dw, -db)))],
    ],
    "scale": [
        [  # right at batch 1: a factor of the batch size
            ("dw is the right one divided by the batch size",
             _variant(lambda dx, dw, db, xr, dyr: (dx, dw / xr.shape[0], db))),
            ("db is the right one divided by the batch size",
             _variant(lambda dx, dw, db, xr, dyr: (dx, dw, db / dyr.shape[0]))),
            ("db is the right one times the batch size",
             _variant(lambda dx, dw, db, xr, dyr: (dx, dw, db * dyr.shape[0]))),
        ],
        [  # wrong at every batch size
            ("dx is twice the right one", _variant(lambda dx, dw, db, xr, dyr: (2 * dx, dw, db))),
            ("dw is half the right one", _variant(lambda dx, dw, db, xr, dyr: (dx, 0.5 * dw, db))),
        ],
    ],
    "broadcast-axis": [
        [("db sums dy over the features instead of the rows",
          _variant(lambda dx, dw, db, xr, dyr: (dx, dw, dyr.sum(1))))],
    ],
    "wrong-values": [  # wrong at batch 1 already, by none of the above
        # Terms that come from x and w, never from b: a reference run with b = 0 must still see them.
        [("dw has a weight-decay term that y = x @ w + b does not have",
          _with_inputs(lambda x, w, b, dx, dw, db: (dx, dw + 1e-2 * w, db)))],
        [("dx has a penalty term on x that y = x @ w + b does not have",
          _with_inputs(lambda x, w, b, dx, dw, db: (dx + 1e-2 * x, dw, db)))],
    ],
    "none": [
        [("every output is right", _variant(lambda dx, dw, db, xr, dyr: (dx, dw, db))),
         ("every output is right", _right_by_einsum)],
    ],
}


def name_the_bug_cases(gen: torch.Generator) -> list[tuple[str, object, str, str]]:
    """One flavour from every group of every class, in a random order: (label, backward, class, what)."""
    drawn = []
    for cls, groups in BROKEN.items():
        for group in groups:
            what, backward = group[int(torch.randint(len(group), (1,), generator=gen))]
            drawn.append((cls, what, backward))
    order = torch.randperm(len(drawn), generator=gen).tolist()
    return [(f"hidden backward {n + 1} of {len(drawn)}", drawn[i][2], drawn[i][0], drawn[i][1])
            for n, i in enumerate(order)]


@graded
def name_the_bug(fn: Callable) -> None:
    """Grade ``fn(backward) -> str`` on broken backwards it has never seen."""
    check_name_the_bug(fn, name_the_bug_cases(generator("name_the_bug")))


# ---------------------------------------------------------------------------
# batched_matmul_backward


def batched_reference(a: torch.Tensor, c: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ā = ȳ cᵀ per element; c̄ = aᵀ ȳ per element, summed over the batch where c is shared."""
    c_each = c.expand(a.shape[0], *c.shape[-2:])  # (B, K, N): the matrix each element used
    da = torch.einsum("bmn,bkn->bmk", dy, c_each)  # (B, M, K)
    per_element = torch.einsum("bmk,bmn->bkn", a, dy)  # (B, K, N)
    if c.ndim == 2:
        dc = per_element.sum(dim=0)
    elif c.shape[0] == 1:
        dc = per_element.sum(dim=0, keepdim=True)
    else:
        dc = per_element
    return da, dc


def batched_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for B, M, kind, K, N in BATCHED_SHAPES:
        c_shape = {"per-element": (B, K, N), "shared": (K, N), "shared-1": (1, K, N)}[kind]
        a, c, dy = randn(gen, B, M, K), randn(gen, *c_shape), randn(gen, B, M, N)
        cases.append(Case(f"a {tuple(a.shape)}, c {tuple(c.shape)} ({kind.replace('-1', '')}), dy {tuple(dy.shape)}",
                          (a, c, dy), batch=B))
    # Last: every input non-contiguous; c shared, as the transpose of a stored (N, K).
    a, c, dy = randn(gen, 7, 4, 5).mT, randn(gen, 6, 4).T, randn(gen, 7, 6, 5).mT  # (7, 5, 4), (4, 6), (7, 5, 6)
    cases.append(Case("a (7, 5, 4), c (4, 6) (shared), dy (7, 5, 6), all non-contiguous (transposes)", (a, c, dy), batch=7))
    a, c, dy = randn(gen, 7, 4, 5).mT, randn(gen, 7, 6, 4).mT, randn(gen, 7, 6, 5).mT  # (7, 5, 4), (7, 4, 6), (7, 5, 6)
    cases.append(Case("a (7, 5, 4), c (7, 4, 6) (per-element), dy (7, 5, 6), all non-contiguous (transposes)",
                      (a, c, dy), batch=7))
    return cases


@graded
def batched_matmul_backward(fn: Callable) -> None:
    """Grade ``fn(a, c, dy) -> (da, dc)`` for y = a @ c, c per element or shared."""
    run_checked(
        "batched_matmul_backward", fn, batched_cases(generator("batched_matmul_backward")), batched_reference,
        outputs=("da", "dc"), of=("a", "c"),
        alternatives=lambda case: batched_alternatives(batched_reference, *case.args),
    )
