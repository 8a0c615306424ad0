"""Hidden checks for 01_matmul_from_shapes: the visible spec (``course.selfcheck.matmul``) on shapes of their own.

``name_the_bug`` is handed broken backwards drawn afresh on every run from the families
below (``BROKEN``), several flavours per bug class, each built as a closure around a
right backward: neither their names nor their code say which bug they carry. They stay
here: a right backward for any number of leading axes is the answer to Part B.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from course.selfcheck.matmul import LAID_OUT, SPECS

from .hidden import hidden

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
LINEAR_TRANSPOSED = [((2, 7), 5, 3, LAID_OUT)]  # last: a 3-D x, w and dy non-contiguous, each a transpose of a stored tensor

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
REDUCE_TRANSPOSED = [((2, 3, 4, 5), (1, 4, 1), LAID_OUT)]  # last: grad non-contiguous (a transpose)

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
BATCHED_TRANSPOSED = [  # last: every input non-contiguous, each the transpose of a stored tensor
    (7, 5, "shared", 4, 6, LAID_OUT),  # c (K, N) shared
    (7, 5, "per-element", 4, 6, LAID_OUT),  # c (B, K, N)
]

# ---------------------------------------------------------------------------
# name_the_bug: broken backwards for y = x @ w + b, drawn afresh on every run


def _right(x, w, b, dy) -> SimpleNamespace:
    """dx, dw, db of y = x @ w + b, beside x, w and their (rows, K) and (rows, N) views xr, dyr, for the edits below."""
    K, N = w.shape
    xr, dyr = x.reshape(-1, K), dy.reshape(-1, N)
    return SimpleNamespace(dx=dy @ w.mT, dw=xr.mT @ dyr, db=dyr.sum(dim=0), x=x, w=w, xr=xr, dyr=dyr)


def _variant(edit):
    """A backward: the right outputs with ``edit`` applied. Its name and its code say nothing of the bug."""
    def backward(x, w, b, dy):
        return edit(_right(x, w, b, dy))
    return backward


def _right_by_einsum(x, w, b, dy):
    return torch.einsum("...n,kn->...k", dy, w), torch.einsum("...k,...n->kn", x, dy), dy.reshape(-1, w.shape[1]).sum(0)


# class -> groups of (what is wrong, backward). Every run draws one flavour from each group, so the
# draw always holds what tells a careless classifier apart: a factor that shows only above batch 1
# and one that shows at once, a bug in dw and one in db.
BROKEN = {
    "transpose": [
        [("dw is the transpose of the right one", _variant(lambda r: (r.dx, r.dw.mT, r.db)))],
        [("dx is the transpose of the right one", _variant(lambda r: (r.dx.mT, r.dw, r.db)))],
    ],
    "batch-reduction": [
        [
            ("dw is the first sample's contribution alone", _variant(lambda r: (r.dx, torch.outer(r.xr[0], r.dyr[0]), r.db))),
            ("dw is the last sample's contribution alone", _variant(lambda r: (r.dx, torch.outer(r.xr[-1], r.dyr[-1]), r.db))),
            ("dw is the outer product of x and dy each summed over the batch",
             _variant(lambda r: (r.dx, torch.outer(r.xr.sum(0), r.dyr.sum(0)), r.db))),
            ("dw sums every other sample only", _variant(lambda r: (r.dx, r.xr[::2].mT @ r.dyr[::2], r.db))),
        ],
        [
            ("db is the first row of dy alone", _variant(lambda r: (r.dx, r.dw, r.dyr[0]))),
            ("db is the last row of dy alone", _variant(lambda r: (r.dx, r.dw, r.dyr[-1].clone()))),
        ],
    ],
    "sign": [
        [
            ("dx is the negative of the right one", _variant(lambda r: (-r.dx, r.dw, r.db))),
            ("dw is the negative of the right one", _variant(lambda r: (r.dx, -r.dw, r.db))),
        ],
        [("db is the negative of the right one", _variant(lambda r: (r.dx, r.dw, -r.db)))],
    ],
    "scale": [
        [  # right at batch 1: a factor of the batch size
            ("dw is the right one divided by the batch size", _variant(lambda r: (r.dx, r.dw / r.xr.shape[0], r.db))),
            ("db is the right one divided by the batch size", _variant(lambda r: (r.dx, r.dw, r.db / r.dyr.shape[0]))),
            ("db is the right one times the batch size", _variant(lambda r: (r.dx, r.dw, r.db * r.dyr.shape[0]))),
        ],
        [  # wrong at every batch size
            ("dx is twice the right one", _variant(lambda r: (2 * r.dx, r.dw, r.db))),
            ("dw is half the right one", _variant(lambda r: (r.dx, 0.5 * r.dw, r.db))),
        ],
    ],
    "broadcast-axis": [
        [("db sums dy over the features instead of the rows", _variant(lambda r: (r.dx, r.dw, r.dyr.sum(1))))],
    ],
    "wrong-values": [  # wrong at batch 1 already, by none of the above
        # Terms that come from x and w, never from b: a reference run with b = 0 must still see them.
        [("dw has a weight-decay term that y = x @ w + b does not have", _variant(lambda r: (r.dx, r.dw + 1e-2 * r.w, r.db)))],
        [("dx has a penalty term on x that y = x @ w + b does not have", _variant(lambda r: (r.dx + 1e-2 * r.x, r.dw, r.db)))],
    ],
    "none": [
        [("every output is right", _variant(lambda r: (r.dx, r.dw, r.db))), ("every output is right", _right_by_einsum)],
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


# ---------------------------------------------------------------------------
# The checks: the visible checks' flow, on cases drawn from this run's generator


linear_backward = hidden(SPECS["linear_backward"], LINEAR_SHAPES + LINEAR_TRANSPOSED)
linear_bias_backward = hidden(SPECS["linear_bias_backward"], LINEAR_SHAPES + LINEAR_TRANSPOSED)
reduce_to_shape = hidden(SPECS["reduce_to_shape"], REDUCE_SHAPES + REDUCE_TRANSPOSED)
name_the_bug = hidden(SPECS["name_the_bug"], name_the_bug_cases)
batched_matmul_backward = hidden(SPECS["batched_matmul_backward"], BATCHED_SHAPES + BATCHED_TRANSPOSED)
