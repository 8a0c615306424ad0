"""What a result's autograd graph runs through: the custom ``torch.autograd.Function``s in it.

A check that grades a hand-written backward must know that the student's wrapper really
goes through their ``Function`` (``TritonSoftmax.apply(x)``) and not through PyTorch ops
that autograd differentiates on its own: the values would be right and the exercise
skipped. Each custom Function leaves a ``BackwardCFunction`` node in the graph of what it
returned; walking back from the result finds them.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

# Graphs in the course are a few dozen nodes; the bound only stops a pathological one.
MAX_NODES = 500


def _custom_nodes(outputs, limit: int = MAX_NODES) -> Iterator[torch.autograd.function.BackwardCFunction]:
    seen, todo = set(), [o.grad_fn for o in outputs]
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            yield node
        todo.extend(nxt for nxt, _ in getattr(node, "next_functions", ()))


def custom_functions(*outputs: torch.Tensor) -> list[type]:
    """The custom Function classes the graphs of ``outputs`` run through, each once."""
    found = []
    for node in _custom_nodes(outputs):
        cls = getattr(node, "_forward_cls", None)
        if cls is not None and cls not in found:
            found.append(cls)
    return found


def runs_through(output: torch.Tensor, cls: type | None = None) -> bool:
    """Whether ``output``'s graph runs through a custom Function: ``cls`` or a subclass of it, when given.

    A node whose Function class PyTorch does not expose counts as a match: the benefit of
    the doubt goes to the student.
    """
    for node in _custom_nodes([output]):
        forward_cls = getattr(node, "_forward_cls", None)
        if cls is None or forward_cls is None or issubclass(forward_cls, cls):
            return True
    return False
