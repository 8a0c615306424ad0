"""Hidden checks for 00_vjp_contract: random float64 inputs, references students never see.

The checking flow (what is called, in which order, and how a failure is worded) is the
visible check's, from ``course.selfcheck.vjp_contract``, so a student who passed the
visible check and fails here reads the same kind of diagnosis. What is hidden is here:
the probe functions, the inputs (fresh each run; AUTOGRADER_SEED replays one), the
references, and bug-specific alternatives that would give the formulas away.

- ``numerical_gradient``: a probe f(x) = Σ wᵢ sin(ωᵢxᵢ + φᵢ) + ½ xᵀAx with random
  frequencies, phases and a dense symmetric A, whose central and one-sided differences
  are exact for every step. At ε = 1e-6 a correct central difference is within ~1e-9
  (relative) of the exact value and a forward difference is ~1e-6 away; the tolerance
  1e-8 separates the two. Shapes (1, 6), (7, 3), (2, 3, 5) and a transposed (non-contiguous)
  (5, 4); eps=1e-3 must be used; a float32 x must be handled in float64; x must be unchanged;
  f may return a float. The student's code is handed a plain function, never the probe.
- ``relative_error``: random pairs at batch 1 and 7, 3-D, magnitudes 1e6 and 1e-6
  (where an absolute error is off by twelve orders of magnitude), both argument
  orders, a zero argument, both zero, a transposed (non-contiguous) pair.
- ``linear_softmax_ce_backward``: batch 1 and 7 (and 13), non-square and square W,
  non-power-of-two sizes, transposed (non-contiguous) x and W, against the closed form.
"""

from __future__ import annotations

import torch

from course.diagnose import Alternative, Case, graded
from course.selfcheck.vjp_contract import (  # noqa: F401 (HINTS: graded reads it from this module)
    HINTS, Probe, check_lsce, check_numerical_gradient, check_relative_error, relative_error_alternatives,
)

from ..inputs import DTYPE, generator, randint, randn

# ---------------------------------------------------------------------------
# numerical_gradient


class SineQuadratic(Probe):
    """f(x) = Σ wᵢ sin(ωᵢxᵢ + φᵢ) + ½ x̂ᵀAx̂ with x̂ = x flattened and A symmetric.

    Central difference with step h, exactly: w cos(ωx + φ) sin(ωh)/h + A x̂ (a quadratic's
    central difference has no truncation error). Forward difference, exactly:
    w (sin(ω(x + h) + φ) − sin(ωx + φ))/h + A x̂ + h/2 diag(A).
    """

    def __init__(self, x: torch.Tensor, gen: torch.Generator, eps: float, as_float: bool = False):
        super().__init__(x, eps)
        n, shape = self.base.numel(), self.base.shape
        self.w = 0.5 + torch.rand(shape, generator=gen, dtype=DTYPE)  # weights in [0.5, 1.5)
        self.omega = 4.0 + 2.0 * torch.rand(shape, generator=gen, dtype=DTYPE)  # ω in [4, 6): real curvature
        self.phi = 6.283185307179586 * torch.rand(shape, generator=gen, dtype=DTYPE)
        B = randn(gen, n, n)
        self.A = (B @ B.T) / (4 * n)  # symmetric, entries O(1/√n): couples every entry to every other
        self.as_float = as_float  # f may hand back a Python float instead of a 0-d tensor

    def _value(self, p):
        q = p.reshape(-1)
        out = (self.w * torch.sin(self.omega * p + self.phi)).sum() + 0.5 * q @ self.A @ q
        return float(out) if self.as_float else out

    def _quadratic(self):
        return (self.A @ self.base.reshape(-1)).reshape(self.base.shape)

    def central(self, h):
        wave = self.w * torch.cos(self.omega * self.base + self.phi) * torch.sin(self.omega * h) / h
        return wave + self._quadratic()

    def one_sided(self, h):
        x = self.base
        wave = self.w * (torch.sin(self.omega * (x + h) + self.phi) - torch.sin(self.omega * x + self.phi)) / h
        return wave + self._quadratic() + (h / 2) * torch.diagonal(self.A).reshape(x.shape)


@graded
def numerical_gradient(fn) -> None:
    gen = generator("numerical_gradient")

    def case(label, *shape, eps=None, dtype=DTYPE, as_float=False):
        x = randn(gen, *shape).to(dtype)
        return label, x, SineQuadratic(x, gen, eps or 1e-6, as_float), eps

    def transposed_case():
        x = randn(gen, 4, 5).T  # (5, 4), strides (1, 5): .view(-1) of a plain copy refuses it
        return "x of shape (5, 4), non-contiguous (a transpose)", x, SineQuadratic(x, gen, 1e-6), None

    check_numerical_gradient(fn, [
        case("x of shape (1, 6)", 1, 6),  # batch 1
        case("x of shape (7, 3); f returns a Python float", 7, 3, as_float=True),  # batch 7 (prime)
        case("x of shape (2, 3, 5)", 2, 3, 5),  # any shape: 3-D, odd sizes
        case("x of shape (3, 5), eps=0.001", 3, 5, eps=1e-3),  # the eps argument is used
        case("x of shape (7, 2) given in float32", 7, 2, dtype=torch.float32),  # float64 inside whatever comes in
        transposed_case(),  # last: each earlier bug is named before a layout problem
    ])


