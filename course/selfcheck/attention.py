"""Visible checks for 05_attention_recompute: manual attention, the recompute pair, and the D kernel.

Every check runs the student's code on small fixed float64 inputs — batch 1 first, then
batch 7, with T never equal to the head dim d (so a transposed T×T product cannot hide
behind matching shapes) and, but for the T = 256 property case, T not a multiple of the
64-row blocks — and compares with
``torch.nn.functional.scaled_dot_product_attention`` and its autograd for an explicit
upstream gradient ō. A failure raises ``GradingFailure`` whose first line names the bug;
success prints one line.

What is graded besides the values:

- **No autograd in a hand-written backward.** ``ManualAttention.backward`` and
  ``RecomputeAttention.backward`` run with every autograd entry point refused, as do
  ``attention_forward_lse`` and ``attention_backward_recompute``: ``autograd-in-backward``.
- **Nothing T×T.** On a case with T = 256 (and a small head dim, so that every legitimate
  tensor — (B, T, d), (B, T), a tile of at most 64×64 — stays far below T² elements):
  ``attention_forward_lse`` and ``attention_backward_recompute`` run under
  :class:`course.memory.AllocationRecorder`; ``RecomputeAttention``'s forward runs inside
  ``torch.autograd.graph.saved_tensors_hooks`` (and its ``ctx`` is searched for tensors kept
  as attributes), its backward under the recorder; ``recompute_attention`` likewise. Any
  tensor of T² elements or more is ``saved-quadratic-tensor``, even with every value right.
- **Through the Function.** ``manual_attention`` and ``recompute_attention`` must return a
  result whose autograd graph runs through ``ManualAttention`` / ``RecomputeAttention``; when
  that class fails its own check, the function's check says so.
- **The kernel's masks.** ``attention_delta_kernel`` is launched on views into wider buffers
  whose padding (columns past the head dim, rows past ``n_rows``) holds NaN, with ``n_rows``
  not a multiple of ``BLOCK_M``; the output buffer past ``n_rows`` holds a sentinel that an
  unmasked store overwrites.

The named bugs (``*_alternatives``) live here so that the hidden checks
(``autograder.check.attention``) give the same diagnosis with the same words. Each is the
right answer with one mistake applied: the 1/√d forgotten or doubled, S̄ used where S̄ᵀ
belongs, P instead of Pᵀ, the row sum left out or broadcast along the wrong axis, the
gradients returned in the wrong order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..diagnose import (
    Alternative, Case, GradingFailure, as_outputs, call_student, diagnose, forbid_autograd, graded,
    relative_error, run_cases, where_mismatch,
)
from ..autograd_graph import runs_through, saved_for_backward
from ..memory import AllocationRecorder
from ..triton_check import device, namespace_of, pow2_at_least, quiet, run_student

__all__ = [
    "ManualAttention", "manual_attention", "attention_forward_lse", "attention_backward_recompute",
    "RecomputeAttention", "recompute_attention", "attention_delta_kernel",
    "MEMORY_T", "PROPERTY_MIN_T", "attention_case", "sdpa_reference", "lse_reference", "gradient_alternatives",
    "output_alternatives", "backward_case", "check_forward_lse", "check_backward_recompute", "check_function_class", "check_attention_function",
    "DeltaCase", "check_delta_kernel",
]

F32, F64 = torch.float32, torch.float64
SEED = 505
MEMORY_T = 256  # the visible property case: T² = 65,536 elements, far above any tile or (B, T, d) tensor
PROPERTY_MIN_T = 200  # cases with T at least this get the T×T checks (the hidden ones draw T in [200, 320))
GRADS = ("dq", "dk", "dv")
OF = ("q", "k", "v")
KERNEL_TOL = {F32: 1e-5, F64: 1e-10}
SENTINEL = -12345.0  # fills the output past n_rows: no D here takes this value


# ---------------------------------------------------------------------------
# Inputs and references


def attention_case(gen: torch.Generator, B: int, T: int, d: int, note: str = "") -> Case:
    """q, k, v and an upstream gradient ō, all (B, T, d) float64, as one Case."""
    q, k, v, do = (torch.randn(B, T, d, generator=gen, dtype=F64) for _ in range(4))
    label = f"q, k, v, ō of shape ({B}, {T}, {d}); batch {B}" + (f", {note}" if note else "")
    return Case(label, (q, k, v, do), batch=B)


def sdpa_reference(q, k, v, do):
    """(o, dq, dk, dv) from torch's scaled_dot_product_attention and its autograd, float64."""
    leaves = [t.detach().to(F64).requires_grad_(True) for t in (q, k, v)]
    o = F.scaled_dot_product_attention(*leaves)
    dq, dk, dv = torch.autograd.grad(o, leaves, do.to(F64))
    return o.detach(), dq, dk, dv


