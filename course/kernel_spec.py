"""The Triton-kernel spec type: what a kernel exercise declares, and the one runner that checks it.

A kernel runs on views into wider buffers (:class:`Guarded`): an input's padding holds NaN (memory past a tensor may
hold anything), an output's a sentinel that must stay. :meth:`KernelSpec.check` launches each case, refuses a write
into an input, diagnoses each output against its reference with the lesson's named bugs, refuses a store past an
output's end, and reads a wrong value in the light of the spec's refinements: named objects that may launch the
kernel again (other padding, contiguous tensors, float32) and return a sharper diagnosis. Half-precision cases go
to the spec's ``half`` rule when it has one; last comes the lesson's gradcheck through the kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from .autograd_graph import runs_through, saved_for_backward
from .diagnose import (
    Alternative,
    GradingFailure,
    as_outputs,
    batch_refined,
    call_student,
    diagnose,
    layout_failure,
    relative_error,
    require_callable,
    where_mismatch,
)
from .memory import AllocationRecorder
from .triton_check import (
    autograd_in_backward,
    device,
    guarded_function,
    launch,
    namespace_of,
    relayed,
    require_function,
    require_kernel,
    run_student,
    unchanged,
)

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
TOL = {F32: 1e-5, F64: 1e-10}  # relative error allowed per dtype: the kernels are exact up to summation order
SENTINEL = -12345.0  # fills the outputs' padding: no output of a kernel here takes this value


class Guarded:
    """A tensor inside a wider buffer on the kernels' device: ``view`` holds ``values`` (a tensor, or a shape to leave
    at ``fill``) in ``dtype``; the buffer is ``extra[i]`` longer along axis i and holds ``fill`` elsewhere.
    ``transposed``: the buffer's last two axes are swapped in memory, so the view's last axis is not of stride 1."""

    def __init__(self, values, extra: Sequence[int], fill: float, dtype: torch.dtype, transposed: bool = False):
        shape = tuple(values.shape) if isinstance(values, torch.Tensor) else tuple(values)
        full = [s + e for s, e in zip(shape, extra)]
        if transposed:
            full[-2:] = full[-1], full[-2]
        self.buf = torch.full(full, fill, dtype=dtype, device=device())
        self.view = (self.buf.mT if transposed else self.buf)[tuple(slice(0, s) for s in shape)]
        if isinstance(values, torch.Tensor):
            self.view.copy_(values.to(self.buf.device, dtype))
        self.before = self.buf.clone()

    def spilled(self) -> bool:
        """Whether anything outside the view changed (NaN kept as NaN counts as unchanged)."""
        outside = torch.ones(self.buf.shape, dtype=torch.bool, device=self.buf.device)
        outside.as_strided(self.view.shape, self.view.stride(),
                           self.view.storage_offset() - self.buf.storage_offset()).fill_(False)
        return not unchanged(self.buf[outside], self.before[outside])

    def got(self) -> torch.Tensor:
        """The view's values, float64 on the CPU."""
        return self.view.detach().to("cpu", F64).clone()


def launch_rows(name: str, kernel, inputs: dict[str, torch.Tensor], *, dtype: torch.dtype, block: int, width: int,
                fill: float) -> tuple[torch.Tensor, bool, list[str], list[int]]:
    """``kernel[(rows,)](*inputs, out, *row strides, n_cols, BLOCK=block)``, the (rows, n) ``inputs`` (by pointer) in
    rows ``width + 3 + 2i`` apart (odd, different strides) padded with ``fill``, the output ``width + 2`` apart padded
    with the sentinel: (the output, written past a row's end?, the pointers written into, the row strides)."""
    rows, n = next(iter(inputs.values())).shape
    ins = {p: Guarded(x, (0, width + 3 + 2 * i - n), fill, dtype) for i, (p, x) in enumerate(inputs.items())}
    out = Guarded((rows, n), (0, width + 2 - n), SENTINEL, dtype)
    strides = [g.view.stride(0) for g in (*ins.values(), out)]
    args = [*(g.view for g in ins.values()), out.view, *strides, n]
    touched = launch(name, lambda: kernel[(rows,)](*args, BLOCK=block), {p: g.buf for p, g in ins.items()})
    return out.got(), out.spilled(), touched, strides


