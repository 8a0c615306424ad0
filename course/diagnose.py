"""Say what kind of bug a gradient has, not only that it is wrong (docs/design.md, "A check cell, in the student's notebook").

A wrong gradient is rarely random. It is the right answer with one mistake applied:
negated, transposed, scaled by a forgotten 1/N, reduced over the wrong axis, or
summed over one sample instead of the batch. So the classifier compares a student's
result with the reference *under each of those transformations*; the one that
matches names the bug.
"""

from __future__ import annotations

import functools
import linecache
import math
import os
import traceback
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch

from . import witness
from .delegation import DelegatedToHelper, forbid_helpers
from .fit import explain as explain_launch
from .registry import hints_of
from .sanitizer import sanitize
from .vocabulary import CLASSES, Alternative, GradingFailure, publish  # noqa: F401 — re-exported: the checks' names for them

# The debugging order: the rungs on which a wrong result is read, in order, the first that explains it naming
# it. Notebook 00 (§6) teaches this order, notebook 01 (Part D) practises it, and :func:`diagnose` and
# :func:`run_cases` follow it (tests/course/test_ladder.py holds the three together). The order runs from the
# check that needs the least to the one that needs the most, and from the narrowest explanation to the widest,
# so that a result two rungs explain gets the name that says more:
LADDER: tuple[str, ...] = ("shape", "sign", "transpose", "scale", "batch-reduction", "wrong-values")
WHY: dict[str, str] = {
    "shape": "needs no value at all; a result of another shape is wrong whatever its numbers. It cannot see a "
             "transpose of a square matrix, whose shape is right.",
    "sign": "one wrong answer, −r, read off one number: the relative error is exactly 2. A sign flip is a "
            "constant factor too, of −1, so it is tried before the factors, which would name it less precisely.",
    "transpose": "one wrong answer, rᵀ, visible only in the values when the matrix is square; a placement, not "
                 "a factor, so no factor can explain it.",
    "scale": "a whole family, c·r for any c ≠ ±1, found in one case. A mean written as a sum (c = batch size) is "
             "right at batch 1 and wrong above it, so it is tried before the batch rung, which would send you "
             "looking for a missing sum instead of a factor.",
    "batch-reduction": "right at batch 1, wrong above it, and none of the above: it needs two cases, and it "
                       "explains every error that vanishes at batch 1, so it comes after every one-case rung.",
    "wrong-values": "none of the above: the derivation itself is off, not one step of it.",
}
# An exercise's own named bugs (its alternatives: a wrong axis, a missing step of its chain) are one wrong answer
# each, narrower than any rung: they are tried right after the shape. Properties (allocations, autograd calls)
# are read only once the values are right.

# Frames from these folders are library code; the rest of a traceback is the student's.
_LIBRARY_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), pkg) + os.sep for pkg in ("course", "autograder", "kernels")
) + (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, os.path.dirname(os.__file__) + os.sep)


@dataclass
class Case:
    """One set of inputs for a check. ``label`` may name shapes, never values or code."""

    label: str
    args: tuple
    batch: int = 1
    kwargs: dict = field(default_factory=dict)


def relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    """How far ``got`` is from ``reference``, measured in units of the reference's norm, in float64.

    A checker knows which side is the truth, so it measures against that side alone, as numerical analysis
    does (and as ``torch.testing`` scales its ``rtol`` by the expected value). This is not notebook 00's Part B,
    which compares two computed gradients, neither of them the truth, and so must treat both alike. An
    all-zero reference compared with itself reads 0.
    """
    got = torch.as_tensor(got).detach().to("cpu", torch.float64)
    reference = torch.as_tensor(reference).detach().to("cpu", torch.float64)
    return (got - reference).norm().item() / max(reference.norm().item(), 1e-300)


def _fmt_index(name: str, index: Sequence[int]) -> str:
    return f"{name}[{', '.join(str(i) for i in index)}]" if len(index) else name


