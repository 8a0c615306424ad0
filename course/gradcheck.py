"""Check a hand-written backward against finite differences, and say how well it agrees.

The tools of every notebook after 00. Notebook 00 has you write your own ``numerical_gradient``
and ``relative_error``; this module is deliberately not either of them, so that reading it answers
neither exercise: its derivative estimate is a four-call, fourth-order stencil (error O(ε⁴), where
Part A asks for two calls per entry), and its relative error is measured against the reference
(``course.diagnose.relative_error``), where Part B asks for one that treats both sides alike.

Conventions: everything runs in float64, with ε = 1e-6 unless told otherwise. At that step the
estimate is off by a few 1e-10 of the function's size (round-off: four values, each rounded to about
1e-16, divided by 12ε), and in float32 by about 1e-2: too coarse to tell a right backward from a
slightly wrong one. A relative error below 1e-7 is excellent, 1e-7 to 1e-4 deserves a look, above
1e-3 is a bug.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .diagnose import diagnose, relative_error

# The fourth-order stencil: f′(x) ≈ Σ_k w_k f(x + s_k ε) / ε, exact for polynomials of degree 4.
_STEPS = (-2.0, -1.0, 1.0, 2.0)
_WEIGHTS = (1 / 12, -8 / 12, 8 / 12, -1 / 12)


def _stencil(f: Callable, x: torch.Tensor, eps: float, start=0.0):
    """For each entry j of x in turn, ``start`` + Σ_k w_k f(x + s_k ε e_j), every other entry left where it was."""
    # A contiguous float64 copy: moving its entries never touches the caller's x, and .view(-1) needs
    # contiguous memory (a transposed x keeps its strides through a plain clone).
    point = torch.empty(x.shape, dtype=torch.float64).copy_(x.detach())
    flat = point.view(-1)
    for j in range(flat.numel()):
        keep = flat[j].item()
        total = start
        for step, weight in zip(_STEPS, _WEIGHTS):
            flat[j] = keep + step * eps
            total = total + weight * f(point)
        flat[j] = keep
        yield total


def central_difference_grad(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """∂f/∂x of a scalar function, in float64, with the shape of x, by the symmetric fourth-order stencil.

    Four calls of f per entry of x, each with that entry moved by ±ε or ±2ε and every other left where it
    was; the caller's x is never written.
    """
    return torch.tensor(list(_stencil(lambda p: float(f(p)), x, eps)), dtype=torch.float64).reshape(x.shape) / eps


def numerical_vjp(forward: Callable, inputs: tuple[torch.Tensor, ...], dy: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, ...]:
    """x̄ᵢ = Jᵢᵀ ȳ for each input, J's columns estimated one entry of xᵢ at a time (fourth-order stencil).

    Integer inputs (indices, targets) are passed through unmoved; their entry in the result is None.
    """
    inputs = tuple(t.detach().to(torch.float64) if t.is_floating_point() else t for t in inputs)
    dy = dy.detach().to(torch.float64)
    grads = []
    for i, xi in enumerate(inputs):
        if not xi.is_floating_point():
            grads.append(None)
            continue
        # Column j of J is ∂y/∂x_j, shaped like y; entry j of Jᵀȳ is its dot product with ȳ.
        columns = _stencil(lambda p: forward(*inputs[:i], p, *inputs[i + 1:]).to(torch.float64), xi, eps, torch.zeros_like(dy))
        dots = [float(torch.vdot(column.reshape(-1), dy.reshape(-1))) for column in columns]
        grads.append(torch.tensor(dots, dtype=torch.float64).reshape(xi.shape) / eps)
    return tuple(grads)


def verdict(err: float) -> str:
    """What a relative error between an analytic and a numerical gradient means."""
    if err < 1e-7:
        return "excellent"
    if err < 1e-4:
        return "suspicious — look closer"
    if err < 1e-3:
        return "probably wrong"
    return "a bug"


def check_vjp(forward: Callable, backward: Callable, *inputs: torch.Tensor, seed: int = 0, names: tuple[str, ...] | None = None) -> bool:
    """Compare ``backward(dy, *inputs)`` with the numerical VJP of ``forward`` and print a verdict.

    ``backward`` returns one gradient per input (a tuple when there are several).
    Each line gives the relative error and, when it is off, the kind of bug. Returns
    True when every gradient is excellent.
    """
    inputs = tuple(t.detach().to(torch.float64) if t.is_floating_point() else t for t in inputs)
    names = names or tuple(f"input {i}" for i in range(len(inputs)))
    y = forward(*inputs)
    gen = torch.Generator().manual_seed(seed)
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    got = backward(dy, *inputs)
    got = got if isinstance(got, (tuple, list)) else (got,)
    if len(got) != len(inputs):
        print(f"✗ backward returned {len(got)} gradients for {len(inputs)} inputs")
        return False
    expected = numerical_vjp(forward, inputs, dy)
    ok = True
    for name, g, e in zip(names, got, expected):
        if e is None:
            continue
        failure = diagnose(f"grad of {name}", g, e, tol=1e-7)
        if failure is None:
            print(f"✓ {name}: relative error {relative_error(g, e):.1e} — excellent")
            continue
        ok = False
        comparable = isinstance(g, torch.Tensor) and g.shape == e.shape
        shown = f"relative error {relative_error(g, e):.1e} — {verdict(relative_error(g, e))}; " if comparable else ""
        print(f"✗ {name}: {shown}{failure.args[0].splitlines()[0]}")
    return ok


def directional_derivative(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, u: torch.Tensor,
                           eps: float = 1e-6) -> float:
    """d/dt f(x + t·u) at t = 0, for a scalar f, by the same fourth-order stencil (four calls of f in all).

    A gradient check along one random direction u (torch.autograd.gradcheck's fast mode) compares this with
    ⟨x̄, u⟩ for a backward's x̄; the visible checks of the kernel notebooks can use it.
    """
    x, u = x.detach().to(torch.float64), u.detach().to(torch.float64)
    return sum(w * float(f(x + s * eps * u)) for s, w in zip(_STEPS, _WEIGHTS)) / eps
