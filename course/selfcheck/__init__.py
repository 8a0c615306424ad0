"""Visible self-checks, one module per lesson: what each notebook's test cell runs before its hidden block.

``course.selfcheck.<exercise>`` for every exercise of ``course.registry``. References come from torch's own
autograd or from closed forms, never from a solution.
"""

from .. import registry as _registry

_checks = _registry.checks(__name__, "visible")  # public names here: the exercises' checks and the lesson modules
globals().update(_checks)
__all__ = sorted(_checks)
