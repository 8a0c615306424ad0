"""The spec of 01_matmul_from_shapes (docs/design.md, "A lesson is a spec"), and its visible checks.

Where it can, an alternative is "the right answer, computed on the wrong inputs" —
the reference applied to the first sample only, to a transposed weight, to the summed batch —
and otherwise the wrong formula itself (dy summed over its features). Either way an
alternative names a bug and never spells out a solution.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from types import SimpleNamespace

import torch

from ..diagnose import Alternative, Case, GradingFailure, call_student, distinct_from, randn, seeded, vjp
from ..spec import Exercise, Runner, Spread, visible

SEED = 20240101  # fixed: the visible checks show the same numbers on every run

# name_the_bug's answers: the grader's own classes, and "none" for a right backward.
BUG_NAMES = ("transpose", "batch-reduction", "sign", "scale", "broadcast-axis", "wrong-values", "none")

LAID_OUT = {"transposed": True}  # a row's option: every input non-contiguous, each the .mT of a stored tensor

# (leading axes of x, K, N). Batch-1 cases first: run_cases reads "right at batch 1,
# wrong later" as a missing batch reduction.
LINEAR_SHAPES = [
    ((1,), 4, 4),  # batch 1, square w: a transposed placement keeps the right shape
    ((1,), 5, 3),  # batch 1, K ≠ N
    ((7,), 5, 3),  # batch 7: a missing sum over the batch shows up only here
    ((7, 3), 5, 3),  # 3-D input (B, T, K): every leading axis is a batch axis
    ((7,), 5, 3, LAID_OUT),  # last: x, w and dy non-contiguous, each the transpose of a stored tensor
]

# (shape of grad, target shape). The identity case comes first: it is "batch 1" for a reduction.
REDUCE_SHAPES = [
    ((5, 3), (5, 3)),  # nothing was broadcast: return grad as it is
    ((7, 3), torch.Size([3])),  # a leading axis was prepended (a bias)
    ((7, 3), (1, 3)),  # a size-1 axis was stretched: it stays, with size 1
    ((6, 6), (6,)),  # square: summing the wrong axis also gives shape (6,)
    ((4, 7, 3), (7, 1)),  # both at once
    ((4, 3), ()),  # a scalar broadcast everywhere
    ((3, 7, 4), (7, 1), LAID_OUT),  # last: grad non-contiguous (a transpose)
]

# (B, M, the shape of c, K, N) for y = a @ c with a (B, M, K): per-element c, or one shared c.
BATCHED_SHAPES = [
    (1, 5, "per-element", 4, 3),  # batch 1: per-element and shared c cannot differ yet
    (1, 5, "shared", 4, 3),  # batch 1, c (K, N)
    (7, 5, "per-element", 4, 3),  # batch 7: a sum over the batch where c is not shared shows here
    (7, 5, "shared", 4, 3),  # c (K, N), broadcast to every element: its gradient sums them
    (7, 5, "shared-1", 4, 3),  # c (1, K, N): the same, with the size-1 batch axis kept
    (7, 5, "per-element", 4, 4),  # square c: a transposed dc keeps its shape
    (7, 5, None, 4, 3, LAID_OUT),  # last: every input non-contiguous; None: a per-element c its label does not name
]


# ---------------------------------------------------------------------------
# References (torch autograd) and the bugs worth naming


def _linear_reference(x, w, dy):
    return vjp(torch.matmul, (x, w), dy)


def _linear_bias_reference(x, w, b, dy):
    return vjp(lambda x, w, b: x @ w + b, (x, w, b), dy)


def _reduce_reference(grad, shape):
    # Broadcasting copies a tensor of `shape` out to grad's shape; its VJP is the reduction.
    return vjp(lambda t: t.expand(grad.shape), (torch.zeros(tuple(shape), dtype=grad.dtype),), grad)[0]


_batched_reference = _linear_reference  # y = a @ c is torch.matmul too, with batch axes


def linear_alternatives(reference: Callable, x, w, dy) -> dict[str, list[Alternative]]:
    """Named bugs of ``(dx, dw)`` for y = x @ w, each as the reference on the wrong inputs."""
    K, N = w.shape
    x2, dy2 = x.reshape(-1, K), dy.reshape(-1, N)  # (rows, K), (rows, N)
    rows = x2.shape[0]
    dx, dw = reference(x, w, dy)[:2]
    alts: dict[str, list[Alternative]] = {"dx": [], "dw": []}
    if K == N:
        alts["dx"].append(Alternative(
            "transpose",
            "dx multiplies dy by w untransposed. With a square w that product has the shape of x too, so "
            "only the values tell; with K ≠ N the shapes would have caught it.",
            reference(x, w.mT, dy)[0],
        ))
    if x.ndim > 2:
        alts["dx"].append(Alternative(
            "shape",
            f"dx is still flattened to (rows, K) = {tuple(x2.shape)}, where a gradient has the shape of its "
            f"input, {tuple(x.shape)}.",
            dx.reshape(-1, K),
        ))
    if rows > 1:
        first, last = (reference(x2[s], w, dy2[s])[1] for s in (slice(0, 1), slice(-1, None)))
        sums = reference(x2.sum(0, keepdim=True), w, dy2.sum(0, keepdim=True))[1]
        alts["dw"] += [
            Alternative("batch-reduction", "dw is the first sample's contribution alone, but every sample used "
                        "the same w, so every sample contributes to its gradient.", first),
            Alternative("batch-reduction", "dw is the last sample's contribution alone: a loop overwrote dw with "
                        "each sample's contribution instead of accumulating them.", last),
            Alternative("batch-reduction", "dw is the outer product of x summed over the batch with dy summed "
                        "over the batch. That mixes samples: it adds x of one row times dy of another.", sums),
            Alternative("scale", f"dw is the mean over the {rows} rows instead of the sum: every row's "
                        "contribution counts in full — the chain rule adds, it never averages.", dw / rows),
        ]
    return {"dx": distinct_from(alts["dx"], dx), "dw": distinct_from(alts["dw"], dw)}


def bias_alternatives(reference: Callable, x, w, b, dy) -> dict[str, list[Alternative]]:
    """Named bugs of ``(dx, dw, db)`` for y = x @ w + b."""
    N = w.shape[1]
    dy2 = dy.reshape(-1, N)
    rows = dy2.shape[0]
    alts = linear_alternatives(lambda x, w, dy: reference(x, w, b, dy), x, w, dy)
    db = reference(x, w, b, dy)[2]
    wrong_axis = "db sums dy over its last axis (the features), but b is copied along the rows: each b_n is " \
                 "used once per row, not once per feature."
    alts["db"] = [Alternative("broadcast-axis", wrong_axis, dy.sum(-1))]
    if dy.ndim > 2:
        alts["db"].append(Alternative("broadcast-axis", wrong_axis, dy2.sum(-1)))
    if rows > 1:
        alts["db"] += [
            Alternative("batch-reduction", "db is dy itself, one row per sample: b is one vector added to every "
                        "row, so its gradient has no row axis.", dy),
            Alternative("batch-reduction", "db is the first row of dy alone, but b is added to every row, and "
                        "every row's use of it contributes.", dy2[0]),
            Alternative("batch-reduction", "db is the last row of dy alone: a loop overwrote db with each row "
                        "instead of accumulating them.", dy2[-1]),
            Alternative("scale", f"db is the mean of dy over the {rows} rows instead of the sum: b received "
                        "the gradient of every row it was added to, in full.", db / rows),
        ]
    alts["db"] = distinct_from(alts["db"], db)
    return alts


def reduce_alternatives(grad: torch.Tensor, shape, expected: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``reduce_to_shape(grad, shape)``; ``expected`` is the right answer."""
    shape = tuple(shape)
    added = grad.dim() - len(shape)  # axes the broadcast put in front
    stretched = [i for i, n in enumerate(shape) if n == 1 and grad.shape[added + i] != 1]
    alts = []
    copies = grad.numel() // max(math.prod(shape), 1)
    if copies > 1:
        alts.append(Alternative(
            "scale", f"the result is the mean over the {copies} copies instead of the sum: a value copied "
                     "forward receives every copy's gradient, in full.", expected / copies))
    if added > 0:
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
            kept = kept.sum(added + i, keepdim=True)
        alts.append(Alternative(
            "batch-reduction", f"the result keeps the leading axes {tuple(grad.shape[:added])} that broadcasting "
                               "prepended, which the tensor never had: every copy along them contributed to "
                               "the one original.", kept))
    if stretched:
        alts.append(Alternative(
            "shape", f"the result lost the size-1 axes {tuple(stretched)} of the target shape {shape}, which "
                     "the tensor had before broadcasting.", expected.squeeze(tuple(stretched))))
    if added == 0 and not stretched and grad.ndim > 0:
        # grad.sum(dim=()) sums over *every* axis: an empty tuple does not mean "no axes".
        for value in (grad.sum(), grad.sum(dim=tuple(range(grad.ndim)), keepdim=True)):
            alts.append(Alternative(
                "shape", "the result is the sum of every element of grad, but nothing was broadcast here "
                         "(shape == grad.shape): grad.sum(dim=()) sums over every axis, an empty tuple "
                         "included.", value))
    return distinct_from(alts, expected)