def where_mismatch(name: str, got: torch.Tensor, expected: torch.Tensor, case: str = "") -> str:
    """The first index where ``got`` and ``expected`` differ noticeably, for the message."""
    got = got.detach().to(torch.float64).cpu()
    expected = expected.detach().to(torch.float64).cpu()
    diff = (got - expected).abs()
    scale = max(expected.abs().max().item() if expected.numel() else 0.0, 1e-300)
    bad = (diff > 1e-6 * scale) | ~torch.isfinite(got)
    flat = int(torch.nonzero(bad.flatten())[0]) if bool(bad.any()) else int(diff.flatten().argmax()) if diff.numel() else 0
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), got.shape)] if got.ndim else []
    g = got.flatten()[flat].item() if got.numel() else float("nan")
    e = expected.flatten()[flat].item() if expected.numel() else float("nan")
    lines = [
        f"first mismatch at {_fmt_index(name, index)}: expected {e:.6g}, got {g:.6g}",
        f"relative error of {name}: {relative_error(got, expected):.2e}",
    ]
    if case:
        lines.append(f"inputs: {case}")
    return "\n".join(lines)


def _close(got: torch.Tensor, value: torch.Tensor, tol: float) -> bool:
    return got.shape == value.shape and relative_error(got, value) <= tol


def diagnose(
    name: str,
    got,
    expected: torch.Tensor,
    *,
    tol: float = 1e-7,
    alternatives: Sequence[Alternative] = (),
    batch: int | None = None,
    case: str = "",
    of: str = "",
) -> GradingFailure | None:
    """Return None when ``got`` matches ``expected``; else a :class:`GradingFailure` naming the bug.

    ``of`` names what ``name`` is the gradient of (for shape messages); ``batch``
    is the number of rows in this case, used to recognise a factor equal to it.
    """
    if isinstance(got, torch.Tensor):
        got = got.detach()
    elif expected.ndim == 0 and isinstance(got, (int, float)) and not isinstance(got, bool):
        got = torch.tensor(float(got), dtype=torch.float64)
    else:
        what = "a Python number or 0-d tensor" if expected.ndim == 0 else f"a torch.Tensor of shape {tuple(expected.shape)}"
        return GradingFailure("shape", f"{name} must be {what}, but it is a {type(got).__name__}.")
    expected = expected.detach()

    if got.is_floating_point() and not bool(torch.isfinite(got).all()):
        bad = torch.nonzero(~torch.isfinite(got))[0].tolist() if got.ndim else []
        return GradingFailure(
            "non-finite",
            f"{name} contains NaN or inf (first at {_fmt_index(name, bad)}): look for a division "
            "by zero, a log of zero, or an exp that overflows.",
            f"inputs: {case}" if case else "",
        )
    if got.is_complex() or not (got.is_floating_point() or expected.dtype == got.dtype):
        return GradingFailure("wrong-values", f"{name} has dtype {got.dtype}; expected a real floating-point tensor like {expected.dtype}.")

    same = got.shape == expected.shape
    if same and relative_error(got, expected) <= tol:
        return None
    where = (where_mismatch(name, got, expected, case) if same
             else f"{name} has shape {tuple(got.shape)}; it must be {tuple(expected.shape)}")
    for alt in alternatives:
        if _close(got, alt.value, tol):
            return GradingFailure(alt.cls, alt.sentence, where, alt.topic)
    if not same:
        return _diagnose_shape(name, got, expected, tol, case, f", the shape of {of}" if of else "")
    for rung in LADDER:  # the one-case rungs between the shape (above) and wrong-values, in the ladder's order
        if (sentence := _rung(rung, name, got, expected, tol, batch)) is not None:
            return GradingFailure(rung, sentence, where)
    failure = GradingFailure("wrong-values", f"{name} has the right shape but wrong values.", where)
    failure.generic = True  # no bug matched: run_cases may still name it from the other cases
    return failure


def _constant_factor(got: torch.Tensor, expected: torch.Tensor, tol: float) -> float | None:
    """The c with got ≈ c·expected, when one exists and is not ±1."""
    g = got.to(torch.float64).flatten()
    e = expected.to(torch.float64).flatten()
    ee = float(e @ e)
    if ee == 0.0 or float(g @ g) == 0.0:
        return None
    c = float(g @ e) / ee
    if abs(abs(c) - 1.0) < max(1e-6, tol) or relative_error(g, c * e) > max(tol, 1e-9) * 10:  # within tol of ±1: no factor
        return None
    return c