def lse_reference(q, k):
    """L = logsumexp over keys of the scores q kᵀ/√d: one number per query row, (B, T)."""
    q, k = q.to(F64), k.to(F64)
    return torch.logsumexp(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)


# ---------------------------------------------------------------------------
# Named bugs


def _softmax_pieces(q, k, v, do):
    """The score scale c, the forward's P, P̄ = Ō Vᵀ and the row sums of P̄ ⊙ P; float64."""
    q, k, v, do = (t.to(F64) for t in (q, k, v, do))
    c = q.shape[-1] ** -0.5  # the score scale 1/√d
    P = torch.softmax(c * torch.einsum("bie,bje->bij", q, k), dim=-1)
    P_bar = torch.einsum("bie,bje->bij", do, v)
    rows = torch.einsum("bij,bij->bi", P_bar, P)
    return c, P, P_bar, rows


def output_alternatives(q, k, v) -> dict[str, list[Alternative]]:
    """Named wrong versions of o and lse."""
    q, k, v = (t.to(F64) for t in (q, k, v))
    c = q.shape[-1] ** -0.5  # the score scale 1/√d
    scores = torch.einsum("bie,bje->bij", q, k)
    m = (c * scores).amax(dim=-1)
    ell = torch.exp(c * scores - m[..., None]).sum(dim=-1)
    o_right = torch.softmax(c * scores, dim=-1) @ v
    return {
        "o": [
            Alternative("scale", "o is softmax(QKᵀ)V: the scores must be scaled, S = QKᵀ/√d, before the softmax.",
                        torch.softmax(scores, dim=-1) @ v),
            Alternative("wrong-values", "o is Σ exp(S − m)·V without the division by ℓ = Σ exp(S − m): divide the "
                        "accumulated output by ℓ after the last key block.", o_right * ell[..., None]),
        ],
        "lse": [
            Alternative("scale", "lse is the log-sum-exp of QKᵀ without the 1/√d: L is computed from the scaled "
                        "scores S = QKᵀ/√d, the same S the softmax uses.", torch.logsumexp(scores, dim=-1)),
            Alternative("wrong-values", "lse is the row max m alone: L = m + log ℓ, with ℓ = Σ exp(S − m).", m),
            Alternative("wrong-values", "lse is log ℓ alone: L = m + log ℓ — add the row max back.", torch.log(ell)),
        ],
    }


def gradient_alternatives(q, k, v, do, dq, dk, dv) -> dict[str, list[Alternative]]:
    """Named wrong versions of (dq, dk, dv), given the right ones."""
    c, P, P_bar, rows = _softmax_pieces(q, k, v, do)
    q, k, do = q.to(F64), k.to(F64), do.to(F64)
    dS = P * (P_bar - rows[..., None])
    no_rowsum = P * P_bar
    wrong_axis = P * (P_bar - rows[..., None, :])
    missing_c = ("is √d times too large: S = QKᵀ/√d, so the forward's 1/√d multiplies the gradients of both Q and K.")
    twice_c = "carries 1/√d twice: the scale belongs once in each of Q̄ = c·S̄K and K̄ = c·S̄ᵀQ."
    rowsum = ("is what you get without the −rowsum(P̄ ⊙ P) term: S̄ = P ⊙ (P̄ − rowsum(P̄ ⊙ P)) — every score of a row "
              "moves every probability of that row through the normalisation.")
    axis = ("subtracts rowsum(P̄ ⊙ P) along the wrong axis: it is one number per query row, so keep it a column "
            "(keepdim=True, or [..., None]) and subtract it across its own row.")
    order = "holds the gradient of {other}: return (dq, dk, dv), in the order forward received (q, k, v)."
    return {
        "dq": [
            Alternative("scale", f"dq {missing_c}", dq / c),
            Alternative("scale", f"dq {twice_c}", dq * c),
            Alternative("transpose", "dq uses S̄ᵀ where it needs S̄: Q̄ = c·S̄K — the rows of S̄ belong to queries, so "
                        "Q̄ takes S̄ as it is and K̄ takes S̄ᵀ.", c * dS.mT @ k),
            Alternative("wrong-values", f"dq {rowsum}", c * no_rowsum @ k),
            Alternative("broadcast-axis", f"dq {axis}", c * wrong_axis @ k),
            Alternative("wrong-values", order.format(other="k"), dk),
            Alternative("wrong-values", order.format(other="v"), dv),
        ],
        "dk": [
            Alternative("scale", f"dk {missing_c}", dk / c),
            Alternative("scale", f"dk {twice_c}", dk * c),
            Alternative("transpose", "dk uses S̄ where it needs S̄ᵀ: K̄ = c·S̄ᵀQ — the roles of Q and K are swapped.",
                        c * dS @ q),
            Alternative("wrong-values", f"dk {rowsum}", c * no_rowsum.mT @ q),
            Alternative("broadcast-axis", f"dk {axis}", c * wrong_axis.mT @ q),
            Alternative("wrong-values", order.format(other="q"), dq),
        ],
        "dv": [
            Alternative("transpose", "dv is P Ō; it must be Pᵀ Ō: the rows of P belong to queries and the rows of V "
                        "to keys, so P enters transposed.", P @ do),
            Alternative("wrong-values", order.format(other="q"), dq),
        ],
    }