@dataclass(frozen=True)
class Launch:
    """One launch: each output's values (float64, CPU), the inputs written into, the outputs written past their end
    (what changed, for the message), and the label of the launch."""

    got: dict[str, torch.Tensor]
    touched: list[str]
    wrote: list[str]
    label: str


@dataclass(frozen=True)
class Wrong:
    """What a refinement reads: a launch whose output ``out`` is wrong, and its diagnosis ``failure``."""

    spec: KernelSpec
    kernel: Any
    case: Any
    run: Launch
    expected: dict[str, torch.Tensor]
    out: str
    failure: GradingFailure
    tol: float

    @property
    def got(self) -> torch.Tensor:
        return self.run.got[self.out]

    @property
    def finite(self) -> bool:
        return all(bool(torch.isfinite(g).all()) for g in self.run.got.values())

    def right(self, run: Launch, rows: slice = slice(None)) -> bool:
        """Whether every output of ``run`` (its ``rows`` only) is within tolerance."""
        return all(diagnose(out, run.got[out][rows], e[rows], tol=self.tol) is None for out, e in self.expected.items())

    def mismatch(self) -> str:
        return where_mismatch(self.out, self.got, self.expected[self.out], self.run.label)


Refinement = Callable[[Wrong], "GradingFailure | None"]


@dataclass(frozen=True)
class ReadsPastEnd:
    """Wrong on NaN padding, right when launched again with ``fill`` there (harmless values): loads past the end of
    a row reached the result. ``sentence(wrong, again)`` and ``note`` say so; ``only``: the diagnosis classes it may
    replace (any, when empty); ``variant``: (keyword, value) pairs for the launch again (contiguous tensors, say)."""

    fill: float
    sentence: Callable[[Wrong, Launch], str]
    note: Callable[[Wrong, Launch], str]
    only: tuple[str, ...] = ()
    variant: tuple[tuple[str, Any], ...] = ()

    def __call__(self, wrong: Wrong) -> GradingFailure | None:
        if self.only and wrong.failure.cls not in self.only:
            return None
        again = wrong.spec.launch(wrong.kernel, wrong.case, self.fill, **dict(self.variant))
        if not wrong.right(again):
            return None
        return GradingFailure("wrong-values" if wrong.finite else "non-finite", self.sentence(wrong, again),
                              f"{self.note(wrong, again)}\n{wrong.mismatch()}")


@dataclass(frozen=True)
class RightOnFirstRows:
    """Right on the first ``rows`` rows (a number, or one per case) and wrong after them: a program found its rows
    by the wrong distance. ``sentence(wrong)`` names the bug."""

    rows: int | Callable[[Any], int]
    sentence: Callable[[Wrong], str]

    def __call__(self, wrong: Wrong) -> GradingFailure | None:
        first = self.rows if isinstance(self.rows, int) else self.rows(wrong.case)
        if wrong.got.shape[0] <= first or not wrong.right(wrong.run, slice(0, first)):
            return None
        return GradingFailure("wrong-values", self.sentence(wrong), wrong.mismatch())


@dataclass(frozen=True)
class Float32Only:
    """A float64 launch right only to float32 precision: ``why`` says where that comes from.
    ``classes``: the diagnoses it may replace (None: any); ``generic``: only one that named no bug; ``every``: any
    output so, not only the first wrong one; ``topic``: with one, the sentence is ``why`` after the output's name."""

    why: str
    given: str = "float64 inputs"
    classes: tuple[str, ...] | None = ("wrong-values",)
    topic: str | None = None
    generic: bool = False
    every: bool = False

    def __call__(self, wrong: Wrong) -> GradingFailure | None:
        f = wrong.failure
        if (wrong.case.dtype != F64 or (self.classes is not None and f.cls not in self.classes)
                or (self.generic and not f.generic)):
            return None
        for out in wrong.expected if self.every else [wrong.out]:
            got, expected = wrong.run.got[out], wrong.expected[out]
            if not bool(torch.isfinite(got).all()) or not wrong.tol < relative_error(got, expected) < 1e-5:
                continue
            if self.topic is not None:
                return GradingFailure("wrong-values", f"{out} {self.why}", f.where, self.topic)
            return GradingFailure("wrong-values", f"{out} is right only to about float32 precision (relative error "
                                  f"{relative_error(got, expected):.1e}) for {self.given}: {self.why}",
                                  where_mismatch(out, got, expected, wrong.run.label))
        return None


