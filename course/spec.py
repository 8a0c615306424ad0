"""The PyTorch-function spec (docs/design.md, "A lesson is a spec"): every exercise that takes tensors and returns
tensors is one :class:`Exercise`, declared once for its visible and its hidden check.

An exercise carries its reference, its named bugs, its case builder (``draw``: a generator and one row of a shape
table -> a :class:`Case`), how a failure is read in the light of the cases before it (``refine``, a named
refinement such as :class:`BatchAxis`), and what its calls must not do (``properties``, each
``prop(name, calls, cases)`` on the calls a :class:`course.memory.RecordedCalls` kept, such as :class:`Refuses`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from . import witness
from .diagnose import (
    BATCH_SUM,
    Alternative,
    Case,
    GradingFailure,
    Passed,
    batch_refined,
    distinct_from,
    graded,
    layout_refined,
    rerun_above_batch_1,
    run_cases,
)
from .memory import RecordedCalls

Property = Callable[[str, Sequence, Sequence[Case]], None]  # (name, [(args, recorder)], cases): raise or return


@dataclass(frozen=True)
class Refuses:
    """A property: no recorded call ran an aten op that ``refused(op)``; else ``cls`` with ``sentence``, formatted
    with the exercise's ``name``, the first such ``op`` and up to three of them joined (``ops``)."""

    refused: Callable[[str], bool]
    cls: str
    sentence: str

    def __call__(self, name: str, calls: Sequence, cases: Sequence[Case] = ()) -> None:
        ran = list(dict.fromkeys(op for _, rec in calls for op in rec.ops if rec.ops[op] and self.refused(op)))
        if ran:
            raise GradingFailure(self.cls, self.sentence.format(name=name, op=ran[0], ops=" and ".join(ran[:3])))


def among(*ops: str) -> Callable[[str], bool]:
    """``Refuses.refused`` for a list of aten ops."""
    return frozenset(ops).__contains__


# torch's own backward kernels (aten._softmax_backward_data, aten.native_layer_norm_backward, ...) and forward-mode
# autograd: autograd's answer by another door, the same rule the grader's re-check applies (course.witness).
NO_LIBRARY_BACKWARD = Refuses(
    witness.is_library_backward, "autograd-in-backward",
    "{name} called torch's own backward kernel {op}: that is autograd's answer, not yours — derive the gradient "
    "and write it with ordinary tensor operations.")


@dataclass(frozen=True)
class BatchAxis:
    """The default refinement: a wrong output no named bug explains, right at batch 1 and wrong above it, is a
    ``batch-reduction`` bug (``why`` says which); ``layout``: first, right for contiguous inputs and wrong for a
    transposed view is the layout; ``named``: a named bug of class wrong-values counts as unexplained too;
    ``until_contiguous``: once a contiguous case above batch 1 passed, the sum over the batch is there."""

    why: str = BATCH_SUM
    layout: bool = False
    named: bool = False
    until_contiguous: bool = False

    def __call__(self, failure: GradingFailure, out: str, case: Case, got, expected, passed: Passed) -> GradingFailure:
        if self.layout and (layout := layout_refined(failure, out, case, passed, generic=True)):
            return layout

        if not self.why or (self.until_contiguous and passed.contiguous):
            return failure
        return batch_refined(failure, out, case.batch, passed.batch1, self.why, named=self.named)


@dataclass(frozen=True)
class Spread:
    """A case builder from ``make(gen, *shape, **options)``: a row of the table is a shape, then a dict of options."""

    make: Callable[..., Case]

    def __call__(self, gen: torch.Generator, row: Sequence) -> Case:
        *shape, options = row if row and isinstance(row[-1], dict) else (*row, {})
        return self.make(gen, *shape, **options)


@dataclass(frozen=True)
class Runner:
    """A check with a runner of its own (a kernel's launches, a test of tests) as a spec for the one hidden check:
    ``run(fn, cases)``."""

    name: str
    run: Callable[[Callable, Sequence], None]

    def check(self, fn: Callable, cases: Sequence, alternatives: Callable | None = None) -> None:
        self.run(fn, cases)