def _recompute_alternatives(case: Case) -> dict[str, list[Alternative]]:
    q, k, v, o, lse, do = case.args
    _, dq, dk, dv = sdpa_reference(q, k, v, do)
    return gradient_alternatives(q, k, v, do, dq, dk, dv)


# ---------------------------------------------------------------------------
# Properties: nothing T×T saved or allocated


def _tensors_in(obj, depth: int = 0):
    """The tensors in an attribute value (nested lists, tuples, dicts), for what a ctx keeps."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 3 and isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors_in(item, depth + 1)
    elif depth < 3 and isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors_in(item, depth + 1)


def _dims(shape) -> str:
    return "×".join(str(s) for s in shape)


def check_saved(name: str, packed: Sequence[torch.Tensor], node, T: int, label: str) -> None:
    """``saved-quadratic-tensor`` when the forward saved, or kept on ctx, a tensor of ≥ T² elements."""
    limit = T * T
    found = [f"a saved {_dims(t.shape)} tensor" for t in packed if t.numel() >= limit]
    for key, value in (vars(node).items() if hasattr(node, "__dict__") else []):
        found += [f"ctx.{key}, {_dims(t.shape)}" for t in _tensors_in(value) if t.numel() >= limit]
    if found:
        raise GradingFailure(
            "saved-quadratic-tensor",
            f"{name} gives the right values, but its forward keeps {found[0]} for the backward: at T = {T} that is "
            f"at least T² = {limit:,} elements. Save q, k, v, o and lse — O(T) per head — and rebuild each tile of "
            "P = exp(S − L) in the backward.",
            f"kept for the backward: {'; '.join(found[:3])}\ninputs: {label}",
        )


def check_allocations(name: str, recorders: Sequence[AllocationRecorder], T: int, label: str, what: str) -> None:
    """``saved-quadratic-tensor`` when anything recorded holds ≥ T² elements."""
    limit = T * T
    big = [a for rec in recorders for a in rec.allocations if a.numel >= limit]
    if big:
        raise GradingFailure(
            "saved-quadratic-tensor",
            f"{name} gives the right values, but while {what} ran at T = {T} it allocated a tensor of at least "
            f"T² = {limit:,} elements ({big[0]}): work one (BLOCK_Q × BLOCK_K) tile of S at a time, and keep only "
            "(B, T, d) and (B, T) tensors whole.",
            f"allocated: {'; '.join(str(a) for a in big[:3])}\ninputs: {label}",
        )


class RecordedCalls:
    """Wrap a function so that every call runs under an AllocationRecorder; keep (T, recorder) per call."""

    def __init__(self):
        self.calls: list[tuple[int, AllocationRecorder]] = []

    def __call__(self, fn: Callable) -> Callable:
        def recorded(*args, **kwargs):
            rec = AllocationRecorder(ignore=(args, kwargs))
            T = args[0].shape[-2] if args and isinstance(args[0], torch.Tensor) and args[0].ndim >= 2 else 0
            self.calls.append((T, rec))
            with rec:
                return fn(*args, **kwargs)

        return recorded

    def check(self, name: str, cases: Sequence[Case], min_T: int = PROPERTY_MIN_T) -> None:
        for (T, rec), case in zip(self.calls, cases):
            if T >= min_T:
                check_allocations(name, [rec], T, case.label, "it")


# ---------------------------------------------------------------------------
# The two blockwise functions


def check_forward_lse(fn, cases: Sequence[Case], *, reference=None, alternatives=None, min_T: int = PROPERTY_MIN_T) -> None:
    """``fn(q, k, v) -> (o, lse)`` against attention and the log-sum-exp; nothing T×T on cases with T ≥ min_T."""
    name = "attention_forward_lse"
    reference = reference or (lambda q, k, v: (F.scaled_dot_product_attention(q, k, v), lse_reference(q, k)))
    alternatives = alternatives or (lambda case: output_alternatives(*case.args))
    recorded = RecordedCalls()
    target = recorded(fn) if callable(fn) else fn
    qkv_cases = [Case(c.label, c.args[:3], c.batch) for c in cases]
    run_cases(name, target, qkv_cases, reference, outputs=("o", "lse"), of=("q", "q without its last axis"),
              alternatives=alternatives)
    recorded.check(name, qkv_cases, min_T)


def backward_case(case: Case, forward=None) -> Case:
    """(q, k, v, o, lse, ō) for attention_backward_recompute, from a (q, k, v, ō) case."""
    q, k, v, do = case.args
    if forward is None:
        o, lse = sdpa_reference(q, k, v, do)[0], lse_reference(q, k)
    else:
        o, lse = forward(q, k, v)
    return Case(case.label, (q, k, v, o, lse, do), case.batch)


def check_backward_recompute(fn, cases: Sequence[Case], *, reference=None, alternatives=None, min_T: int = PROPERTY_MIN_T) -> None:
    """``fn(q, k, v, o, lse, do) -> (dq, dk, dv)`` against autograd; nothing T×T on cases with T ≥ min_T."""
    name = "attention_backward_recompute"
    reference = reference or (lambda q, k, v, o, lse, do: sdpa_reference(q, k, v, do)[1:])
    recorded = RecordedCalls()
    target = recorded(fn) if callable(fn) else fn
    run_cases(name, target, cases, reference, outputs=GRADS, of=OF, alternatives=alternatives or _recompute_alternatives)
    recorded.check(name, cases, min_T)


# ---------------------------------------------------------------------------
# autograd.Functions and the functions that apply them


def _guarded(name: str, cls: type, used: list, returned: dict, recorders: list | None) -> type:
    """A subclass of the student's Function whose backward may not call autograd.

    It also keeps what backward returned (to diagnose a shape autograd would refuse) and,
    when ``recorders`` is a list, records the backward's allocations.
    """

    def backward(ctx, *grads):
        with forbid_autograd(f"{name}.backward") as tried:
            try:
                if recorders is None:
                    result = cls.backward(ctx, *grads)
                else:
                    rec = AllocationRecorder(ignore=grads)
                    recorders.append(rec)
                    with rec:
                        result = cls.backward(ctx, *grads)
                returned["grads"] = result
                return result
            finally:
                used.extend(tried)

    return type(cls.__name__, (cls,), {"backward": staticmethod(backward), "__module__": cls.__module__})


def _autograd_in_backward(name: str, used: list) -> GradingFailure:
    return GradingFailure(
        "autograd-in-backward",
        f"{name}.backward called {used[0]}: write dq, dk and dv from the formulas — the point of the exercise is a "
        "backward by hand.")


def _with_batch(out: str, failure: GradingFailure, passed_batch1: bool, batch: int) -> GradingFailure:
    """An unexplained wrong value that appears only above batch 1 is named as a batch-axis bug."""
    if getattr(failure, "generic", False) and passed_batch1 and batch > 1:
        return GradingFailure(
            "batch-reduction",
            f"{out} is right at batch 1 and wrong at batch {batch}: something mixes the batch axis into the "
            "products — transpose the last two axes only (.mT), and keep every sum inside one batch entry.",
            failure.where)
    return failure


def _compare(out: str, got, expected, case: Case, of: str, alternatives: Callable[[], dict], passed_batch1: bool) -> None:
    """diagnose one output; build the named bugs only when it is wrong."""
    if diagnose(out, got, expected, batch=case.batch, case=case.label, of=of) is None:
        return
    failure = diagnose(out, got, expected, alternatives=alternatives().get(out, ()), batch=case.batch,
                       case=case.label, of=of)
    raise _with_batch(out, failure, passed_batch1, case.batch)


def _grads_through(name: str, o, leaves, do, returned: dict, expected, label: str, notes: Callable = lambda f: f):
    """Run autograd from o with ō; when autograd refuses what backward returned, diagnose that instead."""
    try:
        with quiet():
            return call_student(name, notes(lambda: torch.autograd.grad(o, leaves, do)), forbid_autograd_use=False)
    except GradingFailure as failure:
        if failure.cls != "error" or "grads" not in returned:
            raise
        got = as_outputs(f"{name}.backward", returned["grads"], GRADS)
        for out, g, e, of in zip(GRADS, got, expected, OF):
            problem = diagnose(out, g, e, case=label, of=of)
            if problem is not None and problem.cls != "wrong-values":
                raise problem from None
        raise


class _StubNotes:
    """Remember the messages of NotImplementedErrors raised through the wrapped calls.

    An unfinished exercise raises ``course.todo()``, whose message names the function still
    to write: that tells a class's own stub apart from a helper it calls.
    """

    def __init__(self):
        self.messages: list[str] = []

    def __call__(self, fn: Callable) -> Callable:
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except NotImplementedError as exc:
                self.messages.append(str(exc))
                raise

        return run

    def unfinished(self, helpers: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
        for helper, part in helpers:
            if any(f"`{helper}`" in message for message in self.messages):
                return helper, part
        return None


def check_function_class(
    name: str, cls, cases: Sequence[Case], *, reference=sdpa_reference, alternatives=None,
    recompute: bool = False, min_T: int = PROPERTY_MIN_T, helpers: Sequence[tuple[str, str]] = (),
) -> None:
    """Check an attention ``torch.autograd.Function`` through autograd on each (q, k, v, ō) case.

    Values of o, dq, dk, dv; no autograd inside backward; with ``recompute``, on cases with
    T ≥ min_T, nothing T×T saved by the forward or allocated by the backward.
    """
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise GradingFailure("error", f"{name} must be a class deriving from torch.autograd.Function (it is a "
                             f"{type(cls).__name__}): run the cell that defines it.")
    alternatives = alternatives or (lambda q, k, v, do, dq, dk, dv: {
        **output_alternatives(q, k, v), **gradient_alternatives(q, k, v, do, dq, dk, dv)})
    notes = _StubNotes()
    try:
        _check_class_cases(name, cls, cases, reference, alternatives, recompute, min_T, notes)
    except GradingFailure as failure:
        if failure.cls == "not-implemented":
            unfinished = notes.unfinished(helpers)
            if unfinished:
                raise GradingFailure("not-implemented", f"{name} runs {unfinished[0]}, which is not written yet: "
                                     f"finish {unfinished[1]} first.") from None
        raise


def _check_class_cases(name, cls, cases, reference, alternatives, recompute, min_T, notes: _StubNotes) -> None:
    passed_batch1 = False
    for case in cases:
        q, k, v, do = case.args
        T = q.shape[-2]
        watch = recompute and T >= min_T
        expected = reference(q, k, v, do)
        used: list[str] = []
        returned: dict = {}
        recorders: list[AllocationRecorder] | None = [] if watch else None
        guarded = _guarded(name, cls, used, returned, recorders)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        with saved_for_backward() as packed:
            o = call_student(name, notes(guarded.apply), *leaves, forbid_autograd_use=False)
        alts = lambda: alternatives(q, k, v, do, *expected[1:])  # noqa: E731
        _compare("o", o, expected[0], case, "q", alts, passed_batch1)
        if o.grad_fn is None:
            raise GradingFailure("error", f"{name}.apply(q, k, v) returned a tensor with no autograd history: return "
                                 f"the o that forward computes, and call the class as {name}.apply(q, k, v).")
        grads = _grads_through(name, o, leaves, do, returned, expected[1:], case.label, notes)
        if used:
            raise _autograd_in_backward(name, used)
        for out, g, e, of in zip(GRADS, grads, expected[1:], OF):
            _compare(out, g, e, case, of, alts, passed_batch1)
        if watch:
            check_saved(name, packed, o.grad_fn, T, case.label)
            check_allocations(name, recorders, T, case.label, f"{name}.backward")
        if case.batch == 1:
            passed_batch1 = True


def check_attention_function(
    name: str, fn, cases: Sequence[Case], *, owner: str, part: str, class_check: Callable | None,
    reference=sdpa_reference, alternatives=None, recompute: bool = False, min_T: int = PROPERTY_MIN_T,
) -> None:
    """Check ``fn(q, k, v) -> o`` and its gradients, which must run through the Function ``owner``.

    When the notebook's ``owner`` fails its own check (``class_check``), that failure is
    reported as this function's, with the part to fix.
    """
    if not callable(fn):
        raise GradingFailure("error", f"{name} is not a function (it is a {type(fn).__name__}): run the cell that defines it.")
    owner_cls = namespace_of(fn).get(owner)
    if class_check is not None and isinstance(owner_cls, type) and issubclass(owner_cls, torch.autograd.Function):
        try:
            class_check(owner_cls)
        except GradingFailure as failure:
            if failure.cls == "not-implemented":
                sentence = f"{name} runs {owner}, which is not finished yet: finish {part} first."
            else:
                sentence = f"{name} runs {owner}, which fails its own check ({part}) — fix it first: {failure.sentence}"
            raise GradingFailure(failure.cls, sentence, failure.where) from None
    alternatives = alternatives or (lambda q, k, v, do, dq, dk, dv: {
        **output_alternatives(q, k, v), **gradient_alternatives(q, k, v, do, dq, dk, dv)})
    passed_batch1 = False
    for case in cases:
        q, k, v, do = case.args
        T = q.shape[-2]
        watch = recompute and T >= min_T
        expected = reference(q, k, v, do)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        with saved_for_backward() as packed:
            o = call_student(name, fn, *leaves)
        alts = lambda: alternatives(q, k, v, do, *expected[1:])  # noqa: E731
        _compare("o", o, expected[0], case, "q", alts, passed_batch1)
        if o.grad_fn is None or not runs_through(o, owner_cls if isinstance(owner_cls, type) else None):
            raise GradingFailure(
                "wrong-values",
                f"{name} must run through {owner}.apply(q, k, v), but the autograd graph of its result holds no "
                f"{owner}: autograd would differentiate something else, not your backward.", f"inputs: {case.label}")
        rec = AllocationRecorder()
        with quiet():
            if watch:
                with rec:
                    grads = call_student(name, lambda: torch.autograd.grad(o, leaves, do), forbid_autograd_use=False)
            else:
                grads = call_student(name, lambda: torch.autograd.grad(o, leaves, do), forbid_autograd_use=False)
        for out, g, e, of in zip(GRADS, grads, expected[1:], OF):
            _compare(out, g, e, case, of, alts, passed_batch1)
        if watch:
            check_saved(name, packed, o.grad_fn, T, case.label)
            check_allocations(name, [rec], T, case.label, "its backward")
        if case.batch == 1:
            passed_batch1 = True


# ---------------------------------------------------------------------------
# The D kernel


@dataclass
class DeltaCase:
    """One launch of the D kernel: O and Ō of shape (n_rows, head_dim) as float64 values, run in ``dtype``."""

    o: torch.Tensor
    do: torch.Tensor
    dtype: torch.dtype
    block_m: int

    @property
    def label(self) -> str:
        n, d = self.o.shape
        return (f"n_rows = {n}, head_dim = {d}, BLOCK_M = {self.block_m}, BLOCK_D = {pow2_at_least(d)}, "
                f"{str(self.dtype).removeprefix('torch.')}")


def delta_alternatives(o: torch.Tensor, do: torch.Tensor) -> list[Alternative]:
    o, do = o.to(F64), do.to(F64)
    return [
        Alternative("wrong-values", "D is the row sum of O alone: D = rowsum(Ō ⊙ O) multiplies the two tiles "
                    "entry by entry first.", o.sum(dim=-1)),
        Alternative("wrong-values", "D is the row sum of Ō alone: D = rowsum(Ō ⊙ O) multiplies the two tiles "
                    "entry by entry first.", do.sum(dim=-1)),
    ]


def _launch_delta(kernel, case: DeltaCase, pad_cols: float, pad_rows: float):
    """Launch on views into wider buffers; return (D, wrote past n_rows, touched inputs, strides)."""
    n, d = case.o.shape
    block_d = pow2_at_least(d)
    dev = device()
    views, buffers, strides = [], [], []
    for i, values in enumerate((case.o, case.do)):
        buf = torch.full((n + case.block_m + 1, block_d + 3 + 2 * i), pad_cols, dtype=case.dtype, device=dev)
        buf[n:] = pad_rows  # rows past n_rows
        buf[:n, :d] = values.to(dev, case.dtype)
        buffers.append(buf)
        views.append(buf[:n, :d])
        strides.append(buf.stride(0))
    before = [b.clone() for b in buffers]
    out = torch.full((n + case.block_m + 2,), SENTINEL, dtype=case.dtype, device=dev)
    grid = ((n + case.block_m - 1) // case.block_m,)
    run_student("attention_delta_kernel", lambda: kernel[grid](
        views[0], views[1], out[:n], strides[0], strides[1], n, d, BLOCK_M=case.block_m, BLOCK_D=block_d))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    same = [bool(((b == b0) | (torch.isnan(b) & torch.isnan(b0))).all()) for b, b0 in zip(buffers, before)]
    touched = [ptr for ptr, ok in zip(("O_ptr", "DO_ptr"), same) if not ok]
    wrote_past = bool((out[n:] != SENTINEL).any())
    return out[:n].detach().to("cpu", F64), wrote_past, touched, strides


def _is_kernel(obj) -> bool:
    return hasattr(obj, "__getitem__") and hasattr(obj, "run")


def check_delta_case(kernel, case: DeltaCase, expected: torch.Tensor) -> None:
    n, d = case.o.shape
    block_d = pow2_at_least(d)
    tol = KERNEL_TOL[case.dtype]
    got, wrote_past, touched, strides = _launch_delta(kernel, case, math.nan, math.nan)
    label = f"{case.label}; rows of O {strides[0]} apart, of Ō {strides[1]} apart"
    if touched:
        raise GradingFailure("wrong-values", f"attention_delta_kernel wrote into its input {', '.join(touched)}: O and "
                             "Ō are read-only; store D through Delta_ptr.", f"inputs: {label}")
    failure = diagnose("D", got, expected, tol=tol, alternatives=delta_alternatives(case.o, case.do), case=label)
    if failure is None:
        if wrote_past:
            raise GradingFailure(
                "wrong-values",
                f"attention_delta_kernel writes past the end of D: the last program's block covers rows up to "
                f"{((n + case.block_m - 1) // case.block_m) * case.block_m - 1}, but there are only n_rows = {n}; the "
                "extra stores land on memory that belongs to something else.",
                f"entries ≥ {n} of Delta: the store needs mask=rows < n_rows\ninputs: {label}")
        return
    # Wrong values: padding an unmasked load cannot hurt tells a missing column mask apart.
    second, wrote_past_too, _, _ = _launch_delta(kernel, case, 0.0, math.nan)
    if diagnose("D", second, expected, tol=tol) is None:
        cls = "non-finite" if not bool(torch.isfinite(got).all()) else "wrong-values"
        store = " The store needs its mask too: rows < n_rows." if wrote_past or wrote_past_too else ""
        raise GradingFailure(
            cls,
            f"attention_delta_kernel reads past the end of each row: lanes {d}…{block_d - 1} of the block are not part "
            f"of a row of head_dim = {d}, and what they read (NaN here, as memory after a row may hold anything) "
            f"reached D.{store}",
            f"columns ≥ {d}: the loads need mask=cols < head_dim (with the row mask), and other=0.0 so the padding "
            f"adds nothing\n" + where_mismatch("D", got, expected, label))
    if n > case.block_m and diagnose("D", got[:case.block_m], expected[:case.block_m], tol=tol) is None:
        raise GradingFailure(
            "wrong-values",
            f"D is right for the first block of {case.block_m} rows and wrong after it: program p handles rows "
            "p·BLOCK_M … p·BLOCK_M + BLOCK_M − 1, with p = tl.program_id(0).",
            where_mismatch("D", got, expected, label))
    if n > 1 and diagnose("D", got[:1], expected[:1], tol=tol) is None:
        raise GradingFailure(
            "wrong-values",
            "D is right on row 0 and wrong after it: row r of O starts at O_ptr + r·o_row_stride (and of Ō at "
            f"DO_ptr + r·do_row_stride) — here the rows sit inside wider buffers, so head_dim ({d}) is not the "
            "distance between them.", where_mismatch("D", got, expected, label))
    err = relative_error(got, expected)
    if case.dtype == F64 and err < 1e-5 and failure.cls == "wrong-values" and bool(torch.isfinite(got).all()):
        raise GradingFailure(
            "wrong-values",
            f"D is right only to about float32 precision (relative error {err:.1e}) for float64 inputs: part of the "
            "kernel computes in float32. Keep the loaded dtype.", where_mismatch("D", got, expected, label))
    raise failure


def check_delta_kernel(kernel, cases: Sequence[DeltaCase], reference: Callable) -> None:
    if not _is_kernel(kernel):
        if callable(kernel):
            raise GradingFailure("error", "attention_delta_kernel is not a Triton kernel: keep the @triton.jit line "
                                 "above its def.")
        raise GradingFailure("error", f"attention_delta_kernel is a {type(kernel).__name__}, not a kernel: run the "
                             "cell that defines it.")
    for case in cases:
        check_delta_case(kernel, case, reference(case.o, case.do))


# ---------------------------------------------------------------------------
# The visible checks


def _gen(salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(SEED + salt)


def _small_cases(salt: int) -> list[Case]:
    gen = _gen(salt)
    return [
        attention_case(gen, 1, 6, 4),  # batch 1
        attention_case(gen, 1, 11, 3),  # batch 1, T not a power of two
        attention_case(gen, 7, 9, 5),  # batch 7 (prime)
    ]


def _blockwise_cases(salt: int) -> list[Case]:
    gen = _gen(salt)
    return [
        attention_case(gen, 1, 11, 3, "T below one block"),  # batch 1
        attention_case(gen, 1, 70, 6, "a second, short block of keys and queries"),  # T = 64 + 6
        attention_case(gen, 7, 37, 5),  # batch 7 (prime)
        attention_case(gen, 2, MEMORY_T, 8, "T² = 65,536 elements"),  # the property checks run here
    ]


@graded
def ManualAttention(cls) -> None:  # noqa: N802 — named after the exercise it checks
    """o and the three gradients through autograd, against SDPA; no autograd inside backward."""
    check_function_class("ManualAttention", cls, _small_cases(1))
    print("✓ ManualAttention passes the visible checks (o, dq, dk, dv at batch 1 and 7, T ≠ d, "
          "no autograd in backward)")


@graded
def manual_attention(fn) -> None:
    """manual_attention through ManualAttention: o and the gradients against SDPA."""
    check_attention_function("manual_attention", fn, _small_cases(2), owner="ManualAttention", part="Part A",
                             class_check=lambda cls: check_function_class("ManualAttention", cls, _small_cases(1)))
    print("✓ manual_attention passes the visible checks (o, dq, dk, dv at batch 1 and 7, through ManualAttention)")


@graded
def attention_forward_lse(fn) -> None:
    """(o, lse) against SDPA and torch.logsumexp; nothing T×T allocated at T = 256."""
    check_forward_lse(fn, _blockwise_cases(3))
    print(f"✓ attention_forward_lse passes the visible checks (o and lse at batch 1 and 7, T = 11, 37, 70, "
          f"and nothing T×T allocated at T = {MEMORY_T})")


@graded
def attention_backward_recompute(fn) -> None:
    """(dq, dk, dv) against SDPA's autograd from o and lse; nothing T×T allocated at T = 256."""
    check_backward_recompute(fn, [backward_case(c) for c in _blockwise_cases(4)])
    print(f"✓ attention_backward_recompute passes the visible checks (dq, dk, dv at batch 1 and 7, T = 11, 37, 70, "
          f"and nothing T×T allocated at T = {MEMORY_T})")