def _rung(rung: str, name: str, got: torch.Tensor, expected: torch.Tensor, tol: float, batch: int | None) -> str | None:
    """The sentence of ``rung`` when it explains ``got``: the rungs :func:`diagnose` reads on one case. The shape
    comes before them, and batch-reduction, which needs the cases before this one, after them (:func:`batch_refined`)."""
    if rung == "sign" and _close(got, -expected, tol):
        return f"{name} is right up to sign: it is the negative of the right answer."
    if rung == "transpose" and got.ndim >= 2 and got.shape[-1] == got.shape[-2] and _close(got, expected.mT, tol):
        return (f"{name} is the transpose of the right answer: swap the operands' roles so the shapes line up "
                "the other way (it only looked right because the matrix is square).")
    if rung != "scale" or (c := _constant_factor(got, expected, tol)) is None:
        return None
    base = f"{name} is right up to a constant factor: it is {c:.6g} times the right answer."
    if batch and batch > 1:
        if math.isclose(abs(c), batch, rel_tol=1e-6):
            return base + f" That factor is the batch size ({batch}): a mean became a sum (a missing 1/{batch})."
        if math.isclose(abs(c), 1.0 / batch, rel_tol=1e-6):
            return base + f" That factor is 1/the batch size (1/{batch}): a division by the batch size that the loss does not have."
    if math.isclose(abs(c), 2.0, rel_tol=1e-6) or math.isclose(abs(c), 0.5, rel_tol=1e-6):
        return base + " A factor of 2 often means a term counted twice, or a step and a denominator that do not match."
    return base + " Look for a missing normalisation such as 1/N, 1/√d, or a mean written as a sum."


if LADDER[0] != "shape" or max(LADDER.index(r) for r in ("sign", "transpose", "scale")) > LADDER.index("batch-reduction"):
    raise AssertionError("LADDER: the shape comes first, and the one-case rungs before batch-reduction")


def _diagnose_shape(name, got, expected, tol, case, shape_of) -> GradingFailure:
    """The shapes differ and no named bug explains it: say how, and recognise the common ways they come to differ."""
    gs, es = tuple(got.shape), tuple(expected.shape)
    if got.ndim >= 2 and expected.ndim >= 2 and gs == tuple(expected.mT.shape) and _close(got, expected.mT, tol):
        return GradingFailure(
            "transpose",
            f"{name} has shape {gs}, the transpose of {es}{shape_of}: the values are right but placed "
            "transposed: with the shapes written down, only one placement of the operands gives the shape of its input.",
        )
    extra = got.ndim - expected.ndim
    if extra > 0 and gs[extra:] == es and math.prod(gs[:extra]) > 1 and _close(got.sum(dim=tuple(range(extra))), expected, tol):
        return GradingFailure(
            "batch-reduction",
            f"{name} has shape {gs} but must be {es}{shape_of}: it keeps the leading batch "
            f"axes {gs[:extra]}, but every sample contributes to the one {name}: a reduction over the batch is missing.",
        )
    if got.numel() == expected.numel() and [s for s in gs if s != 1] == [s for s in es if s != 1]:
        return GradingFailure(
            "shape",
            f"{name} has shape {gs} but must be {es}{shape_of}: the sizes agree except for a size-1 axis "
            "dropped or added on the way (a reduction that lost its axis, or a broadcast that kept one).",
        )
    return GradingFailure("shape", f"{name} has shape {gs} but must be {es}{shape_of}.", f"inputs: {case}" if case else "")


# ---------------------------------------------------------------------------
# Calling student code


class AutogradInBackward(RuntimeError):
    """Raised inside student code when a hand-written backward reaches for autograd."""


