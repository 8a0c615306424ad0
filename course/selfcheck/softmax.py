"""Visible checks for 02_softmax_collapse: ``softmax_jacobian``, ``softmax_backward``, ``softmax_cross_entropy_backward``.

Each check runs the student's function on small fixed float64 inputs — a single row,
batch 1, batch 7 (once with as many rows as columns, where a row scalar broadcast along
the wrong axis keeps the right shape), a 3-D input — and compares it with torch's own
autograd. A failure raises ``GradingFailure`` whose first line names the kind of bug;
success prints one line.

Two checks grade a property as well as the values, and both refuse torch's own backward
kernels (``aten._softmax_backward_data`` and friends: autograd by another door, read from
the recorder's op counts) as ``autograd-in-backward``:

- ``softmax_backward`` runs under :class:`course.memory.AllocationRecorder`. On rows of
  length N ≥ 256, any tensor of N² elements or more that the function allocates is
  ``materialized-jacobian``, even when every value is right.
- ``softmax_cross_entropy_backward`` gets one batch of saturated logits (the softmax is
  one-hot to the last bit, the target is the least likely class): the fused gradient is
  perfectly finite there, and a chain that divides by the target's probability is not.

The references see only what the student sees: the logits behind y are recovered as
log y (softmax(log y) = y, since y sums to 1) — a small reminder that the backward needs
y, not x. The alternatives live here too (the hidden checks in ``autograder`` reuse
them, so a student reads the same sentence in both). Each one is the right answer with
one bug applied to it — the hub s replaced by a wrong one, the normaliser taken along the
wrong axis — so it names a bug without spelling out a solution.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..diagnose import Alternative, Case, GradingFailure, as_outputs, graded, relative_error, run_cases
from ..memory import AllocationRecorder

__all__ = [
    "softmax_jacobian", "softmax_backward", "softmax_cross_entropy_backward",
    "jacobian_alternatives", "backward_alternatives", "ce_alternatives", "check_no_jacobian", "check_no_library_backward", "run_checked", "RecordedCalls",
    "MEMORY_MIN_N",
]

F64 = torch.float64
SEED = 20240202  # fixed: the visible checks show the same numbers on every run
MEMORY_MIN_N = 256  # rows at least this long must not meet an N×N tensor in the backward

# Shapes of y. Batch-1 cases first: run_cases reads "right at batch 1, wrong later" as a
# missing batch reduction. The square (7, 7) comes before (7, 12) so that a row sum that
# lost its keepdim is diagnosed there, instead of crashing on a mismatch.
JACOBIAN_SHAPES = [
    (5,),  # one row, no batch axis: J is (N, N)
    (1, 6),  # batch 1
    (7, 7),  # batch 7, as many rows as columns: an outer product over the wrong axes keeps the shape
    (7, 4),  # batch 7
    (2, 3, 5),  # 3-D: every leading axis is a batch axis
]
BACKWARD_SHAPES = [
    (5,),  # one row, no batch axis
    (1, 6),  # batch 1
    (7, 7),  # batch 7, square: s of shape (7,) broadcasts along the wrong axis without an error
    (7, 12),  # batch 7
    (2, 3, 9),  # 3-D
    (2, 300),  # N ≥ MEMORY_MIN_N: an N×N Jacobian here is 90,000 elements per row
]
# (shape of the logits, saturated?)
CE_SHAPES = [
    ((1, 5), False),  # batch 1: a missing 1/M cannot show yet
    ((7, 7), False),  # batch 7, square: a softmax normalised along the wrong axis keeps the shape
    ((7, 10), False),  # batch 7
    ((2, 3, 6), False),  # (B, T, C): the mean runs over all B·T rows
    ((1, 9), True),  # saturated logits, the target the least likely class (one row: a wrong answer here is
                     # not read as a batch-reduction bug)
]


# ---------------------------------------------------------------------------
# Inputs


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


def _backward_inputs(gen: torch.Generator, shape) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(shape, generator=gen, dtype=F64)  # logits, (..., N)
    y = torch.softmax(x, -1)  # (..., N)
    dy = torch.randn(shape, generator=gen, dtype=F64)  # ȳ, the shape of y
    return y, dy


def _label(**tensors) -> str:
    return ", ".join(f"{k} {tuple(v.shape)}" for k, v in tensors.items())


def _jacobian_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(SEED)
    cases = []
    for shape in JACOBIAN_SHAPES:
        y, _ = _backward_inputs(gen, shape)
        cases.append(Case(_label(y=y), (y,), batch=rows_of(shape)))
    return cases


def _backward_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(SEED + 1)
    cases = []
    for shape in BACKWARD_SHAPES:
        y, dy = _backward_inputs(gen, shape)
        cases.append(Case(_label(y=y, dy=dy), (y, dy), batch=rows_of(shape)))
    return cases


def _ce_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(SEED + 2)
    cases = []
    for shape, saturated in CE_SHAPES:
        logits = torch.randn(shape, generator=gen, dtype=F64)  # (..., C)
        target = torch.randint(0, shape[-1], shape[:-1], generator=gen)  # (...), int64 class ids
        if saturated:
            logits, target = saturated_logits(logits)
        label = _label(logits=logits, target=target) + (", saturated logits (softmax one-hot)" if saturated else "")
        cases.append(Case(label, (logits, target), batch=rows_of(shape)))
    return cases


# ---------------------------------------------------------------------------
# References (torch autograd, from the logits log y)


def _softmax_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _jacobian_reference(y: torch.Tensor) -> torch.Tensor:
    """J[..., i, j] = ∂y_i/∂x_j by autograd: one backward pass per output index i, for all rows at once."""
    N = y.shape[-1]
    x = y.log().reshape(-1, N).requires_grad_(True)  # (R, N): rows are independent
    with torch.enable_grad():
        out = _softmax_rows(x)
        rows = [torch.autograd.grad(out[:, i].sum(), x, retain_graph=True)[0] for i in range(N)]  # (R, N) each
    return torch.stack(rows, dim=-2).reshape(*y.shape, N)  # (..., N, N)


def _backward_reference(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    x = y.log().requires_grad_(True)
    with torch.enable_grad():
        (dx,) = torch.autograd.grad(_softmax_rows(x), x, dy)
    return dx


def _ce_reference(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    C = logits.shape[-1]
    x = logits.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        loss = F.cross_entropy(x.reshape(-1, C), target.reshape(-1))  # mean over every row
        (dlogits,) = torch.autograd.grad(loss, x)
    return dlogits


# ---------------------------------------------------------------------------
# The bugs worth naming


def _distinct(alts: list[Alternative], expected: torch.Tensor) -> list[Alternative]:
    """Drop alternatives that coincide with the right answer on these inputs: they name no bug here."""
    return [a for a in alts if a.value.shape != expected.shape or relative_error(a.value, expected) > 1e-9]


def _broadcast_to(value_fn: Callable[[], torch.Tensor], shape) -> torch.Tensor | None:
    """value_fn() when it can be computed and broadcast to ``shape``; None when those shapes never meet."""
    try:
        value = value_fn()
        return value.expand(shape).clone() if value.shape != shape else value
    except (RuntimeError, IndexError):
        return None


def jacobian_alternatives(y: torch.Tensor, J: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``softmax_jacobian(y)``; ``J`` is the right answer."""
    outer = y.unsqueeze(-1) * y.unsqueeze(-2)  # (..., N, N): y_i y_j within one row
    diagonal = J + outer  # the diag(y) part alone
    alts = [
        Alternative("wrong-values", "J holds only its diagonal: every y_i depends on every x_j through the "
                    "sum in the denominator, so the off-diagonal entries −y_i y_j belong too.", diagonal),
        Alternative("wrong-values", "J holds only the diagonal of the right answer, y_i (1 − y_i): the "
                    "off-diagonal entries −y_i y_j are missing.", torch.diag_embed(torch.diagonal(J, dim1=-2, dim2=-1))),
        Alternative("wrong-values", "J is missing its diagonal term: ∂y_i/∂x_i has a y_i from the numerator "
                    "as well as the −y_i² from the denominator.", -outer),
        Alternative("wrong-values", "J is the Jacobian at softmax(y): y is already the softmax's output — "
                    "write J from y directly, do not apply softmax to it again.", _jacobian_of(torch.softmax(y, -1))),
    ]
    if y.ndim >= 2:
        wrong = _broadcast_to(lambda: diagonal - y.unsqueeze(-2) * y.unsqueeze(-3), J.shape)
        if wrong is not None:
            alts.append(Alternative(
                "broadcast-axis", "J pairs entries of different rows of y: the outer product y yᵀ is taken "
                "within one row, between an (..., N, 1) column and a (..., 1, N) row of the same y.", wrong))
    return _distinct(alts, J)


