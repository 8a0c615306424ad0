"""The stub students see in place of a solution, and a short message when it runs.

nbgrader replaces each solution with ``raise course.todo()`` (see nbgrader_config.py).
``todo()`` looks one frame up to name the function that is still to be written, so an
unfinished exercise says "write linear_backward" instead of a bare NotImplementedError.
It subclasses NotImplementedError, so graders still see "the stub still raises".
"""

from __future__ import annotations

import sys


class ExerciseNotDone(NotImplementedError):
    """Raised by an exercise whose solution has not been written yet."""


def todo() -> ExerciseNotDone:
    """Return the exception that an unfinished exercise raises (``raise course.todo()``)."""
    caller = sys._getframe(1).f_code.co_name
    where = "this cell" if caller == "<module>" else f"`{caller}`"
    return ExerciseNotDone(f"{where} is yours to write: replace `raise course.todo()` with your code, then run the cell again.")


def install_short_tracebacks() -> None:
    """In IPython, show an unfinished exercise or a failed check as its message alone.

    The error is still reported as an error (nbgrader scores the cell zero), but the
    student reads one or two lines instead of frames of checking code.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from .diagnose import GradingFailure

    def short(self, etype, value, tb, tb_offset=None):
        head = "✎ exercise not done yet" if issubclass(etype, ExerciseNotDone) else "✗ check failed"
        lines = [f"\x1b[1;31m{head}\x1b[0m"] + [str(value)]
        self._showtraceback(etype, value, lines)
        return lines

    shell.set_custom_exc((ExerciseNotDone, GradingFailure), short)