@contextmanager
def forbid_autograd(name: str):
    """Make every autograd entry point raise while ``name`` runs, and remember that it tried.

    Patches the engine call that ``Tensor.backward``, ``torch.autograd.grad`` and
    ``torch.autograd.functional`` share, plus the ``torch.func`` transforms. The
    record survives a student's ``try/except`` around the call.
    """
    import torch.autograd as autograd
    import torch.autograd.forward_ad as forward_ad
    import torch.func as func

    used: list[str] = []

    def refuse(what):
        def refused(*args, **kwargs):
            used.append(what)
            raise AutogradInBackward(f"{name} called {what}: a hand-written backward must not use autograd.")

        return refused

    targets = [
        (autograd, "_engine_run_backward", "autograd (backward/grad)"),
        (autograd, "grad", "torch.autograd.grad"),
        (autograd, "backward", "torch.autograd.backward"),
    ]
    targets += [(func, fn, f"torch.func.{fn}") for fn in ("grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian")]
    targets += [(forward_ad, "make_dual", "forward-mode autograd (torch.autograd.forward_ad.make_dual)")]
    saved = [(obj, attr, getattr(obj, attr), what) for obj, attr, what in targets if hasattr(obj, attr)]
    for obj, attr, _, what in saved:
        setattr(obj, attr, refuse(what))

    def witnessed(m: witness.Measurement) -> None:
        # The grader's re-check: the call ran in another process, whose profiler saw the engine itself
        # (however it was reached) and every aten op (course.witness).
        if m.engine:
            used.append(f"autograd's engine (it evaluated {m.engine[0]})")
        library = [op for op in m.ops if witness.is_library_backward(op)]
        if library:
            used.append(f"forward-mode autograd ({library[0]})" if library[0] in witness.FORWARD_AD_OPS
                        else f"torch's own backward kernel {library[0]}")

    try:
        with witness.watching(witnessed):
            yield used
    finally:
        for obj, attr, original, _ in saved:
            setattr(obj, attr, original)


def student_line(exc: BaseException) -> str:
    """The innermost line of the traceback that belongs to the student, not to a library."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if not os.path.abspath(f.filename).startswith(_LIBRARY_DIRS) and "site-packages" not in f.filename]
    frame = (mine or frames or [None])[-1]
    if frame is None:
        return ""
    line = frame.line or linecache.getline(frame.filename, frame.lineno).strip()
    return f"in {frame.name}, line {frame.lineno}: {line}"


def require_callable(name: str, fn) -> None:
    """``error`` unless ``fn`` can be called: the cell that defines it has not run."""
    if not callable(fn):
        raise GradingFailure("error", f"{name} is not a function (it is a {type(fn).__name__}): run the cell that defines it.")


@contextmanager
def quiet():
    """Silence warnings while student code runs: nbgrader zeroes a test cell that writes to stderr.

    Triton's interpreter runs kernels with numpy, which warns about NaN and overflow.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def delegated_failure(name: str, helpers: Sequence[str]) -> GradingFailure:
    """The diagnosis for a student's function that called a helper the course ships (``course.delegation``)."""
    return GradingFailure(
        "delegated-to-helper",
        f"{name} called {helpers[0]}, a helper the course ships: the course's helpers are there to check your "
        "answer, so the answer itself must come from your own derivation and your own code.",
    )


def _launch_that_does_not_fit(exc: BaseException) -> str | None:
    """course.fit's sentence for a kernel too large for this GPU; None for anything else, and for an exception that
    only looks like Triton's (a student's class can carry any name and module: it must not break the check)."""
    try:
        return explain_launch(exc)
    except Exception:
        return None