def batched_alternatives(reference: Callable, a, c, dy) -> dict[str, list[Alternative]]:
    """Named bugs of ``(da, dc)`` for y = a @ c with c (B, K, N), (K, N) or (1, K, N)."""
    B = a.shape[0]
    K, N = c.shape[-2:]
    da, dc = reference(a, c, dy)[:2]
    # (B, K, N): the gradient of every element's own c, by autograd on a c copied out per element.
    per_element = reference(a, c.expand(B, K, N).contiguous(), dy)[1]
    alts: dict[str, list[Alternative]] = {"da": [], "dc": []}
    if K == N:
        alts["da"].append(Alternative(
            "transpose", "da multiplies dy by c untransposed. With a square c that product has the shape of a too, "
                         "so only the values tell.", dy @ c))
    if B > 1 and c.ndim == 3 and c.shape[0] == B:
        summed = reference(a, c[0], dy)[1].expand(c.shape)  # one c shared by every element: autograd sums them
        alts["dc"].append(Alternative(
            "batch-reduction", "dc adds up the contributions of every batch element, but here every element has "
                               "its own c, used by that element alone.", summed))
    if B > 1 and (c.ndim == 2 or c.shape[0] == 1):
        alts["dc"].append(Alternative(
            "batch-reduction", f"dc keeps one matrix per batch element, shape {tuple(per_element.shape)}, but c is one "
                               f"matrix, shape {tuple(c.shape)}, shared by all of them.", per_element))
    return {"da": distinct_from(alts["da"], da), "dc": distinct_from(alts["dc"], dc)}