def float16_spacings(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|got − expected| in units of float16's spacing at ``expected`` (2⁻²⁴ among the subnormals), elementwise."""
    exponent = torch.floor(torch.log2(expected.abs().clamp_min(2.0 ** -14)))
    return (got - expected).abs() / torch.exp2(exponent - 10)


@dataclass(frozen=True)
class HalfSpacings:
    """A float16 launch held to ``spacings`` float16 spacings of the float64 answer (float32 arithmetic and one
    rounding at the store give 0.5). Outside it, the same values run in float32: a kernel wrong there gets that
    diagnosis; right there, it did its arithmetic in float16 (``half-accumulation``): ``statistic`` (or the case's own)
    says which."""

    spacings: float
    statistic: str

    def __call__(self, spec: KernelSpec, kernel, case) -> None:
        run = spec.launch(kernel, case)
        (out, got), = run.got.items()
        expected = spec.reference(case)[out]
        off = float16_spacings(got, expected)
        worst = off.nan_to_num(math.inf).max().item() if off.numel() else 0.0
        if worst <= self.spacings and not run.wrote and not run.touched:
            return
        spec.check_case(kernel, replace(case, dtype=F32))
        if worst <= self.spacings:  # right in float32, and within the bound: the float16 run wrote what it must not
            raise GradingFailure("wrong-values", f"{spec.name} wrote outside {out}'s row in float16 only.",
                                 f"inputs: {run.label}")
        index = tuple(int(i) for i in torch.nonzero(off == off.max())[0])
        raise GradingFailure(
            "half-accumulation",
            f"{spec.name} is right on these values in float32, but its float16 {out} is off by up to {worst:.1f} "
            f"float16 spacings where arithmetic in float32 and one rounding at the store give at most 0.5: "
            f"{getattr(case, 'statistic', '') or self.statistic}. Loads and stores may keep the tensors' dtype; the "
            "arithmetic between them may not.",
            f"first worst at {out}[{index[0]}, {index[1]}]: expected {expected[index].item():.6g}, "
            f"got {got[index].item():.6g}\ninputs: {run.label}")


@dataclass(frozen=True)
class Gradcheck:
    """The float64 gradcheck, as a check's last case: what the spec's gradcheck takes, and the label of a failure."""

    inputs: Any
    label: str


@dataclass(frozen=True)
class Step:
    """A step of a :class:`FunctionSpec` check between its cases (a kernel's own check, a float16 rule): ``run`` on
    the guarded Function (the student's forward, a backward that may not call autograd); after it, as after a case,
    the backward must not have used autograd."""

    run: Callable[[type], None]


def by_dtype(case) -> float:
    return TOL[case.dtype]


def no_alternatives(case) -> dict[str, list[Alternative]]:
    return {}


def no_extra(case) -> tuple:
    return ()


def on_host(t):
    """A result on the CPU beside its float64 reference: the diagnosis ladder multiplies the two."""
    return t.detach().cpu() if isinstance(t, torch.Tensor) else t


@dataclass(frozen=True, kw_only=True)
class KernelSpec:
    """One Triton-kernel exercise: how a case is launched, its references, named bugs and refinements."""

    name: str
    launch: Callable[..., Launch]  # (kernel, case, fill=NaN, **variant) -> Launch, on guarded buffers
    reference: Callable[[Any], dict[str, torch.Tensor]]  # case -> each output's right value, float64
    read_only: str  # why its inputs are read-only, after "{name} wrote into its input …: "
    past_end: Callable[[KernelSpec, Any, Launch], tuple[str, str]]  # (sentence, what changed) for a store past the end
    alternatives: Callable[[Any], dict[str, list[Alternative]]] = no_alternatives
    tol: Callable[[Any], float] = by_dtype
    refinements: tuple[Refinement, ...] = ()
    half: Callable[[KernelSpec, Any, Any], None] | None = None  # the rule for float16 and bfloat16 cases, if its own
    gradcheck: Callable[[Any, Any], bool] | None = None  # (kernel, Gradcheck.inputs) -> whether the kernel passes
    gradcheck_fails: str = ""  # what a failed gradcheck means, after "{name} fails the float64 gradcheck: "
    missing: str = "keep the @triton.jit line above its def."  # what to do about a plain function
    unwritten: str = ""  # when given, why an output row the launch left at the sentinel is refused before its values
    wrote_first: bool = False  # a store past an output's end is refused before the values (it may have made them wrong)

    def check(self, kernel, cases: Sequence, alternatives: Callable | None = None) -> None:
        """Every case in order (a :class:`Gradcheck` runs the gradcheck); ``alternatives`` in place of the spec's own."""
        spec = self if alternatives is None else replace(self, alternatives=alternatives)
        require_kernel(self.name, kernel, self.missing)
        for case in cases:
            if not isinstance(case, Gradcheck):
                spec.check_case(kernel, case)
            elif not self.gradcheck(kernel, case.inputs):
                raise GradingFailure("wrong-values", f"{self.name} fails the float64 gradcheck: {self.gradcheck_fails}",
                                     f"inputs: {case.label}")

    def check_case(self, kernel, case) -> None:
        """Launch one case and raise a GradingFailure that says what is wrong and where."""
        if self.half is not None and case.dtype in (F16, BF16):
            return self.half(self, kernel, case)
        run = self.launch(kernel, case)
        if run.touched:
            raise GradingFailure("wrong-values", f"{self.name} wrote into its input {', '.join(run.touched)}: "
                                 f"{self.read_only}", f"inputs: {run.label}")
        for out, got in run.got.items() if self.unwritten else ():
            rows = [r for r in range(got.shape[0]) if bool((got[r] == SENTINEL).all())]
            if rows:
                raise GradingFailure("wrong-values", f"{self.name} never wrote {out} for row(s) {rows}: {self.unwritten}",
                                     f"inputs: {run.label}")
        expected, tol = self.reference(case), self.tol(case)
        wrong = [out for out, e in expected.items() if diagnose(out, run.got[out], e, tol=tol) is not None]
        if run.wrote and (self.wrote_first or not wrong):
            sentence, changed = self.past_end(self, case, run)
            raise GradingFailure("wrong-values", sentence, "\n".join(filter(None, (changed, f"inputs: {run.label}"))))
        if not wrong:
            return
        out = wrong[0]
        failure = diagnose(out, run.got[out], expected[out], tol=tol, alternatives=self.alternatives(case).get(out, ()),
                           case=run.label)
        context = Wrong(self, kernel, case, run, expected, out, failure, tol)
        for refinement in self.refinements:
            better = refinement(context)
            if better is not None:
                raise better
        raise failure


# ---------------------------------------------------------------------------
# The autograd.Function spec type


@dataclass
class Kept:
    """What a check keeps across a Function's cases: what each backward returned, its recorders, the batches passed."""

    returned: list = field(default_factory=list)
    recorders: list = field(default_factory=list)
    passed: list = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class FunctionSpec:
    """One autograd.Function exercise with a hand-written backward, run as a subclass whose backward may not call
    autograd (``guarded_function``): the forward's values, an autograd history, what it saved, the gradients through
    autograd for each layout of ȳ, and (a :class:`Gradcheck` case) torch.autograd.gradcheck in float64."""

    name: str
    args: tuple[str, ...] = ("x",)  # what apply takes, for messages
    leaves: Callable[[Any], tuple[torch.Tensor, ...]]  # case -> the inputs, requiring grad, on the kernels' device
    extra: Callable[[Any], tuple] = no_extra  # case -> the arguments after them that take no gradient
    reference: Callable[[Any], tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]  # (forward, gradients)
    alternatives: Callable[[Any], dict[str, list[Alternative]]] = no_alternatives  # forward and gradients together
    of: str = "x"  # what the outputs are of, for shape messages
    no_history: str  # what to do when apply's result has no autograd history, after "… returned a tensor with no…: "
    hand_written: str  # why the backward may not call autograd
    upstream: Callable[[Any], list[tuple[str, torch.Tensor]]]  # case -> ȳ by layout, contiguous first
    layout_why: str  # why a non-contiguous ȳ goes wrong, for a backward right on the contiguous one only
    saved: Callable[[Any, list, tuple, torch.Tensor, str], None] | None = None  # (case, packed, leaves, y, label)
    pieces: Callable[[str, Any], None] | None = None  # (name, cls): check the kernels cls launches, first
    tol: Callable[[Any], float] = by_dtype
    raw: Callable[[Any, Any, str], None] | None = None  # (case, what backward returned, label): before autograd saw it
    of_each: dict[str, str] | None = None  # what each output is of, in place of ``of``
    batch_why: str = ""  # when given: an output right at batch 1 (``case.batch``) and wrong after it is this bug
    returned: bool = False  # whether a backward result that autograd refuses is diagnosed by its gradients' shapes
    helpers: tuple[tuple[str, str], ...] = ()  # (helper, Part) the Function runs: a stub there is told as theirs
    watch: Callable[[Any], bool] | None = None  # case -> whether to check its memory, each backward recorded
    memory: Callable[..., None] | None = None  # (name, case, packed, y, recorders, what ran), after the gradients

    def check(self, cls, cases: Sequence, alternatives: Callable | None = None) -> None:
        """Every case in order (a :class:`Gradcheck` of the inputs runs torch's gradcheck, a :class:`Step` its own
        run); the first failure is raised."""
        spec = self if alternatives is None else replace(self, alternatives=alternatives)
        require_function(self.name, cls)
        if self.pieces is not None:
            self.pieces(self.name, cls)
        used: list[str] = []
        kept = Kept()
        guarded = guarded_function(self.name, cls, used, kept.returned, kept.recorders if self.watch else None)
        for case in cases:
            if isinstance(case, Gradcheck):
                self._gradcheck(guarded, case, used)
            elif isinstance(case, Step):
                case.run(guarded)
                self._refuse_autograd(used)
            else:
                spec._check_case(guarded, case, used, kept)

    def check_applied(self, name: str, fn, cases: Sequence, owner_cases: Sequence, part: str) -> None:
        """``fn``, whose result must run through this Function: the Function's own check first (on ``owner_cases``),
        its failure told as ``name``'s with ``part`` to fix; then the values and gradients through ``fn``."""
        require_callable(name, fn)
        owner = namespace_of(fn).get(self.name)
        if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
            try:
                self.check(owner, owner_cases)
            except GradingFailure as failure:
                raise relayed(failure, f"{name} runs {self.name}", part, "not finished yet") from None
        kept = Kept()
        for case in cases:
            self._check_case(None, case, [], kept, (name, fn, owner if isinstance(owner, type) else None))

    def _run(self, name: str, fn: Callable, *args, relay: bool = True):
        """``run_student``; a stub raised inside one of ``helpers`` is told as that helper's, with its Part: the
        message of ``course.todo()`` names the function still to write."""
        stubs: list[str] = []

        def noting(*args):
            try:
                return fn(*args)
            except NotImplementedError as exc:
                stubs.append(str(exc))
                raise

        try:
            return run_student(name, noting, *args)
        except GradingFailure as failure:
            unfinished = [(h, part) for h, part in self.helpers if relay and any(f"`{h}`" in s for s in stubs)]
            if failure.cls == "not-implemented" and unfinished:
                raise GradingFailure("not-implemented", f"{name} runs {unfinished[0][0]}, which is not written yet: "
                                     f"finish {unfinished[0][1]} first.") from None
            raise

    def _diagnose(self, out: str, got, expected, case, where: str, alternatives: dict, kept: Kept):
        batch = case.batch if self.batch_why else None
        failure = diagnose(out, got, expected, tol=self.tol(case), alternatives=alternatives.get(out, ()), batch=batch,
                           case=where, of=self.of if self.of_each is None else self.of_each[out])
        if failure is None or not self.batch_why:
            return failure
        return batch_refined(failure, out, batch, 1 in kept.passed, self.batch_why)

    def _gradients(self, name: str, y, leaves, dy, grads: dict, case, kept: Kept, applied: bool) -> tuple:
        """autograd from y with ``dy``; with ``returned``, a result autograd refuses is diagnosed by its shapes."""
        try:
            return self._run(name, lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True), relay=not applied)
        except GradingFailure as failure:
            if failure.cls != "error" or not self.returned or not kept.returned:
                raise
            got = as_outputs(f"{name}.backward", kept.returned[-1], tuple(grads))
            for (out, expected), g in zip(grads.items(), got):
                problem = diagnose(out, on_host(g), expected, case=case.label,
                                   of=self.of_each[out] if self.of_each else self.of)
                if problem is not None and problem.cls != "wrong-values":
                    raise problem from None
            raise

    def _refuse_autograd(self, used: list[str]) -> None:
        if used:
            raise autograd_in_backward(self.name, used, self.hand_written)

    def _check_case(self, guarded, case, used: list[str], kept: Kept, applied: tuple | None = None) -> None:
        """One case through ``guarded.apply``, or (``applied``: (name, fn, its Function)) through a function."""
        name, label = self.name if applied is None else applied[0], case.label
        forward, grads = self.reference(case)
        alternatives = self.alternatives(case)
        leaves = self.leaves(case)
        watched = self.watch is not None and self.watch(case)
        kept.returned.clear()
        kept.recorders.clear()
        with saved_for_backward() as packed:
            if applied is None:
                y = self._run(name, guarded.apply, *leaves, *self.extra(case))
            else:
                y = call_student(name, applied[1], *leaves, *self.extra(case))
        (out, expected), = forward.items()
        failure = self._diagnose(out, on_host(y), expected, case, label, alternatives, kept)
        if failure is not None:
            raise failure
        if applied is not None and (y.grad_fn is None or not runs_through(y, applied[2])):
            raise GradingFailure(
                "wrong-values", f"{name} gives a result whose autograd graph holds no {self.name}: autograd would "
                "differentiate something else, and your backward would never run.", f"inputs: {label}")
        if y.grad_fn is None:
            raise GradingFailure("error", f"{name}.apply({', '.join(self.args)}) returned a tensor with no autograd "
                                 f"history: {self.no_history}")
        if self.saved is not None:
            self.saved(case, packed, leaves, y, label)
        for layout, dy in self.upstream(case):
            kept.returned.clear()
            if applied is not None and watched:  # a function's whole backward runs under one recorder
                kept.recorders.append(AllocationRecorder())
            with kept.recorders[0] if applied is not None and watched else nullcontext():
                try:
                    got = self._gradients(name, y, leaves, dy, grads, case, kept, applied is not None)
                except GradingFailure:
                    self._refuse_autograd(used)  # the backward caught autograd's refusal and raised something else
                    raise
            self._refuse_autograd(used)
            where = f"{label}, ȳ a {layout} (strides {tuple(dy.stride())})" if layout else label
            if self.raw is not None:
                self.raw(case, kept.returned[0] if kept.returned else None, where)
            for (out, expected), g in zip(grads.items(), got):
                failure = self._diagnose(out, on_host(g), expected, case, where, alternatives, kept)
                if failure is None:
                    continue
                if layout not in ("", "contiguous") and failure.cls != "shape":  # the contiguous ȳ just passed
                    raise layout_failure(f"{name}.backward", self.layout_why, failure.where, "a contiguous ȳ",
                                         f"a {layout} of the same values")
                raise failure
        if watched:
            self.memory(name, case, packed, y, kept.recorders, f"{name}.backward" if applied is None else "its backward")
        kept.passed.append(getattr(case, "batch", None))

    def _gradcheck(self, guarded, case: Gradcheck, used: list[str]) -> None:
        leaves = tuple(x.to(device(), F64).requires_grad_(True) for x in case.inputs)
        ok = run_student(self.name, lambda: torch.autograd.gradcheck(guarded.apply, leaves, raise_exception=False))
        self._refuse_autograd(used)
        if not ok:
            raise GradingFailure("wrong-values", f"torch.autograd.gradcheck (float64, central differences) disagrees "
                                 f"with {self.name}'s backward.", f"inputs: {case.label}")