def visible(spec, cases: Callable[[], Sequence], passes: str) -> Callable:
    """The visible check of ``spec`` (an :class:`Exercise`, a :class:`Runner`): ``spec.check`` on ``cases()``, the
    same inputs on every run; a pass prints one line saying what it ran on (``passes``)."""

    def check(fn: Callable) -> None:
        spec.check(fn, cases())
        print(f"✓ {spec.name} passes the visible checks ({passes})")

    check.__name__ = check.__qualname__ = spec.name
    check.__doc__ = f"The visible check of {spec.name}: {passes}."
    return graded(check)


def merged(*sources: Callable[[Case], dict[str, list[Alternative]]],
           distinct: Exercise | None = None) -> Callable[[Case], dict[str, list[Alternative]]]:
    """The named bugs of every source, output by output, in order (a spec's own, then the hidden ones); with
    ``distinct``, only those that differ from its right answer on the case."""
    def alternatives(case: Case) -> dict[str, list[Alternative]]:
        right = dict(zip(distinct.outputs, distinct.reference(*case.args))) if distinct else {}
        found: dict[str, list[Alternative]] = {}
        for source in sources:
            for out, alts in source(case).items():
                found.setdefault(out, []).extend(distinct_from(alts, right[out]) if distinct else alts)
        return found

    return alternatives


@dataclass(frozen=True, kw_only=True)
class Exercise:

    """One PyTorch-function exercise."""

    name: str
    reference: Callable  # (*case.args, **case.kwargs) -> the right output, or a tuple of them
    outputs: tuple[str, ...]
    of: tuple[str, ...] = ()  # what each output is the gradient of, for shape messages
    alternatives: Callable[[Case], dict[str, list[Alternative]]] | None = None
    tol: float | Callable[[Case], float] = 1e-7  # or a function of the case (its dtype)
    bound: Callable[[str, Case], float | None] | None = None  # (output, case) -> an absolute bound, or None
    draw: Callable[..., Case] | None = None  # (gen, row of a shape table, **options) -> Case
    refine: Callable[..., GradingFailure] | None = None  # a named refinement (BatchAxis, ...); None: BatchAxis()
    on_error: Callable[..., GradingFailure] | None = None  # (failure, case, passed) for an error the code raised
    recheck_shape: bool = False  # a shape failure at batch 1 is looked at again above it (parameter gradients)
    properties: tuple[Property, ...] = ()  # graded on the recorded calls once the values pass
    counted: Callable[[tuple], bool] | None = None  # calls whose memory the grader counts by the OS (RecordedCalls)
    runner: Callable | None = None  # (name, fn, cases, reference) compares the values instead of :meth:`run`

    def cases(self, gen: torch.Generator, shapes: Sequence, **options) -> list[Case]:
        """A case per row of ``shapes``, drawn from ``gen`` in order (batch 1 first, as the table lists them)."""
        return [self.draw(gen, shape, **options) for shape in shapes]

    def run(self, fn: Callable, cases: Sequence[Case], *,
            alternatives: Callable[[Case], dict[str, list[Alternative]]] | None = None, **hooks) -> None:
        """Grade the values of ``fn`` on ``cases`` and raise the first diagnosis (:func:`course.diagnose.run_cases`).

        ``alternatives``, when given, takes the place of the exercise's own; ``hooks`` (``refine``, ``on_error``,
        ``forbid_autograd_use``, ``tol``, ``bound``) override the exercise's.
        """
        hooks = {"tol": self.tol, "refine": self.refine, "on_error": self.on_error, "bound": self.bound, **hooks}
        alternatives = self.alternatives if alternatives is None else alternatives

        def attempt(some: Sequence[Case]) -> None:
            run_cases(self.name, fn, some, self.reference, outputs=self.outputs, of=self.of,
                      alternatives=alternatives, **hooks)

        rerun_above_batch_1(attempt, cases) if self.recheck_shape else attempt(cases)

    def check(self, fn: Callable, cases: Sequence[Case],
              alternatives: Callable[[Case], dict[str, list[Alternative]]] | None = None) -> None:
        """Grade ``fn`` on ``cases``: the values (``alternatives``, when given, in place of the exercise's own:
        the hidden ones), then the properties of the calls it made."""
        recorded = RecordedCalls(counted=self.counted)
        target = recorded(fn) if self.properties and callable(fn) else fn
        if self.runner is not None:
            self.runner(self.name, target, cases, self.reference)
        else:
            self.run(target, cases, alternatives=alternatives)
        for prop in self.properties:
            prop(self.name, recorded.calls, cases)