_RECOMPUTE_HELPERS = (("attention_forward_lse", "Part C"), ("attention_backward_recompute", "Part D"))


@graded
def RecomputeAttention(cls) -> None:  # noqa: N802 — named after the exercise it checks
    """o and the gradients through autograd; nothing T×T saved or allocated; no autograd in backward."""
    check_function_class("RecomputeAttention", cls, _blockwise_cases(5), recompute=True, helpers=_RECOMPUTE_HELPERS)
    print(f"✓ RecomputeAttention passes the visible checks (o, dq, dk, dv at batch 1 and 7; nothing T×T saved or "
          f"allocated at T = {MEMORY_T}; no autograd in backward)")


@graded
def recompute_attention(fn) -> None:
    """recompute_attention through RecomputeAttention; nothing T×T saved or allocated."""
    check_attention_function(
        "recompute_attention", fn, _blockwise_cases(6), owner="RecomputeAttention", part="Part E",
        class_check=lambda cls: check_function_class("RecomputeAttention", cls, _blockwise_cases(5), recompute=True,
                                                     helpers=_RECOMPUTE_HELPERS),
        recompute=True)
    print(f"✓ recompute_attention passes the visible checks (o, dq, dk, dv at batch 1 and 7, through "
          f"RecomputeAttention; nothing T×T saved or allocated at T = {MEMORY_T})")


def _delta_reference(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    return (o.to(F64) * do.to(F64)).sum(dim=-1)


@graded
def attention_delta_kernel(kernel) -> None:
    """D = rowsum(Ō ⊙ O) from views into NaN-padded buffers; nothing written past n_rows."""
    gen = _gen(7)
    cases = []
    for n, d, dtype, block_m in [(13, 5, F32, 16), (37, 12, F32, 16), (37, 12, F64, 16), (91, 20, F64, 32)]:
        o, do = (torch.randn(n, d, generator=gen, dtype=F64) for _ in range(2))
        cases.append(DeltaCase(o, do, dtype, block_m))
    check_delta_kernel(kernel, cases, _delta_reference)
    print("✓ attention_delta_kernel passes the visible checks (n_rows 13, 37, 91 with BLOCK_M 16 and 32; head dims "
          "5, 12, 20; float32 and float64; NaN padding; nothing written past n_rows)")
