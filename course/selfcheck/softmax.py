"""Visible checks for 02_softmax_collapse: ``softmax_jacobian``, ``softmax_backward``,
``shifted_softmax_vjp``, ``softmax_cross_entropy_backward``, ``log_softmax_backward``.

Each exercise is declared once, as an :class:`Exercise` (docs/design.md, "A lesson is a spec"):
the visible checks run it on the fixed shapes below, ``autograder.check.softmax`` on shapes of
its own and fresh inputs, so a student reads the same sentence in both. The references see only
what the student sees: the logits behind y are recovered as log y (softmax(log y) = y, since y
sums to 1), a reminder that the backward needs y, not x. Each named bug is the right answer with
one bug applied to it (the hub s replaced by a wrong one, the normaliser taken along the wrong
axis), so it names a bug without spelling out a solution. What is graded beside the values (no
N×N tensor, none of torch's own backward kernels or stabilising softmax, finite float32 results
for logits of ±1000, a saturated cross-entropy) is declared with each exercise at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import witness
from ..diagnose import (
    Alternative,
    Case,
    GradingFailure,
    distinct_from,
    relative_error,
    seeded,
    transposed_view,
    vjp,
)
from ..spec import NO_LIBRARY_BACKWARD, BatchAxis, Exercise, Refuses, among, visible

F32, F64 = torch.float32, torch.float64
SEED = 20240202  # fixed: the visible checks show the same numbers on every run
MEMORY_MIN_N = 256  # rows at least this long must not meet an N×N tensor in the backward



class Transposed(tuple):
    """The last row of every table: (rows, columns) of inputs laid out as transposed (non-contiguous) views."""


class Saturated(tuple):
    """A shape whose logits are stretched until softmax is one-hot, the least likely class the target."""

    note = ", saturated logits (softmax one-hot)"


TRANSPOSED = Transposed((5, 9))
# In every list, batch-1 cases first: run_cases reads "right at batch 1, wrong later" as a missing batch
# reduction. The square (7, 7) comes before the others of batch 7 so that a row reduction that lost its
# keepdim is diagnosed there (broadcast-axis), instead of crashing on a mismatch. Shapes of y:
JACOBIAN_SHAPES = [
    (5,),  # one row, no batch axis: J is (N, N)
    (1, 6),  # batch 1
    (7, 7),  # batch 7, as many rows as columns: an outer product over the wrong axes keeps the shape
    (7, 4),  # batch 7
    (2, 3, 5),  # 3-D: every leading axis is a batch axis
    TRANSPOSED,
]
BACKWARD_SHAPES = [
    (5,),  # one row, no batch axis
    (1, 6),  # batch 1
    (7, 7),  # batch 7, square: s of shape (7,) broadcasts along the wrong axis without an error
    (7, 12),  # batch 7
    (2, 3, 9),  # 3-D
    (2, 300),  # N ≥ MEMORY_MIN_N: an N×N Jacobian here is 90,000 elements per row
    TRANSPOSED,
]
# Shapes of the logits, classes last.
CE_SHAPES = [
    (1, 5),  # batch 1: a missing 1/M cannot show yet
    (7, 7),  # batch 7, square: a softmax normalised along the wrong axis keeps the shape
    (7, 10),  # batch 7
    (2, 3, 6),  # (B, T, C): the mean runs over all B·T rows
    Saturated((1, 9)),  # the target the least likely class (one row: a wrong answer here is not read as a
                        # batch-reduction bug)
    TRANSPOSED,
]
# Shapes of x (c is (..., 1), ȳ the shape of x).
SHIFT_SHAPES = [
    (6,),  # one row, no batch axis: c has shape (1,)
    (1, 7),  # batch 1
    (7, 7),  # batch 7, square: a row max broadcast along the wrong axis keeps the shape
    (7, 10),  # batch 7
    (2, 3, 5),  # 3-D: every leading axis is a batch axis
    TRANSPOSED,
]


# ---------------------------------------------------------------------------
# Inputs: each exercise draws its arguments, in order, from a generator and a shape


def normal(gen: torch.Generator, shape: Sequence[int]) -> torch.Tensor:
    """Standard normal float64 values: the visible checks' logits, and every ȳ."""
    return torch.randn(shape, generator=gen, dtype=F64)