def call_student(name: str, fn: Callable, *args, forbid_autograd_use: bool = True, **kwargs):
    """Call a student's function; turn what goes wrong into a diagnosis.

    The stub's ``NotImplementedError`` is ``not-implemented``; any other exception
    is ``error`` with the student's own line; reaching for autograd inside a
    hand-written backward is ``autograd-in-backward``; calling a helper the course
    ships (``course.delegation``) is ``delegated-to-helper``.
    """
    require_callable(name, fn)
    guard = forbid_autograd(name) if forbid_autograd_use else nullcontext([])
    delegated: list[str] = []
    with guard as used, quiet(), sanitize() as sanitized:  # a right answer that happens to warn keeps its points
        try:
            with forbid_helpers() as delegated:  # armed only while the student's code runs
                result = fn(*args, **kwargs)
        except NotImplementedError:
            raise GradingFailure(
                "not-implemented", f"{name} still raises NotImplementedError: replace the stub with your code."
            ) from None
        except (AutogradInBackward, DelegatedToHelper):
            result = None
        except Exception as exc:  # student code may raise anything; report it, never crash the grader
            if delegated:  # a helper's refusal, caught and re-raised as something else
                raise delegated_failure(name, delegated) from None
            why = _launch_that_does_not_fit(exc) or exc  # Triton's OutOfResources, said as one sentence
            raise GradingFailure("error", f"{name} raised {type(exc).__name__}: {why}", student_line(exc)) from None
    if delegated:
        raise delegated_failure(name, delegated)
    if used:
        raise GradingFailure(
            "autograd-in-backward",
            f"{name} called {used[0]}: derive the gradient by hand — the point of the exercise is to not use autograd.",
        )
    raced = sanitized.failure(name)  # a race or an access out of bounds in a kernel it launched (course.sanitizer)
    if raced is not None:
        raise raced
    return result


def as_outputs(name: str, result, output_names: Sequence[str]) -> tuple:
    """Check that a function returned one value per expected output, and return them as a tuple."""
    n = len(output_names)
    if n == 1:
        return (result,)
    if not isinstance(result, (tuple, list)) or len(result) != n:
        got = f"{len(result)} values" if isinstance(result, (tuple, list)) else f"a {type(result).__name__}"
        raise GradingFailure(
            "shape", f"{name} must return {n} gradients ({', '.join(output_names)}), but it returned {got}."
        )
    return tuple(result)


def clone_args(args: tuple) -> tuple:
    """Fresh copies, so that a student's in-place edit cannot change the reference's inputs."""
    return tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)