def _jacobian_of(y: torch.Tensor) -> torch.Tensor:
    """The softmax Jacobian at output y, from autograd (used for the 'softmax applied twice' bug)."""
    return _jacobian_reference(y)


def backward_alternatives(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``softmax_backward(y, dy)``; ``dx`` is the right answer.

    Each is the right answer with the row hub s = ⟨y, ȳ⟩ swapped for a wrong one:
    y ⊙ (ȳ − s') = x̄ − y ⊙ (s' − s).
    """
    hub = (y * dy).sum(-1, keepdim=True)  # (..., 1): s, one per row

    def with_hub(wrong_hub: torch.Tensor) -> torch.Tensor | None:
        return _broadcast_to(lambda: dx - y * (wrong_hub - hub), dx.shape)

    alts: list[tuple[str, str, torch.Tensor | None]] = [
        ("broadcast-axis", "dx uses one s for the whole batch: the row sum ⟨y, ȳ⟩ was taken over every element "
         "(or over the batch) instead of along each row's last axis.", with_hub((y * dy).sum())),
    ]
    if y.ndim >= 2:
        alts += [
            ("broadcast-axis", "dx uses column sums where s is a row sum: ⟨y, ȳ⟩ was reduced over the batch axis "
             "instead of the last axis.", with_hub((y * dy).sum(-2, keepdim=True))),
            ("broadcast-axis", "dx subtracts each row's s along the wrong axis: the row sum lost its last axis "
             "(keepdim forgotten), so s of shape (..., rows) was broadcast across columns instead of down each "
             "row. Keep the axis (keepdim=True) so s has shape (..., 1).", with_hub(hub.squeeze(-1).unsqueeze(-2))),
        ]
    if y.ndim >= 3:
        alts.append(("broadcast-axis", "dx uses s summed over the first batch axis too: reduce along the last "
                     "axis only.", with_hub((y * dy).sum((0, -1), keepdim=True))))
    N = y.shape[-1]
    alts += [
        ("wrong-values", f"dx uses the mean of y ⊙ ȳ over the row for s, where s = ⟨y, ȳ⟩ is the sum "
         f"(a factor 1/{N} too small).", with_hub(hub / N)),
        ("wrong-values", "dx is y ⊙ ȳ: only the diagonal of the Jacobian was applied; the −s term from the "
         "off-diagonal entries is missing.", with_hub(torch.zeros_like(hub))),
        ("wrong-values", "dx subtracts s without multiplying it by y: every term of x̄ = J ȳ carries a factor "
         "y_j, s included.", _broadcast_to(lambda: dx + y * hub - hub, dx.shape)),
        ("wrong-values", "dx is the backward at softmax(y): y is already the softmax's output — use it as it "
         "is, do not apply softmax to it again.", _backward_reference(torch.softmax(y, -1), dy)),
    ]
    return _distinct([Alternative(c, s, v) for c, s, v in alts if v is not None], dx)


def ce_alternatives(logits: torch.Tensor, target: torch.Tensor, dlogits: torch.Tensor) -> list[Alternative]:
    """Named bugs of ``softmax_cross_entropy_backward(logits, target)``; ``dlogits`` is the right answer."""
    C = logits.shape[-1]
    M = rows_of(logits.shape)
    onehot = F.one_hot(target, C).to(logits.dtype)  # (..., C)

    def softmax_along_wrong_axes(shift_axis_wrong: bool, sum_axis_wrong: bool) -> torch.Tensor | None:
        def value():
            m = logits.amax(-1, keepdim=True)
            e = (logits - (m.squeeze(-1).unsqueeze(-2) if shift_axis_wrong else m)).exp()
            z = e.sum(-1, keepdim=True)
            return e / (z.squeeze(-1).unsqueeze(-2) if sum_axis_wrong else z)
        p = _broadcast_to(value, logits.shape)
        return None if p is None else (p - onehot) / M

    alts: list[tuple[str, str, torch.Tensor | None]] = []
    if M > 1:
        alts += [
            ("scale", f"dlogits is {M} times the right answer, the number of rows: the loss is the mean over "
             f"the {M} rows, so each row's gradient carries a factor 1/{M}.", dlogits * M),
            ("batch-reduction", "dlogits has −1 in every row at every row's target: index the rows and the "
             "targets together (row r, column target[r]), not all rows at all targets.",
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
             "lost its last axis (keepdim forgotten), so row i's sum divided column i. Keep the axis.",
             softmax_along_wrong_axes(False, True)),
            ("broadcast-axis", "dlogits subtracts the row maxima along the wrong axis: the max lost its last "
             "axis (keepdim forgotten), so row i's max shifted column i — and a shift is only free when the "
             "whole row moves together.", softmax_along_wrong_axes(True, False)),
            ("broadcast-axis", "dlogits takes the row max and the row sum along the wrong axis: both lost "
             "their last axis (keepdim forgotten). Keep it, so they broadcast down each row.",
             softmax_along_wrong_axes(True, True)),
        ]
    alts.append(("wrong-values", "dlogits is missing the −onehot term: the target's own entry gets −1/M "
                 "on top of its softmax share.", _broadcast_to(lambda: dlogits + onehot / M, dlogits.shape)))
    target_logp = torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1))  # (..., 1): log y_t
    if bool((target_logp < -700).any()):  # y_t is 0 in float64 on some row: the softmax saturated
        alts.append(("wrong-values", "dlogits vanished (it is zero) where the right answer is of order 1/M: "
                     "the softmax is saturated there, and a chain through −log y with a guard such as "
                     "log(y + eps) loses the gradient. The fused (softmax − onehot)/M does not.",
                     torch.zeros_like(dlogits)))
    return _distinct([Alternative(c, s, v) for c, s, v in alts if v is not None], dlogits)


def _any_target(target: torch.Tensor, C: int) -> torch.Tensor:
    """(M, C) mask, 1 in every row at every class that is some row's target (what p[:, target] -= 1 subtracts)."""
    hit = torch.zeros(C, dtype=F64)
    hit[target.reshape(-1)] = 1.0
    return hit.expand(*target.shape, C)


# ---------------------------------------------------------------------------
# Running a check


def run_checked(name: str, fn: Callable, cases: Sequence[Case], reference: Callable, *,
                output: str, of: str, alternatives: Callable[[Case], list[Alternative]],
                call_wrapper: Callable | None = None) -> None:
    """``run_cases`` with the guards a notebook needs.

    Warnings are silenced while the student's code runs: nbgrader scores a test cell that
    writes to stderr zero, even when every value is right. Where the classifier itself
    fails on a result whose shape is far from the expected one, the shapes are reported
    plainly instead of a traceback of checking code. ``call_wrapper(fn)`` may wrap the
    student's function (to record its allocations, say).
    """
    last: dict = {}

    def call(*args, **kwargs):
        last["args"], last["kwargs"] = args, kwargs
        last["result"] = result = fn(*args, **kwargs)
        return result

    target = call_wrapper(call) if call_wrapper else call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            run_cases(name, target if callable(fn) else fn, cases, reference, outputs=(output,), of=(of,),
                      alternatives=lambda case: {output: alternatives(case)})
        except RuntimeError:
            if "result" not in last:
                raise
            expected = reference(*last["args"], **last["kwargs"])
            (got,) = as_outputs(name, last["result"], (output,))
            if isinstance(got, torch.Tensor) and got.shape != expected.shape:
                raise GradingFailure(
                    "shape", f"{output} has shape {tuple(got.shape)} but must be {tuple(expected.shape)}, the shape of {of}.") from None
            raise


class RecordedCalls:
    """Wrap a function so that every call runs under an AllocationRecorder; keep (inputs, recorder) per call."""

    def __init__(self):
        self.calls: list[tuple[tuple, AllocationRecorder]] = []

    def __call__(self, fn: Callable) -> Callable:
        def recorded(*args, **kwargs):
            rec = AllocationRecorder(ignore=(args, kwargs))
            self.calls.append((args, rec))
            with rec:
                return fn(*args, **kwargs)
        return recorded


# aten's own backward kernels: calling one is autograd by another door.
LIBRARY_BACKWARDS = ("aten._softmax_backward_data", "aten._log_softmax_backward_data", "aten.nll_loss_backward",
                     "aten.nll_loss2d_backward")


def check_no_library_backward(name: str, calls: Sequence[tuple[tuple, AllocationRecorder]]) -> None:
    """Raise ``autograd-in-backward`` when a call ran one of torch's own backward kernels."""
    for _, rec in calls:
        used = [op for op in LIBRARY_BACKWARDS if rec.ops[op]]
        if used:
            raise GradingFailure(
                "autograd-in-backward",
                f"{name} called torch's own backward kernel {used[0]}: that is autograd's answer, not yours — "
                "derive the gradient and write it with ordinary tensor operations.",
            )


def check_no_jacobian(name: str, calls: Sequence[tuple[tuple, AllocationRecorder]], min_n: int = MEMORY_MIN_N) -> None:
    """Raise ``materialized-jacobian`` when a call on rows of N ≥ min_n allocated a tensor of ≥ N² elements."""
    for args, rec in calls:
        y = args[0]
        N = y.shape[-1]
        if N < min_n:
            continue
        big = [a for a in rec.allocations if a.numel >= N * N]
        if big:
            shapes = ", ".join(str(a) for a in big[:3])
            raise GradingFailure(
                "materialized-jacobian",
                f"{name} gives the right values, but on rows of length N = {N} it built a tensor of at least "
                f"N² = {N * N:,} elements: the Jacobian, or something as big. Multiply the Jacobian by ȳ on "
                "paper instead: each row needs only the one scalar s = ⟨y, ȳ⟩.",
                f"allocated: {shapes}\ninputs: {_label(y=y, dy=args[1])}",
            )


@graded
def softmax_jacobian(fn: Callable) -> None:
    """Check ``fn(y) -> J`` of shape (..., N, N) against torch's own Jacobian of softmax."""
    run_checked(
        "softmax_jacobian", fn, _jacobian_cases(), _jacobian_reference, output="J", of="y with one more N axis",
        alternatives=lambda case: jacobian_alternatives(case.args[0], _jacobian_reference(*case.args)),
    )
    print("✓ softmax_jacobian passes the visible checks (one row, batch 1, batch 7, 3-D input)")


@graded
def softmax_backward(fn: Callable) -> None:
    """Check ``fn(y, dy) -> dx`` against torch autograd, and that it builds nothing N×N for N ≥ 256."""
    recorded = RecordedCalls()
    run_checked(
        "softmax_backward", fn, _backward_cases(), _backward_reference, output="dx", of="y",
        alternatives=lambda case: backward_alternatives(*case.args, _backward_reference(*case.args)),
        call_wrapper=recorded,
    )
    check_no_library_backward("softmax_backward", recorded.calls)
    check_no_jacobian("softmax_backward", recorded.calls)
    print(f"✓ softmax_backward passes the visible checks (one row, batch 1, batch 7, 3-D input, "
          f"and no N×N tensor at N = {BACKWARD_SHAPES[-1][-1]})")


@graded
def softmax_cross_entropy_backward(fn: Callable) -> None:
    """Check ``fn(logits, target) -> dlogits`` against autograd through torch.nn.functional.cross_entropy."""
    recorded = RecordedCalls()
    run_checked(
        "softmax_cross_entropy_backward", fn, _ce_cases(), _ce_reference, output="dlogits", of="logits",
        alternatives=lambda case: ce_alternatives(*case.args, _ce_reference(*case.args)),
        call_wrapper=recorded,
    )
    check_no_library_backward("softmax_cross_entropy_backward", recorded.calls)
    print("✓ softmax_cross_entropy_backward passes the visible checks (batch 1, batch 7, 3-D logits, saturated softmax)")