# ---------------------------------------------------------------------------
# relative_error


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / max(‖a‖, ‖b‖, tiny) over every entry, in float64."""
    a, b = a.to(DTYPE), b.to(DTYPE)
    norm = torch.linalg.vector_norm
    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), torch.finfo(DTYPE).tiny)


def _alternatives(a: torch.Tensor, b: torch.Tensor) -> list[Alternative]:
    alts = relative_error_alternatives(a, b)
    norm = torch.linalg.vector_norm
    top = max(norm(a).item(), norm(b).item())
    if top > 0:
        alts.append(Alternative(
            "wrong-values", "relative_error returned the square of the answer: squared norms, where a relative "
            "error compares lengths.",
            torch.tensor((norm(a - b).item() / top) ** 2, dtype=DTYPE),
        ))
    return alts


@graded
def relative_error(fn) -> None:
    gen = generator("relative_error")

    def near(*shape, spread=1e-3, scale=1.0):
        a = randn(gen, *shape)
        return scale * a, scale * (a + spread * randn(gen, *shape))

    cases = []

    def add(label, a, b):
        cases.append((label, a, b, _relative_error(a, b)))

    add("a, b of shape (1, 6), close", *near(1, 6))  # batch 1
    add("a, b of shape (7, 5), close", *near(7, 5))  # batch 7
    add("a, b of shape (2, 3, 5)", *near(2, 3, 5, spread=0.3))  # any shape: 3-D
    add("a, b of shape (7, 4), entries about 1e6", *near(7, 4, scale=1e6))  # absolute error ~1e3: meaningless
    add("a, b of shape (7, 4), entries about 1e-6", *near(7, 4, scale=1e-6))  # absolute error ~1e-9: flattering
    a = randn(gen, 7, 5)
    b = 3.0 * a + 0.1 * randn(gen, 7, 5)  # ‖b‖ ≈ 3‖a‖: the order of the arguments must not matter
    add("a (7, 5) and b ≈ 3a", a, b)
    add("a ≈ 3b and b (7, 5): the same pair swapped", b, a)
    add("b = 0, a of shape (7, 3)", randn(gen, 7, 3), torch.zeros(7, 3, dtype=DTYPE))  # exactly 1
    add("a = b = 0, shape (7, 3)", torch.zeros(7, 3, dtype=DTYPE), torch.zeros(7, 3, dtype=DTYPE))  # 0, finite
    a = randn(gen, 5, 7)
    add("a, b of shape (7, 5), non-contiguous (transposes)", a.T, (a + 0.05 * randn(gen, 5, 7)).T)  # any layout
    check_relative_error(fn, cases, alternatives=_alternatives)


# ---------------------------------------------------------------------------
# linear_softmax_ce_backward


def _lsce_forward(x, W, b, target):
    """z, y and the one-hot E of the chain; float64."""
    z = x @ W + b  # (M, C)
    y = torch.softmax(z, dim=1)  # (M, C)
    E = torch.zeros_like(y)
    E[torch.arange(x.shape[0]), target] = 1.0  # (M, C) one-hot rows
    return z, y, E


def _lsce_logit_gradient(x, W, b, target):
    """z̄ = (y − E)/M, (M, C)."""
    _, y, E = _lsce_forward(x, W, b, target)
    return (y - E) / x.shape[0]


def _lsce_reference(x, W, b, target):
    """(x̄, W̄, b̄) of mean_m CE(softmax(x W + b)_m, target_m), in closed form."""
    dz = _lsce_logit_gradient(x, W, b, target)  # (M, C)
    return dz @ W.T, x.T @ dz, dz.sum(dim=0)


def _lsce_alternatives(case: Case) -> dict[str, list[Alternative]]:
    x, W, b, target = case.args
    z, _, E = _lsce_forward(x, W, b, target)
    dz_logits = (z - E) / x.shape[0]  # softmax left out: its derivative was never applied
    no_softmax = "is what you get with the logits z in place of softmax(z): the softmax's part of the chain is missing."
    return {
        "dx": [Alternative("wrong-values", f"dx {no_softmax}", dz_logits @ W.T)],
        "dW": [Alternative("wrong-values", f"dW {no_softmax}", x.T @ dz_logits)],
        "db": [Alternative("wrong-values", f"db {no_softmax}", dz_logits.sum(dim=0))],
    }


def _lsce_case(gen: torch.Generator, M: int, K: int, C: int, transposed: bool = False) -> Case:
    """One batch; ``transposed`` hands x and W over non-contiguous (each the transpose of a stored tensor)."""
    x = randn(gen, K, M).T if transposed else randn(gen, M, K)  # (M, K)
    W = randn(gen, C, K, scale=0.5).T if transposed else randn(gen, K, C, scale=0.5)  # (K, C)
    b = randn(gen, C, scale=0.5)
    target = randint(gen, C, M)
    shape = "square W" if K == C else "W not square"
    layout = "; x and W non-contiguous (transposes)" if transposed else ""
    return Case(f"x ({M}, {K}), W ({K}, {C}), b ({C},), target ({M},); batch {M}, {shape}{layout}", (x, W, b, target), batch=M)


@graded
def linear_softmax_ce_backward(fn) -> None:
    gen = generator("linear_softmax_ce_backward")
    cases = [
        _lsce_case(gen, 1, 5, 3),  # batch 1, W not square
        _lsce_case(gen, 1, 6, 6),  # batch 1, square W: a transposed W̄ keeps its shape
        _lsce_case(gen, 7, 5, 3),  # batch 7 (prime): a missing mean or batch sum shows
        _lsce_case(gen, 7, 6, 6),  # batch 7, square W
        _lsce_case(gen, 13, 9, 10),  # odd batch, no size a power of two
        _lsce_case(gen, 7, 6, 5, transposed=True),  # non-contiguous x and W
    ]
    check_lsce(fn, cases, reference=_lsce_reference, logit_gradient=_lsce_logit_gradient, alternatives=_lsce_alternatives)


__all__ = ["numerical_gradient", "relative_error", "linear_softmax_ce_backward"]
