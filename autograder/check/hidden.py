"""The one hidden check: an exercise's visible flow on this run's cases (docs/grading.md, "Seeds: reproducible grades").

A hidden lesson file is a table of hidden shapes (or a function of the generator drawing its cases) and the
hidden-only alternatives, the named bugs that would spell out the derivation if students had them:
``softmax_backward = hidden(BACKWARD, BACKWARD_SHAPES)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from course.diagnose import graded

from ..inputs import generator


def hidden(spec, cases: Sequence | Callable, alternatives: Callable | None = None, **options) -> Callable:
    """The graded check named after ``spec`` (anything with a ``name`` and ``check(fn, cases, alternatives)``):
    ``spec.check`` on ``cases(gen)``, or on ``spec.cases(gen, cases, **options)`` for a table, drawn from this run's
    generator; ``alternatives``, when given, in place of the spec's own."""

    def check(fn) -> None:
        gen = generator(spec.name)
        spec.check(fn, cases(gen) if callable(cases) else spec.cases(gen, cases, **options), alternatives)

    check.__name__ = check.__qualname__ = spec.name
    check.__doc__ = f"The visible check of {spec.name}, on this run's hidden cases."
    return graded(check)