def vjp(forward: Callable, inputs: Sequence[torch.Tensor], dy: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """The gradient of ⟨forward(*inputs), dy⟩ (of a scalar forward when ``dy`` is None) with respect to every
    input, by torch autograd on fresh leaf copies: the references of the checks."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    with torch.enable_grad():
        grads = torch.autograd.grad(forward(*leaves), leaves, dy)
    return tuple(g.detach() for g in grads)


def seeded(seed: int) -> torch.Generator:
    """A generator for the visible checks' fixed inputs: the same numbers on every run."""
    return torch.Generator().manual_seed(seed)


def randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Standard normal float64 values of ``shape``, drawn from ``gen``."""
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def distinct_from(alts: list[Alternative], expected: torch.Tensor) -> list[Alternative]:
    """The alternatives that differ from the right answer on these inputs: the others name no bug here."""
    return [a for a in alts if a.value.shape != expected.shape or relative_error(a.value, expected) > 1e-9]


# ---------------------------------------------------------------------------
# Running the cases of an exercise, and reading a failure in the light of the cases before it

TRANSPOSED = "a transposed (non-contiguous) view"
BATCH_SUM = "a sum over the batch axis is missing or done in the wrong place (every sample must contribute)."


def transposed_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as ``t``, with its last two axes laid out swapped in memory: a non-contiguous view."""
    return t.mT.contiguous().mT


def strided(args: Sequence) -> bool:
    """Whether any of ``args`` is a tensor of two or more axes that is not contiguous."""
    return any(isinstance(a, torch.Tensor) and a.ndim >= 2 and not a.is_contiguous() for a in args)


def layout_failure(subject: str, why: str, where: str, good: str = "contiguous inputs",
                   bad: str = f"{TRANSPOSED} of the same values") -> GradingFailure:
    """``subject`` is right for ``good`` inputs and wrong for ``bad`` ones: the code depends on the layout."""
    return GradingFailure("wrong-values", f"{subject} is right for {good} and wrong for {bad}: {why}", where)


def layout_refined(failure: GradingFailure, out: str, case: Case, passed: Passed, subject: str = "the code", *,
                   generic: bool = False) -> GradingFailure | None:
    """``out`` wrong for a transposed view once a contiguous case above batch 1 passed: the code depends on the layout
    (``generic``: said only of a failure no named bug explains; else of any but a shape failure)."""
    if passed.contiguous and strided(case.args) and (failure.generic if generic else failure.cls != "shape"):
        return layout_failure(out, f"{subject} depends on how its inputs are laid out in memory, not only on their values.",
                              failure.where)
    return None


def labelled(failure: GradingFailure, label: str) -> GradingFailure:
    """The same failure, saying which inputs: often only the transposed or the 3-D case makes code raise."""
    return GradingFailure(failure.cls, failure.sentence, "\n".join(w for w in (failure.where, f"inputs: {label}") if w))


def batch_refined(failure: GradingFailure, out: str, batch: int, passed_batch1: bool, why: str = BATCH_SUM, *,
                  named: bool = False) -> GradingFailure:
    """A wrong ``out`` right at batch 1 and wrong at ``batch`` > 1, that no named bug explains (``named``: or
    that a named bug of class wrong-values does), told as a batch-axis bug; ``why`` says which."""
    if passed_batch1 and batch > 1 and (failure.generic or named and failure.cls == "wrong-values"):
        return GradingFailure("batch-reduction", f"{out} is right at batch 1 and wrong at batch {batch}: {why}",
                              failure.where)
    return failure


def rerun_above_batch_1(attempt: Callable[[Sequence[Case]], None], cases: Sequence[Case]) -> None:
    """``attempt(cases)``; a shape failure that the cases above batch 1 alone call batch-reduction is that.

    At batch 1 a parameter gradient that kept the batch axis, (1, N), looks exactly like one with a
    size-1 axis kept by ``keepdim=True``; the cases above batch 1 tell the two apart.
    """
    try:
        attempt(cases)
    except GradingFailure as failure:
        if failure.cls == "shape":
            try:
                attempt([c for c in cases if c.batch > 1])
            except GradingFailure as later:
                if later.cls == "batch-reduction":
                    raise later from None
        raise


@dataclass
class Passed:
    """What the cases before the current one showed; a refinement reads a failure in their light. ``name`` and
    ``student``: the exercise and the function under test, for a refinement that probes it on other inputs."""

    name: str = ""
    student: Callable | None = None
    batch1: bool = False  # a case at batch 1 passed
    contiguous: bool = False  # a case above batch 1 whose inputs are contiguous passed
    without_repeats: bool = False  # a case whose indices never repeat passed (a scatter)

    def add(self, case: Case) -> None:
        self.batch1 |= case.batch == 1
        self.contiguous |= case.batch > 1 and not strided(case.args)
        self.without_repeats |= not getattr(case, "repeats", False)


def run_cases(
    name: str,
    fn: Callable,
    cases: Sequence[Case],
    reference: Callable,
    *,
    outputs: Sequence[str],
    of: Sequence[str] = (),
    tol: float = 1e-7,
    alternatives: Callable[[Case], dict[str, list[Alternative]]] | None = None,
    forbid_autograd_use: bool = True,
    refine: Callable[..., GradingFailure] | None = None,
    on_error: Callable[[GradingFailure, Case, Passed], GradingFailure] | None = None,
    bound: Callable[[str, Case], float | None] | None = None,
) -> None:
    """Run ``fn`` on every case and compare each output with ``reference`` on the same inputs; warnings are
    silenced throughout (nbgrader scores a test cell that writes to stderr zero).

    The first wrong output is diagnosed with the named bugs of ``alternatives(case)``, then read in the light
    of the cases before it: ``refine(failure, out, case, got, expected, passed)``, by default :func:`batch_refined`
    (cases should come batch 1 first). An error the code raised says which inputs (``on_error(failure, case, passed)``
    may say more). Where the classifier itself fails on an output of the wrong shape, the shapes are reported.
    ``tol`` may be a function of the case; where ``bound(out, case)`` gives a number, ``out`` is held to that
    absolute bound instead.
    """
    passed = Passed(name, fn)

    with quiet():
        for case in cases:
            expected = reference(*clone_args(case.args), **case.kwargs)
            expected = expected if isinstance(expected, tuple) else (expected,)
            try:
                result = call_student(name, fn, *clone_args(case.args), forbid_autograd_use=forbid_autograd_use,
                                      **case.kwargs)
            except GradingFailure as failure:
                if failure.cls != "error" or not case.label:
                    raise
                raise (on_error(failure, case, passed) if on_error else labelled(failure, case.label)) from None
            got = as_outputs(name, result, outputs)
            case_tol = tol(case) if callable(tol) else tol
            for i, (out, g, e) in enumerate(zip(outputs, got, expected)):
                extra = dict(batch=case.batch, case=case.label, of=of[i] if i < len(of) else "")
                limit = bound(out, case) if bound else None
                try:
                    if limit is not None:
                        if _within(g, e, limit):
                            continue
                        # Diagnosed against the reference with its entries under the bound set to zero: a relative
                        # comparison with a value at the level of rounding would read any wrong entry as "scale".
                        e = torch.where(e.abs() <= limit, torch.zeros_like(e), e)
                    elif diagnose(out, g, e, tol=case_tol, **extra) is None:
                        continue
                    # Wrong: only now build the named bugs, which can cost as much as the reference.
                    alts = alternatives(case).get(out, ()) if alternatives else ()
                    failure = diagnose(out, g, e, tol=case_tol, alternatives=alts, **extra)
                    if failure is None:  # within the relative tolerance, yet not within the bound
                        failure = GradingFailure("wrong-values", f"{out} has the right shape but wrong values.",
                                                 where_mismatch(out, g, e, case.label))
                        failure.generic = True
                except RuntimeError:
                    if not (isinstance(g, torch.Tensor) and g.shape != e.shape):
                        raise
                    shape_of = f", the shape of {extra['of']}" if extra["of"] else ""
                    raise GradingFailure("shape", f"{out} has shape {tuple(g.shape)} but must be "
                                         f"{tuple(e.shape)}{shape_of}.") from None
                if refine:
                    raise refine(failure, out, case, got, expected, passed)
                raise batch_refined(failure, out, case.batch, passed.batch1)
            passed.add(case)


def _within(got, expected: torch.Tensor, limit: float) -> bool:
    """Whether ``got`` is a finite float tensor within ``limit`` of ``expected`` everywhere."""
    if not (isinstance(got, torch.Tensor) and got.shape == expected.shape and got.is_floating_point()):
        return False
    diff = (got.detach().to("cpu", torch.float64) - expected.to(torch.float64)).abs()
    return bool(torch.isfinite(got).all()) and (got.numel() == 0 or diff.max().item() <= limit)


# Classes a hint cannot cover: nothing was derived yet, the code crashed, or it was not the student's derivation.
UNHINTED = frozenset({"not-implemented", "error", "delegated-to-helper", "tampering"})


def hint_for(failure: GradingFailure, table: dict[str, int]) -> int | None:
    """The number of the notebook hint that covers ``failure``, if any, from its exercise's hint table
    (``course.registry``): the failure's ``topic`` (when the check named one), else its class, else ``"*"``."""
    if failure.cls in UNHINTED:
        return None
    for key in (failure.topic, failure.cls, "*"):
        if key in table:
            return table[key]
    return None


def with_hint(failure: GradingFailure, number: int | None) -> GradingFailure:
    """The same failure with a last line that points to the hint covering it (never the fix itself)."""
    if number is None:
        return failure
    pointer = f"→ Hint {number}, just above this test cell, is about this kind of bug."
    where = f"{failure.where}\n{pointer}" if failure.where else pointer
    pointed = GradingFailure(failure.cls, failure.sentence, where, failure.topic)
    pointed.hint = number
    return pointed


def graded(check: Callable) -> Callable:
    """Decorate a public check so a failure shows the diagnosis, not the checker's source lines.

    A failure also points to the hint that covers it, from the hint table of the exercise the check is
    named after (``course.registry``: the visible and the hidden check of an exercise share it).
    """

    @functools.wraps(check)
    def wrapper(*args, **kwargs):
        __tracebackhide__ = True  # IPython hides frames that set this
        try:
            return check(*args, **kwargs)
        except GradingFailure as failure:
            failure = with_hint(failure, hint_for(failure, hints_of(check.__name__)))
            failure.__traceback__ = None
            failure.__cause__ = None
            failure.__context__ = None
            publish(failure)
            raise failure from None

    return wrapper
