"""One hidden check per exercise of ``course.registry``: ``check.<function>(student_fn)`` raises on a wrong answer."""

from course.registry import checks

_checks = checks(__name__, "hidden")
globals().update(_checks)
__all__ = sorted(_checks)