# ---------------------------------------------------------------------------
# Inputs: one builder per exercise, for the visible shapes and seed or the hidden ones


def _randn(gen: torch.Generator, *shape: int, transposed: bool = False) -> torch.Tensor:
    """A float64 tensor of ``shape``; ``transposed``: the ``.mT`` of a stored tensor, non-contiguous."""
    return randn(gen, *shape[:-2], shape[-1], shape[-2]).mT if transposed else randn(gen, *shape)


def _linear_case(gen: torch.Generator, lead: tuple, K: int, N: int, *, bias: bool, transposed: bool = False) -> Case:
    """(x, w, dy), or (x, w, b, dy) with ``bias``, for x (*lead, K) and w (K, N)."""
    x = _randn(gen, *lead, K, transposed=transposed)  # (..., K)
    w = _randn(gen, K, N, transposed=transposed)  # (K, N)
    b = _randn(gen, N)  # (N,)
    dy = _randn(gen, *lead, N, transposed=transposed)  # (..., N), the shape of y
    args = (x, w, b, dy) if bias else (x, w, dy)
    b_label = f"b {tuple(b.shape)}, " if bias and not transposed else ""
    layout = ", all three non-contiguous (transposes)" if transposed else ""
    return Case(f"x {tuple(x.shape)}, w {tuple(w.shape)}, {b_label}dy {tuple(dy.shape)}{layout}", args, batch=math.prod(lead))


def _reduce_case(gen: torch.Generator, grad_shape: tuple, shape, transposed: bool = False) -> Case:
    """(grad, shape) for a grad of ``grad_shape``."""
    grad = _randn(gen, *grad_shape, transposed=transposed)
    copies = grad.numel() // max(math.prod(shape), 1)
    layout = ", non-contiguous (a transpose)" if transposed else ""
    return Case(f"grad {tuple(grad_shape)}{layout} → shape {tuple(shape)}", (grad, shape), batch=copies)


def _batched_case(gen: torch.Generator, B: int, M: int, kind: str | None, K: int, N: int, transposed: bool = False) -> Case:
    """(a, c, dy) for a (B, M, K) and c of ``kind``; None is a per-element c its label does not name."""
    c_shape = {"per-element": (B, K, N), "shared": (K, N), "shared-1": (1, K, N)}[kind or "per-element"]
    a, c = _randn(gen, B, M, K, transposed=transposed), _randn(gen, *c_shape, transposed=transposed)
    dy = _randn(gen, B, M, N, transposed=transposed)
    named = f" ({kind.replace('-1', '')})" if kind else ""
    layout = ", all non-contiguous (transposes)" if transposed else ""
    return Case(f"a {tuple(a.shape)}, c {tuple(c.shape)}{named}, dy {tuple(dy.shape)}{layout}", (a, c, dy), batch=B)


