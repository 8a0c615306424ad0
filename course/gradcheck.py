"""Check a hand-written backward against finite differences, and say how well it agrees.

These are the tools of every later notebook. Notebook 00 has you write your own
``numerical_gradient`` and ``relative_error`` first; this module is the course's
version, used once you have understood them.

Conventions: everything runs in float64. At its best step a central difference is off
by about u^(2/3) of the dtype's unit round-off u — about 1e-11 in float64, but 1e-5 in
float32, too coarse to tell a right backward from a slightly wrong one. A relative error
below 1e-7 is excellent, 1e-7 to 1e-4 deserves a look, above 1e-3 is a bug.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .diagnose import diagnose, relative_error


def central_difference_grad(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """∂f/∂x of a scalar function by central differences, in float64, with the shape of x."""
    # A contiguous float64 copy: nudging it never touches the caller's x, and .view(-1) needs
    # contiguous memory (a transposed x keeps its strides through a plain clone).
    x = torch.empty(x.shape, dtype=torch.float64).copy_(x.detach())
    grad = torch.empty_like(x)
    flat, gflat = x.view(-1), grad.view(-1)
    for i in range(flat.numel()):
        keep = flat[i].item()
        flat[i] = keep + eps
        up = float(f(x))
        flat[i] = keep - eps
        down = float(f(x))
        flat[i] = keep
        gflat[i] = (up - down) / (2 * eps)
    return grad


def numerical_vjp(forward: Callable, inputs: tuple[torch.Tensor, ...], dy: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, ...]:
    """x̄ᵢ = (∂y/∂xᵢ)ᵀ ȳ for each input, from central differences of L = ⟨forward(x), ȳ⟩."""
    # Only floating inputs are perturbed; integer ones (indices, targets) pass through as they are.
    inputs = tuple(t.detach().to(torch.float64) if t.is_floating_point() else t for t in inputs)
    dy = dy.detach().to(torch.float64)
    grads = []
    for i in range(len(inputs)):
        if not inputs[i].is_floating_point():
            grads.append(None)
            continue

        def loss(xi, i=i):
            args = inputs[:i] + (xi,) + inputs[i + 1:]
            return (forward(*args).to(torch.float64) * dy).sum()

        grads.append(central_difference_grad(loss, inputs[i], eps))
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