def rows_of(shape: Sequence[int]) -> int:
    """The number of rows in a (..., N) tensor: every leading axis is a batch axis."""
    return math.prod(shape[:-1])


def saturated_logits(base: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits so spread out that softmax is one-hot in float64, and the least likely class as target.

    Each row is stretched to span exactly [100, 1100]: the target's probability is at most
    e^-1000, which is 0 in float64 (a chain through 1/y_t meets 1/0), and the largest logit
    is 1100, where exp overflows (above ~709.8) unless the row max is subtracted first.
    """
    low, high = base.amin(-1, keepdim=True), base.amax(-1, keepdim=True)  # (..., 1); rows have no ties
    logits = 100.0 + 1000.0 * (base - low) / (high - low)  # (..., C), every row from 100 to 1100
    return logits, logits.argmin(-1)


def _backward_inputs(gen: torch.Generator, shape, logits: Callable) -> dict[str, torch.Tensor]:
    y = torch.softmax(logits(gen, shape), -1)  # (..., N)
    return {"y": y, "dy": normal(gen, shape)}  # ȳ, the shape of y


def _jacobian_inputs(gen: torch.Generator, shape, logits: Callable) -> dict[str, torch.Tensor]:
    return {"y": _backward_inputs(gen, shape, logits)["y"]}  # ȳ is drawn too, and left unused


def _log_softmax_inputs(gen: torch.Generator, shape, logits: Callable) -> dict[str, torch.Tensor]:
    z = torch.log_softmax(logits(gen, shape), -1)  # (..., N), what the forward saved
    return {"z": z, "dz": normal(gen, shape)}  # z̄, the shape of z


def _shift_inputs(gen: torch.Generator, shape, logits: Callable) -> dict[str, torch.Tensor]:
    x = logits(gen, shape)  # (..., N)
    c = 3 * normal(gen, (*shape[:-1], 1))  # (..., 1): any shift, one per row
    return {"x": x, "c": c, "dy": normal(gen, shape)}


def _ce_inputs(gen: torch.Generator, shape, logits: Callable) -> dict[str, torch.Tensor]:
    z = logits(gen, shape)  # (..., C)
    target = torch.randint(0, shape[-1], shape[:-1], generator=gen)  # (...), int64 class ids
    if isinstance(shape, Saturated):
        z, target = saturated_logits(z)
    return {"logits": z, "target": target}


def _label(**tensors) -> str:
    return ", ".join(f"{k} {tuple(v.shape)}" for k, v in tensors.items())


@dataclass(frozen=True)
class Draw:
    """An exercise's case builder: ``inputs(gen, shape, logits)`` gives its arguments, {name: tensor} in order, the
    logits drawn by ``logits(gen, shape)``; a :class:`Transposed` row lays out those of its shape as transposed
    views, which ``transposed`` says in the label."""

    inputs: Callable
    transposed: str

    def __call__(self, gen: torch.Generator, shape, logits: Callable = normal) -> Case:
        args = self.inputs(gen, shape, logits)
        note = getattr(shape, "note", "")
        if isinstance(shape, Transposed):
            args = {k: transposed_view(v) if v.shape == shape else v for k, v in args.items()}
            note = self.transposed
        return Case(_label(**args) + note, tuple(args.values()), batch=rows_of(shape))



# ---------------------------------------------------------------------------
# References (torch autograd, from the logits log y)


def _jacobian_reference(y: torch.Tensor) -> torch.Tensor:
    """J[..., i, j] = ∂y_i/∂x_j by autograd: one backward pass per output index i, for all rows at once."""
    N = y.shape[-1]
    x = y.log().reshape(-1, N).requires_grad_(True)  # (R, N): rows are independent
    with torch.enable_grad():
        out = torch.softmax(x, dim=-1)
        rows = [torch.autograd.grad(out[:, i].sum(), x, retain_graph=True)[0] for i in range(N)]  # (R, N) each
    return torch.stack(rows, dim=-2).reshape(*y.shape, N)  # (..., N, N)


def _backward_reference(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return vjp(lambda x: torch.softmax(x, dim=-1), (y.log(),), dy)[0]


def _log_softmax_reference(z: torch.Tensor, dz: torch.Tensor) -> torch.Tensor:
    """Autograd of log-softmax at z itself: log_softmax(z) = z for a z that is already one, and the VJP there is
    the VJP at the logits behind it (both see the same softmax)."""
    return vjp(lambda x: torch.log_softmax(x, dim=-1), (z,), dz)[0]


def _ce_reference(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    C = logits.shape[-1]  # the loss is the mean over every row
    return vjp(lambda x: F.cross_entropy(x.reshape(-1, C), target.reshape(-1)), (logits,), None)[0]


def _shift_reference(x: torch.Tensor, c: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """y = softmax(x − c) and autograd's gradients for x and c, in float64 (dc is zero up to rounding)."""
    x, c = x.detach().to(F64), c.detach().to(F64)
    y = torch.softmax(x - c, dim=-1)  # torch shifts by the row max inside: finite for any x and c
    return (y, *vjp(lambda x, c: torch.softmax(x - c, dim=-1), (x, c), dy.to(F64)))


# ---------------------------------------------------------------------------
# The bugs worth naming


def _broadcast_to(value_fn: Callable[[], torch.Tensor], shape) -> torch.Tensor | None:
    """value_fn() when it can be computed and broadcast to ``shape``; None when those shapes never meet."""
    try:
        value = value_fn()
        return value.expand(shape).clone() if value.shape != shape else value
    except (RuntimeError, IndexError):
        return None


def _softmax_wrong_axes(x: torch.Tensor, shift_wrong: bool, sum_wrong: bool) -> torch.Tensor | None:
    """softmax(x) with its row max (``shift_wrong``) or its row sum (``sum_wrong``) broadcast along the wrong axis.

    Each reduction lost its last axis, so row i's value lands on column i. None where the shapes never meet.
    """
    def value():
        m = x.amax(-1, keepdim=True)  # (..., 1)
        e = (x - (m.squeeze(-1).unsqueeze(-2) if shift_wrong else m)).exp()
        z = e.sum(-1, keepdim=True)
        return e / (z.squeeze(-1).unsqueeze(-2) if sum_wrong else z)
    return _broadcast_to(value, x.shape)


def jacobian_alternatives(y: torch.Tensor, J: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``softmax_jacobian(y)``; ``J`` is the right answer."""
    outer = y.unsqueeze(-1) * y.unsqueeze(-2)  # (..., N, N): y_i y_j within one row
    diagonal = J + outer  # the diag(y) part alone
    alts: list[tuple[str, str, torch.Tensor | None]] = [
        ("wrong-values", "J has only the numerator's part: every y_i depends on every x_j through the "
         "sum in the denominator, so the entries off the diagonal are not zero.", diagonal),
        ("wrong-values", "J is right on its diagonal and zero off it: every y_i depends on every x_j "
         "through the sum in the denominator, so the entries off the diagonal are not zero.",
         torch.diag_embed(torch.diagonal(J, dim1=-2, dim2=-1))),
        ("wrong-values", "J has only the denominator's part: on the diagonal, x_i also appears in the "
         "numerator of y_i, and that derivative is missing.", -outer),
        ("wrong-values", "J is the Jacobian at softmax(y): y is already the softmax's output, and "
         "applying softmax to it again gives another point.", _jacobian_reference(torch.softmax(y, -1))),
    ]
    if y.ndim >= 2:
        alts.append(("broadcast-axis", "J pairs entries of different rows of y: each row is a separate softmax, so "
                     "every product in its Jacobian pairs two entries of the same row.",
                     _broadcast_to(lambda: diagonal - y.unsqueeze(-2) * y.unsqueeze(-3), J.shape)))
    return distinct_from([Alternative(c, s, v) for c, s, v in alts if v is not None], J)


def backward_alternatives(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``softmax_backward(y, dy)``; ``dx`` is the right answer.

    Each is the right answer with the row's one scalar (notebook 02's hub) swapped for a wrong one,
    which moves x̄ by y times the difference of the two scalars.
    """
    hub = (y * dy).sum(-1, keepdim=True)  # (..., 1): s, one per row

    def with_hub(wrong_hub: torch.Tensor) -> torch.Tensor | None:
        return _broadcast_to(lambda: dx - y * (wrong_hub - hub), dx.shape)

    alts: list[tuple[str, str, torch.Tensor | None]] = [
        ("broadcast-axis", "dx uses one number for the whole batch where each row needs its own: the row "
         "reduction ran over every element instead of along each row's last axis.", with_hub((y * dy).sum())),
    ]
    if y.ndim >= 2:
        alts += [
            ("broadcast-axis", "dx uses column sums where each row needs a sum of its own: the reduction ran "
             "over the batch axis instead of the last axis.", with_hub((y * dy).sum(-2, keepdim=True))),
            ("broadcast-axis", "dx subtracts each row's number along the wrong axis: the row sum lost its last "
             "axis, so a (..., rows) tensor was broadcast across the columns instead of down each row.",
             with_hub(hub.squeeze(-1).unsqueeze(-2))),
        ]
    if y.ndim >= 3:
        alts.append(("broadcast-axis", "dx uses a row number summed over the first batch axis too: rows of "
                     "different samples were mixed.", with_hub((y * dy).sum((0, -1), keepdim=True))))
    N = y.shape[-1]
    alts += [
        ("wrong-values", f"dx uses a mean over the row where the product J ȳ sums (a factor 1/{N} too "
         "small in the row's shared term).", with_hub(hub / N)),
        ("wrong-values", "dx applies only the diagonal of the Jacobian: the entries off the diagonal, which "
         "couple every output to every input, contribute nothing here.", with_hub(torch.zeros_like(hub))),
        ("wrong-values", "dx has the row's shared term without the factor every entry of J carries: column j "
         "of the Jacobian is proportional to y_j throughout.", dx + y * hub - hub),
        ("wrong-values", "dx is the backward at softmax(y): y is already the softmax's output, and applying "
         "softmax to it again gives another point.", _backward_reference(torch.softmax(y, -1), dy)),
    ]
    return distinct_from([Alternative(c, s, v) for c, s, v in alts if v is not None], dx)


def ce_alternatives(logits: torch.Tensor, target: torch.Tensor, dlogits: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``softmax_cross_entropy_backward(logits, target)``; ``dlogits`` is the right answer."""
    C = logits.shape[-1]
    M = rows_of(logits.shape)
    onehot = F.one_hot(target, C).to(logits.dtype)  # (..., C)

    def softmax_along_wrong_axes(shift_wrong: bool, sum_wrong: bool) -> torch.Tensor | None:
        p = _softmax_wrong_axes(logits, shift_wrong, sum_wrong)
        return None if p is None else (p - onehot) / M

    alts: list[tuple[str, str, torch.Tensor | None]] = []
    if M > 1:
        alts += [
            ("scale", f"dlogits is {M} times the right answer, the number of rows: the loss is the mean over "
             f"the {M} rows, so each row's gradient carries a factor 1/{M}.", dlogits * M),
            ("batch-reduction", "dlogits has −1 in every row at every row's target: each row's loss reads only "
             "its own target's entry, so the rows and the targets must be paired.",
             dlogits + (onehot - _any_target(target, C)) / M),
        ]
    if C != M and M > 1:
        alts.append(("scale", f"dlogits is divided by the number of classes C = {C}; the mean runs over the "
                     f"M = {M} rows.", dlogits * M / C))
    if logits.ndim >= 2:
        wrong_dim = (torch.softmax(logits, -2) - onehot) / M
        alts += [
            ("broadcast-axis", "dlogits uses a softmax taken down the columns (over the batch): softmax "
             "normalises each row, along the last axis.", wrong_dim),
            ("broadcast-axis", "dlogits divides by the row sums along the wrong axis: the sum of exponentials "
             "lost its last axis, so row i's sum divided column i.",
             softmax_along_wrong_axes(False, True)),
            ("broadcast-axis", "dlogits subtracts the row maxima along the wrong axis: the max lost its last "
             "axis (keepdim forgotten), so row i's max shifted column i — and a shift is only free when the "
             "whole row moves together.", softmax_along_wrong_axes(True, False)),
            ("broadcast-axis", "dlogits takes the row max and the row sum along the wrong axis: both lost "
             "their last axis, so they were broadcast across the columns instead of down each row.",
             softmax_along_wrong_axes(True, True)),
        ]
    alts.append(("wrong-values", "dlogits is missing the term at each row's target: the loss reads the "
                 "target's entry through the log as well as through the softmax.", dlogits + onehot / M))
    target_logp = torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1))  # (..., 1): log y_t
    if bool((target_logp < -700).any()):  # y_t is 0 in float64 on some row: the softmax saturated
        alts.append(("wrong-values", "dlogits vanished (it is zero) where the right answer is of order 1/M: "
                     "the softmax is saturated there, and a chain through −log y with a guard such as "
                     "log(y + eps) loses the gradient; the fused gradient has no such factor.",
                     torch.zeros_like(dlogits)))
    return distinct_from([Alternative(c, s, v) for c, s, v in alts if v is not None], dlogits)


def log_softmax_alternatives(z: torch.Tensor, dz: torch.Tensor, dx: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``log_softmax_backward(z, dz)``; ``dx`` is the right answer.

    Each is the right answer with the shift's term (what flows back through L = log Σ e^x) replaced by a wrong one:
    x̄ = z̄ − (shift's term), so a wrong term t' gives x̄ − (t' − t).
    """
    y = z.exp()  # softmax(x), rebuilt from the output
    total = dz.sum(-1, keepdim=True)  # (..., 1): what reaches L, one per row
    term = dz - dx  # the shift's term of the right answer

    def with_term(wrong: Callable[[], torch.Tensor]) -> torch.Tensor | None:
        return _broadcast_to(lambda: dx - (wrong() - term), dx.shape)

    N = z.shape[-1]
    alts: list[tuple[str, str, torch.Tensor | None]] = [
        ("wrong-values", "dx is z̄ as it is: the shift L = log Σ_j e^(x_j) was treated as a constant. L is computed "
         "from x, and z = x − L moves with it, so a gradient flows back through L into every x_j.", dz.clone()),
        ("wrong-values", "dx is Part B's softmax backward applied to z̄: z is the logarithm of a softmax, not a "
         "softmax, and its Jacobian is another matrix.", _backward_reference(y, dz)),
        ("wrong-values", "dx spreads what reaches L evenly over the row (1/N each): ∂L/∂x_j depends on j — a "
         "larger logit moves L more.", with_term(lambda: total / N)),
        ("wrong-values", "dx weighs what reaches L by z, the log-probabilities: ∂L/∂x_j is a probability, which z "
         "is the logarithm of.", with_term(lambda: z * total)),
        ("wrong-values", "dx adds the shift's term where it subtracts it: z = x − L, so what reaches L flows back "
         "with a minus.", dz + term),
        ("broadcast-axis", "dx uses one total for the whole batch where each row needs its own: the sum of z̄ ran "
         "over every element instead of along each row.", with_term(lambda: y * dz.sum())),
    ]
    if z.ndim >= 2:
        alts += [
            ("broadcast-axis", "dx uses column sums of z̄ where each row needs its own: the sum ran over the batch "
             "axis instead of the last axis.", with_term(lambda: y * dz.sum(-2, keepdim=True))),
            ("broadcast-axis", "dx adds each row's total along the wrong axis: the row sum lost its last axis, so a "
             "(..., rows) tensor was broadcast across the columns instead of down each row.",
             with_term(lambda: y * total.squeeze(-1).unsqueeze(-2))),
        ]
    return distinct_from([Alternative(c, s, v) for c, s, v in alts if v is not None], dx)


def _any_target(target: torch.Tensor, C: int) -> torch.Tensor:
    """(M, C) mask, 1 in every row at every class that is some row's target (what p[:, target] -= 1 subtracts)."""
    hit = torch.zeros(C, dtype=F64)
    hit[target.reshape(-1)] = 1.0
    return hit.expand(*target.shape, C)


# ---------------------------------------------------------------------------
# The free shift: y = softmax(x − c) and its VJP for x and for c


# Relative error allowed in y and dx, per dtype. In float32 a forward that rebuilds y = exp(x − lse) from the
# log-sum-exp lse (a fine answer) loses about |x|·u to the subtraction: 3e-5 at logits of 1000.
SHIFT_TOL = {F32: 2e-4, F64: 1e-7}
# |dc − reference| allowed, times the largest |ȳ|: an absolute bound, since dc can be far smaller than ȳ,
# where a relative error means nothing. The same bound holds dx on the float32 cases: on a row that is
# one-hot to float32 precision, x̄ is a difference of nearly equal numbers, exact only to about u·|ȳ|.
ABS_TOL = {F32: 2e-4, F64: 1e-10}
SHIFT_OUTPUTS = ("y", "dx", "dc")
LIBRARY_SOFTMAX = ("aten._softmax", "aten._log_softmax", "aten.logsumexp", "aten._safe_softmax")


def _large(case: Case) -> bool:
    """A case of float32 logits of size up to 1000 (:func:`shift_large_cases`)."""
    return case.args[0].dtype == F32


def shift_large_cases(gen: torch.Generator, rows: int, n: int) -> list[Case]:
    """The float32 cases, rows of ``n`` logits up to ±1000 with shifts that do not keep exp in range.

    ``rows`` rows with c = 0; two rows 1900 apart with c = 0; three rows with a shift above one row's max, at
    another's min, and at −1000.
    """
    u = lambda *shape: torch.rand(shape, generator=gen, dtype=F64)  # noqa: E731 — uniform in [0, 1)
    x, split, spread = 2 * u(rows, n) - 1, u(2, n), 2 * u(3, n) - 1  # in [-1, 1], [0, 1] and [-1, 1]
    big = (1000.0 * x).to(F32)  # every row spans most of [-1000, 1000]
    apart = torch.stack([900.0 + 100.0 * split[0], -1000.0 + 100.0 * split[1]]).to(F32)  # two rows 1900 apart
    wide = (1000.0 * spread).to(F32)
    shifts = torch.stack([wide[0].amax() + 300.0, wide[1].amin(), torch.tensor(-1000.0)]).to(F32)[:, None]
    cases = []
    for label, logits, c in [
        ("c = 0", big, torch.zeros(big.shape[0], 1, dtype=F32)),
        ("c = 0, one row near +1000 and one near −1000", apart, torch.zeros(2, 1, dtype=F32)),
        ("c above row 0's max, at row 1's min, and −1000 for row 2", wide, shifts),
    ]:
        dy = torch.linspace(-1.0, 1.0, logits.numel(), dtype=F32).reshape(logits.shape).flip(-1)
        cases.append(Case(f"x {tuple(logits.shape)} float32 logits up to ±1000, {label}", (logits, c, dy),
                          batch=logits.shape[0]))
    return cases


def shift_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """Named bugs of each output of ``shifted_softmax_vjp``."""
    y, dx, _ = _shift_reference(*case.args)
    x, _, dy = (a.to(F64) for a in case.args)
    hub = (y * dy).sum(-1, keepdim=True)  # (..., 1): one per row, the shape of c and of dc
    dc = [
        Alternative("wrong-values", "dc differentiates only the numerator e^(x_i − c): c also sits in every "
                    "exponent of the denominator, and that dependence counts too.", -hub),
        Alternative("wrong-values", "dc differentiates only the numerator e^(x_i − c), and with its sign "
                    "flipped: c also sits in every exponent of the denominator.", hub),
        Alternative("wrong-values", "dc adds up ȳ over the row as if y were x − c: ȳ is the gradient at y, and "
                    "c reaches y through the softmax, not directly.", -dy.sum(-1, keepdim=True)),
    ]
    ys = [Alternative("wrong-values", "y is not normalised: each row of a softmax sums to 1.",
                      (x - x.amax(-1, keepdim=True)).exp())]
    if x.ndim >= 2:
        ys += [
            Alternative("broadcast-axis", "y is a softmax down the columns (over the batch): each row is a softmax "
                        "of its own, along the last axis.", torch.softmax(x, -2)),
            Alternative("broadcast-axis", "y subtracts each row's own number along the wrong axis: the row "
                        "reduction lost its last axis, so row i's value shifted column i — and only a shift of "
                        "the whole row together leaves a softmax alone.", _softmax_wrong_axes(x, True, False)),
            Alternative("broadcast-axis", "y divides by the row sums along the wrong axis: the sum of exponentials "
                        "lost its last axis, so row i's sum divided column i.", _softmax_wrong_axes(x, False, True)),
            Alternative("broadcast-axis", "y takes two row reductions along the wrong axis: both lost their last "
                        "axis, so they were broadcast across the columns instead of down each row.",
                        _softmax_wrong_axes(x, True, True)),
        ]
    return {"y": distinct_from([a for a in ys if a.value is not None], y), "dx": backward_alternatives(y, dy, dx),
            "dc": [a for a in dc if relative_error(a.value, torch.zeros_like(a.value)) > 0]}


def _shift_tol(case: Case) -> float:
    return SHIFT_TOL[case.args[0].dtype]


def _shift_bound(out: str, case: Case) -> float | None:
    """dc, and dx on the float32 cases, are held to an absolute bound (ABS_TOL times the largest |ȳ|)."""
    dy = case.args[2]
    if out == "dc" or (out == "dx" and _large(case)):
        return ABS_TOL[dy.dtype] * max(1.0, dy.abs().max().item())
    return None


def _unlabelled(failure: GradingFailure, case: Case, passed) -> GradingFailure:
    """An error the code raised, as it is, without a line naming the inputs (as this check always showed it)."""
    return failure


@dataclass(frozen=True)
class Overflow:
    """The refinement of ``shifted_softmax_vjp``: a NaN or inf in y on the float32 cases is the missing (or
    insufficient) shift, said so; else :class:`BatchAxis` with its own reason."""

    batch: BatchAxis = BatchAxis("rows of a batch were mixed, or a reduction ran over the batch axis (each row is "
                                 "a softmax of its own).")

    def __call__(self, failure: GradingFailure, out: str, case: Case, got, expected, passed) -> GradingFailure:
        if not (out == "y" and failure.cls == "non-finite" and _large(case)):
            return self.batch(failure, out, case, got, expected, passed)
        bad = torch.nonzero(~torch.isfinite(got[0]))[0].tolist()
        where = f"y[{', '.join(map(str, bad))}]" if bad else "y"
        return GradingFailure(
            "non-finite",
            f"y is NaN or inf (first at {where}) for float32 logits as large as ±1000 with the shift handed in: exp "
            "overflows float32 above about 88.7 and rounds to 0 below about −103.9, and inf/inf or 0/0 is NaN. Each "
            "row's exponents have to stay in range whatever c you are handed.",
            f"inputs: {case.label}")


# ---------------------------------------------------------------------------
# Properties of the recorded calls


# torch's own softmax kernels, refused in the shift exercise: their values pass, but they stabilise for you.
NO_LIBRARY_SOFTMAX = Refuses(among(*LIBRARY_SOFTMAX), "wrong-values",
                             "{name} called torch's own {op}: its values are right, but it does the stabilising for "
                             "you — the forward here is yours to write, from exp and row reductions.")


def _jacobian_sized(args: tuple) -> bool:
    """A call on rows so long that an N×N tensor is one the operating system's count tells apart (course.witness)."""
    y = args[0] if args else None
    return isinstance(y, torch.Tensor) and y.dim() > 0 and witness.large_enough(y.shape[-1] ** 2, y.element_size())


def check_no_jacobian(name: str, calls: Sequence, cases: Sequence[Case] = ()) -> None:
    """Raise ``materialized-jacobian`` when a call on rows of N ≥ MEMORY_MIN_N allocated a tensor of ≥ N² elements."""
    for args, rec in calls:
        y = args[0]
        N = y.shape[-1]
        if N < MEMORY_MIN_N:
            continue
        big = [a for a in rec.allocations if a.numel >= N * N] + witness.touched_over(rec.touched, N * N, y.element_size())
        if big:
            shapes = ", ".join(str(a) for a in big[:3])
            out, grad = ("z", "dz") if name == "log_softmax_backward" else ("y", "dy")
            built = (f"it built a tensor of at least N² = {N * N:,} elements" if big[0].op != witness.TOUCHED else
                     f"it touched memory for {big[0].numel:,} elements while it ran, a large part of N² = {N * N:,}")
            raise GradingFailure(
                "materialized-jacobian",
                f"{name} gives the right values, but on rows of length N = {N} {built}: the Jacobian, or "
                f"something as big. The product with {grad} can be "
                "done on paper, and what each row needs from it is far smaller than N².",
                f"allocated: {shapes}\ninputs: {_label(**{out: y, grad: args[1]})}",
            )


def _named(output: str, alternatives: Callable, reference: Callable) -> Callable[[Case], dict[str, list[Alternative]]]:
    """``alternatives(*args, expected)`` as a spec's ``alternatives(case)``: the named bugs of ``output``."""
    return lambda case: {output: alternatives(*case.args, reference(*case.args))}


BOTH = ", both transposed (non-contiguous) views"
NO_JACOBIAN = (NO_LIBRARY_BACKWARD, check_no_jacobian)
JACOBIAN = Exercise(name="softmax_jacobian", draw=Draw(_jacobian_inputs, ", a transposed (non-contiguous) view"),
                    reference=_jacobian_reference, outputs=("J",), of=("y with one more N axis",),
                    alternatives=_named("J", jacobian_alternatives, _jacobian_reference))
BACKWARD = Exercise(name="softmax_backward", draw=Draw(_backward_inputs, BOTH), reference=_backward_reference,
                    outputs=("dx",), of=("y",), alternatives=_named("dx", backward_alternatives, _backward_reference),
                    properties=NO_JACOBIAN, counted=_jacobian_sized)
SHIFT = Exercise(name="shifted_softmax_vjp", draw=Draw(_shift_inputs, ", x and dy transposed (non-contiguous) views"),
                 reference=_shift_reference, outputs=SHIFT_OUTPUTS, of=("x", "x", "c"), alternatives=shift_alternatives,
                 tol=_shift_tol, bound=_shift_bound, refine=Overflow(), on_error=_unlabelled,
                 properties=(NO_LIBRARY_SOFTMAX,), counted=_jacobian_sized)
LOG_SOFTMAX = Exercise(name="log_softmax_backward", draw=Draw(_log_softmax_inputs, BOTH),
                       reference=_log_softmax_reference, outputs=("dx",), of=("z",),
                       alternatives=_named("dx", log_softmax_alternatives, _log_softmax_reference),
                       properties=NO_JACOBIAN, counted=_jacobian_sized)
CE = Exercise(name="softmax_cross_entropy_backward", draw=Draw(_ce_inputs, ", logits a transposed (non-contiguous) view"),
              reference=_ce_reference, outputs=("dlogits",), of=("logits",),
              alternatives=_named("dlogits", ce_alternatives, _ce_reference), properties=(NO_LIBRARY_BACKWARD,),
              counted=_jacobian_sized)


# ---------------------------------------------------------------------------
# The visible checks: the fixed shapes above, a fixed seed per exercise


def _shift_cases() -> list[Case]:
    gen = seeded(SEED + 3)
    return SHIFT.cases(gen, SHIFT_SHAPES) + shift_large_cases(gen, rows=4, n=8)


NO_NN = f", and no N×N tensor at N = {BACKWARD_SHAPES[-2][-1]}"
softmax_jacobian = visible(JACOBIAN, lambda: JACOBIAN.cases(seeded(SEED + 0), JACOBIAN_SHAPES),
                           "one row, batch 1, batch 7, 3-D input, a transposed view")
softmax_backward = visible(BACKWARD, lambda: BACKWARD.cases(seeded(SEED + 1), BACKWARD_SHAPES),
                           "one row, batch 1, batch 7, 3-D input, a transposed view" + NO_NN)
shifted_softmax_vjp = visible(SHIFT, _shift_cases, "one row, batch 1, batch 7, 3-D, a transposed view, and float32 "
                              "logits up to ±1000 with unhelpful shifts")
softmax_cross_entropy_backward = visible(CE, lambda: CE.cases(seeded(SEED + 2), CE_SHAPES), "batch 1, batch 7, 3-D "
                                         "logits, saturated softmax, a transposed view")
log_softmax_backward = visible(LOG_SOFTMAX, lambda: LOG_SOFTMAX.cases(seeded(SEED + 4), BACKWARD_SHAPES),
                               "one row, batch 1, batch 7, 3-D input, a transposed view" + NO_NN)
