"""What a result's autograd graph holds: the custom ``torch.autograd.Function``s it runs through,
and the tensors its forward saved for the backward.

A check that grades a hand-written backward must know that the student's wrapper really
goes through their ``Function`` (``TritonSoftmax.apply(x)``) and not through PyTorch ops
that autograd differentiates on its own: the values would be right and the exercise
skipped. Each custom Function leaves a ``BackwardCFunction`` node in the graph of what it
returned; walking back from the result finds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .witness import HELD

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


@contextmanager
def saved_for_backward() -> Iterator[list[torch.Tensor]]:
    """Collect every tensor autograd saves for the backward while the block runs.

    What a Function keeps with ``ctx.save_for_backward`` (and what PyTorch's own ops save)
    is the memory a backward costs between the passes: the property checks read it here.
    The tensors are held by reference, so the list adds no memory of its own.
    """
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield saved


def kept_on_ctx(node) -> list[str]:
    """The names of the tensors a Function's forward kept as attributes of ctx (``node``, an output's grad_fn) rather
    than through ``ctx.save_for_backward``: autograd never checks those for in-place changes. ``witness.HELD`` is no
    attribute: under the grader's re-check it reports the memory the forward still held."""
    if not hasattr(node, "__dict__"):
        return []
    return [k for k, v in vars(node).items() if isinstance(v, torch.Tensor) and k != HELD]