# ---------------------------------------------------------------------------
# Running a check


def without_sum_to_size(name: str, fn: Callable, cases: Sequence[Case], reference: Callable) -> None:
    """``reduce_to_shape``'s runner: its values, with every call of ``Tensor.sum_to_size`` recorded (it still works),
    torch's own one-line answer to the exercise, refused once the values pass."""
    used: list[str] = []
    original = torch.Tensor.sum_to_size

    def watched(self, *args, **kwargs):
        used.append("Tensor.sum_to_size")
        return original(self, *args, **kwargs)

    torch.Tensor.sum_to_size = watched
    try:
        EXERCISES[name].run(fn, cases)
    finally:
        torch.Tensor.sum_to_size = original
    if used:
        raise GradingFailure(
            "wrong-values",
            f"{name} called torch's own {used[0]}: its values are right, but it is this exercise done for "
            "you — the reduction is yours to derive from how broadcasting lines up the shapes.")


# What each gradient exercise is checked against: its reference, its outputs and its named bugs.
EXERCISES = {ex.name: ex for ex in (
    Exercise(name="linear_backward", draw=Spread(partial(_linear_case, bias=False)), reference=_linear_reference,
             outputs=("dx", "dw"), of=("x", "w"), alternatives=lambda case: linear_alternatives(_linear_reference, *case.args)),
    Exercise(name="linear_bias_backward", draw=Spread(partial(_linear_case, bias=True)), reference=_linear_bias_reference,
             outputs=("dx", "dw", "db"), of=("x", "w", "b"),
             alternatives=lambda case: bias_alternatives(_linear_bias_reference, *case.args)),
    Exercise(name="reduce_to_shape", draw=Spread(_reduce_case), reference=_reduce_reference, outputs=("result",),
             of=("the tensor before broadcasting",), runner=without_sum_to_size,
             alternatives=lambda case: {"result": reduce_alternatives(*case.args, _reduce_reference(*case.args))}),
    Exercise(name="batched_matmul_backward", draw=Spread(_batched_case), reference=_batched_reference,
             outputs=("da", "dc"), of=("a", "c"), alternatives=lambda case: batched_alternatives(_batched_reference, *case.args)),
)}


# ---------------------------------------------------------------------------
# name_the_bug: the debugging order as code
#
# The broken backwards below run inside the student's call, so they are private: a public
# course function is a tripwire then (course.delegation). Their names say nothing either.


