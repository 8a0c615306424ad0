"""A lesson is a spec (docs/design.md): every PyTorch-function exercise declares itself as one :class:`Exercise`.

A lesson with more to say subclasses it: softmax adds how its inputs are drawn and what its
calls must not do, layernorm how rows are laid out (for its rows-leak probe), routing what a
store keeps where indices repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .diagnose import Alternative, Case, run_cases


@dataclass(frozen=True, kw_only=True)
class Exercise:
    """One PyTorch-function exercise, declared once for its visible and its hidden check."""

    name: str
    reference: Callable  # (*case.args, **case.kwargs) -> the right output, or a tuple of them
    outputs: tuple[str, ...]
    of: tuple[str, ...] = ()  # what each output is the gradient of, for shape messages
    alternatives: Callable[[Case], dict[str, list[Alternative]]] | None = None
    tol: float = 1e-7

    def run(self, fn: Callable, cases: Sequence[Case], *,
            alternatives: Callable[[Case], dict[str, list[Alternative]]] | None = None,
            **hooks) -> None:
        """Grade ``fn`` on ``cases`` (batch 1 first) and raise the first diagnosis.

        ``alternatives``, when given, takes the place of the exercise's own; ``hooks`` (``refine``,
        ``on_error``, ``forbid_autograd_use``, ``tol``) go to :func:`course.diagnose.run_cases` as they are.
        """
        hooks.setdefault("tol", self.tol)
        run_cases(self.name, fn, cases, self.reference, outputs=self.outputs, of=self.of,
                  alternatives=self.alternatives if alternatives is None else alternatives, **hooks)
