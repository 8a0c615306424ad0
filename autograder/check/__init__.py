"""One hidden check per exercise of ``course.registry``: ``check.<function>(student_fn)`` raises on a wrong answer."""

from course import registry as _registry

_checks = _registry.checks(__name__, "hidden")  # public names here: the exercises' checks and the lesson modules
globals().update(_checks)
__all__ = sorted(_checks)