def _right(x, w, b, dy) -> SimpleNamespace:
    """(dx, dw, db) of y = x @ w + b by torch autograd, called directly (a course helper would be a tripwire
    inside the student's call), beside x, w and dy: each suspect is this with one bug applied."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
    with torch.enable_grad():
        dx, dw, db = torch.autograd.grad(leaves[0] @ leaves[1] + leaves[2], leaves, dy)
    return SimpleNamespace(dx=dx, dw=dw, db=db, x=x, w=w, dy=dy)


def _suspect(edit: Callable) -> Callable:
    """A backward: the right outputs with ``edit`` applied; its name (private) and its code say nothing of the bug."""
    def _backward(x, w, b, dy):
        return edit(_right(x, w, b, dy))
    return _backward


# (label, backward, its class, what is wrong with it): the five suspects of the notebook's §9 first.
SUSPECTS = [
    ("suspect_1 of §9", _suspect(lambda r: (r.dx, r.dw.mT, r.db)), "transpose", "dw is the transpose of the right one"),
    ("suspect_2 of §9", _suspect(lambda r: (r.dx, r.dw, r.dy[-1])), "batch-reduction", "db is the last row of dy alone"),
    ("suspect_3 of §9", _suspect(lambda r: (r.dx, r.dw / r.x.shape[0], r.db)), "scale",
     "dw is the right one divided by the batch size"),
    ("suspect_4 of §9", _suspect(lambda r: (r.dx, r.dw, r.dy.sum(dim=1))), "broadcast-axis",
     "db sums dy over the features instead of the rows"),
    ("suspect_5 of §9", _suspect(lambda r: (-r.dx, r.dw, r.db)), "sign", "dx is the negative of the right one"),
    ("a backward whose dw comes from the first sample", _suspect(lambda r: (r.dx, torch.outer(r.x[0], r.dy[0]), r.db)),
     "batch-reduction", "dw is the first sample's contribution alone"),
    ("a backward with a doubled db", _suspect(lambda r: (r.dx, r.dw, 2 * r.db)), "scale", "db is twice the right one"),
    ("a backward with weight decay folded into dw", _suspect(lambda r: (r.dx, r.dw + 1e-2 * r.w, r.db)), "wrong-values",
     "dw has a weight-decay term that y = x @ w + b does not have"),
    ("a right backward", _suspect(lambda r: (r.dx, r.dw, r.db)), "none", "every output is right"),
]

# Why a likely confusion is wrong: (what the student said, what it is) -> one sentence.
_SQUARE = "with square sizes a transposed output keeps its shape, and only its values show it"
_CONFUSIONS = {
    ("batch-reduction", "scale"): "a constant factor is a scale bug, even one that shows only above batch 1",
    ("none", "batch-reduction"): "this bug is invisible at batch 1 and shows above it",
    ("none", "scale"): "a factor of the batch size is invisible at batch 1 and shows above it",
    ("none", "transpose"): "with square sizes a transposed output keeps its shape and only its values show it",
    ("none", "broadcast-axis"): "with a square dy a wrong reduction axis keeps db's shape and only its values show it",
    ("batch-reduction", "broadcast-axis"): "db reduced over the wrong axis is wrong at batch 1 already",
    ("batch-reduction", "transpose"): _SQUARE,
    ("scale", "transpose"): _SQUARE,
    ("broadcast-axis", "transpose"): "an output of reversed shape holding the transposed values is a transpose",
    ("transpose", "broadcast-axis"): "db is a vector: it cannot be transposed, only reduced over the wrong axis",
    ("batch-reduction", "wrong-values"): "it is wrong at batch 1 already, where no missing reduction can show",
    ("wrong-values", "batch-reduction"): "it is right at batch 1 and wrong only above it",
    ("none", "wrong-values"): "that output is wrong at every batch size",
}


def misnamed(name: str, said: str, cls: str, what: str) -> str:
    """The sentence for a backward that ``name_the_bug`` named ``said`` when its class is ``cls``."""
    why = _CONFUSIONS.get((said, cls), f"that is a {cls} bug" if cls != "none" else "there is no bug to name")
    return f"{name} called a backward {said!r} where its {what}: {why}."


def check_name_the_bug(name: str, fn: Callable, suspects) -> None:
    """Hand ``fn`` each (label, backward, class, what) and compare its answer with the class."""
    for label, backward, cls, what in suspects:
        # Autograd is allowed: name_the_bug is a test of a backward, not a backward.
        said = call_student(name, fn, backward, forbid_autograd_use=False)
        where = f"backward: {label}"
        if not isinstance(said, str) or said not in BUG_NAMES:
            raise GradingFailure(
                "shape", f"{name} must return one of the strings {', '.join(map(repr, BUG_NAMES))}; it returned "
                         f"{said!r}.", where)
        if said != cls:
            raise GradingFailure("wrong-values", misnamed(name, said, cls, what), where)


# ---------------------------------------------------------------------------
# The visible checks: fixed seeds, the same inputs on every run


def _drawn(name: str, seed: int, rows: list) -> Callable[[], list[Case]]:
    return lambda: EXERCISES[name].cases(seeded(seed), rows)


VISIBLE_CASES = {
    "linear_backward": _drawn("linear_backward", SEED, LINEAR_SHAPES),
    "linear_bias_backward": _drawn("linear_bias_backward", SEED, LINEAR_SHAPES),
    "reduce_to_shape": _drawn("reduce_to_shape", SEED + 1, REDUCE_SHAPES),
    "name_the_bug": lambda: SUSPECTS,
    "batched_matmul_backward": _drawn("batched_matmul_backward", SEED + 2, BATCHED_SHAPES),
}
NAME_THE_BUG = Runner("name_the_bug", partial(check_name_the_bug, "name_the_bug"))
SPECS = {**EXERCISES, NAME_THE_BUG.name: NAME_THE_BUG}


def _visible(name: str, passes: str) -> Callable:
    return visible(SPECS[name], VISIBLE_CASES[name], passes)


linear_backward = _visible("linear_backward", "batch 1, batch 7, 3-D input, square w, transposed inputs")
linear_bias_backward = _visible("linear_bias_backward", "batch 1, batch 7, 3-D input, square w, transposed inputs")
reduce_to_shape = _visible("reduce_to_shape", "leading axes, size-1 axes, a scalar, nothing to reduce, a transposed grad")
name_the_bug = _visible("name_the_bug", "the five suspects of §9, three more broken backwards, a right one")
batched_matmul_backward = _visible(
    "batched_matmul_backward", "batch 1 and 7; c per element, (K, N) and (1, K, N); square c; transposed inputs")
