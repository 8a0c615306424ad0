"""Hidden checks for 00_vjp_contract: ``course.selfcheck.vjp_contract``'s code on this module's shapes, drawn
fresh each run (docs/grading.md, "Seeds: reproducible grades"), each commented with the bug it exposes.

Two named bugs are only here, where they would not spell the answer out: a squared relative error, and the
softmax left out of the chain (z̄ = (z − E)/M with the logits z in place of y = softmax(z)).
"""

from __future__ import annotations

from functools import partial

import torch

from course.diagnose import Alternative, Case
from course.selfcheck.vjp_contract import (
    LSCE,
    NUMERICAL_GRADIENT,
    SIGMOID,
    SineQuadratic,
    check_relative_error,
    lsce_through_linear,
    probe_cases,
    random_pair,
    relative_error_alternatives,
)
from course.spec import Runner, merged

from ..inputs import DTYPE, randn
from .hidden import hidden

# (shape of x, options), as the visible check's NUMERICAL_GRADIENT_SHAPES.
NUMERICAL_GRADIENT_SHAPES = [
    ((1, 6), {}),  # batch 1
    ((7, 3), {"as_float": True}),  # batch 7 (prime); f returns a Python float
    ((2, 3, 5), {}),  # any shape: 3-D, odd sizes
    ((3, 5), {"eps": 1e-3}),  # the eps argument is used
    ((7, 2), {"dtype": torch.float32}),  # float64 inside whatever comes in
    ((5, 4), {"transposed": True}),  # last: each earlier bug is named before a layout problem
]

# (M, K, C, transposed): x (M, K), W (K, C), b (C,), target (M,).
LSCE_SHAPES = [
    (1, 5, 3, False),  # batch 1, W not square
    (1, 6, 6, False),  # batch 1, square W: a transposed W̄ keeps its shape
    (7, 5, 3, False),  # batch 7 (prime): a missing mean or batch sum shows
    (7, 6, 6, False),  # batch 7, square W
    (13, 9, 10, False),  # odd batch, no size a power of two
    (7, 6, 5, True),  # non-contiguous x and W
]


# (label, shape) of y and dy.
SIGMOID_SHAPES = [
    ("batch 1", (1, 11)),  # batch 1
    ("batch 7", (7, 9)),  # batch 7 (prime)
    ("3-D", (3, 5, 7)),  # any shape, odd sizes
    ("both non-contiguous (transposes)", (9, 13), {"transposed": True}),  # last: a pair handed over transposed
]


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Part B's answer, the expected value of the hidden cases: kept here, where students never look, since the
    course's own measure (course.diagnose.relative_error) is relative to a reference and is not this."""
    a, b = a.detach().to(DTYPE), b.detach().to(DTYPE)
    norm = torch.linalg.vector_norm
    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), torch.finfo(DTYPE).tiny)


numerical_gradient = hidden(NUMERICAL_GRADIENT, partial(probe_cases, shapes=NUMERICAL_GRADIENT_SHAPES, draw=SineQuadratic))


def _alternatives(a: torch.Tensor, b: torch.Tensor) -> list[Alternative]:
    """The visible check's alternatives, and the squared answer (which would spell the answer out there)."""
    alts = relative_error_alternatives(a, b)
    if max(torch.linalg.vector_norm(t).item() for t in (a, b)) > 0:
        alts.append(Alternative(
            "wrong-values", "relative_error returned the square of the answer: squared norms, where a relative "
            "error compares lengths.",
            torch.tensor(_relative_error(a, b) ** 2, dtype=DTYPE),
        ))
    return alts


def _pairs(gen) -> list[tuple]:
    """(label, a, b, expected) of this run."""
    pairs = [
        ("a, b of shape (1, 6), close", *random_pair(gen, 1, 6)),  # batch 1
        ("a, b of shape (7, 5), close", *random_pair(gen, 7, 5)),  # batch 7
        ("a, b of shape (2, 3, 5)", *random_pair(gen, 2, 3, 5, spread=0.3)),  # any shape: 3-D
        ("a, b of shape (7, 4), entries about 1e6", *random_pair(gen, 7, 4, scale=1e6)),  # absolute error ~1e3: meaningless
        ("a, b of shape (7, 4), entries about 1e-6", *random_pair(gen, 7, 4, scale=1e-6)),  # ~1e-9: flattering
    ]
    a, b = random_pair(gen, 7, 5, like=3.0, spread=0.1)  # ‖b‖ ≈ 3‖a‖: the order of the arguments must not matter
    pairs += [("a (7, 5) and b ≈ 3a", a, b), ("a ≈ 3b and b (7, 5): the same pair swapped", b, a)]
    pairs.append(("b = 0, a of shape (7, 3)", randn(gen, 7, 3), torch.zeros(7, 3, dtype=DTYPE)))  # exactly 1
    pairs.append(("a = b = 0, shape (7, 3)", torch.zeros(7, 3, dtype=DTYPE), torch.zeros(7, 3, dtype=DTYPE)))  # 0, finite
    a, b = random_pair(gen, 5, 7, spread=0.05)
    pairs.append(("a, b of shape (7, 5), non-contiguous (transposes)", a.T, b.T))  # any layout
    return [(label, a, b, _relative_error(a, b)) for label, a, b in pairs]


relative_error = hidden(Runner("relative_error", partial(check_relative_error, alternatives=_alternatives)), _pairs)


def _lsce_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """The softmax left out (its derivative never applied), pushed through the linear layer."""
    x, W, b, target = case.args
    dz = (x @ W + b - torch.nn.functional.one_hot(target, W.shape[1])) / x.shape[0]  # z − E in place of y − E
    no_softmax = "is what you get with the logits z in place of softmax(z): the softmax's part of the chain is missing."
    return {name: [Alternative("wrong-values", f"{name} {no_softmax}", value)]
            for name, value in zip(("dx", "dW", "db"), lsce_through_linear(x, W, b, dz))}


linear_softmax_ce_backward = hidden(LSCE, LSCE_SHAPES, merged(LSCE.alternatives, _lsce_alternatives))
sigmoid_backward = hidden(SIGMOID, SIGMOID_SHAPES)
