"""Hidden checks for 11_mlp_and_rope: the visible specs (``course.selfcheck.mlp_rope``) on sizes drawn each run
(AUTOGRADER_SEED replays a draw): odd trailing sizes, batch 1 first and 7 after it; for the kernels F and D/2 that
no power of two divides, blocks narrower than a row, both layouts forward and backward, float16 SwiGLU. Each table
keeps its shapes out of the visible check's (longer rows, longer sequences, other batch sizes).
"""

from __future__ import annotations

import torch

from course.selfcheck.mlp_rope import (
    F16,
    F32,
    F64,
    GELU_SPEC,
    ROPE_KERNEL_SPEC,
    ROPE_SPEC,
    SWIGLU_KERNEL_SPEC,
    SWIGLU_SPEC,
    gelu_cases,
    rope_cases,
    rope_kernel_cases,
    swiglu_cases,
    swiglu_kernel_cases,
)

from .hidden import hidden


def odd(gen: torch.Generator, low: int, high: int) -> int:
    """An odd size in [low, high)."""
    return int(torch.randint(low, high, (1,), generator=gen)) | 1


def half_dim(gen: torch.Generator, low: int, high: int) -> int:
    """D/2 in [low, high), not a power of two."""
    while True:
        n = int(torch.randint(low, high, (1,), generator=gen))
        if n & (n - 1):
            return n


def hidden_gelu_cases(gen: torch.Generator) -> list:
    return gelu_cases(gen, [("batch 1", (1, odd(gen, 3, 9), odd(gen, 13, 30)), form) for form in (None, "tanh")]
                      + [("batch 7", (7, odd(gen, 3, 9), odd(gen, 13, 30)), form) for form in ("none", "tanh")])


def hidden_swiglu_cases(gen: torch.Generator) -> list:
    return swiglu_cases(gen, [("batch 1", (1, odd(gen, 3, 9), odd(gen, 15, 31))),
                              ("batch 7", (7, odd(gen, 3, 9), odd(gen, 15, 31)))])


def hidden_rope_cases(gen: torch.Generator) -> list:
    T = odd(gen, 11, 20)
    return rope_cases(gen, [("batch 1", (1, 2, T, 2 * half_dim(gen, 3, 16)), None),
                            ("batch 1", (1, 3, T, 2 * half_dim(gen, 3, 16)), True),
                            ("batch 7", (7, 2, odd(gen, 11, 20), 2 * half_dim(gen, 3, 16)), False),
                            ("batch 7", (7, 1, odd(gen, 11, 20), 2 * half_dim(gen, 3, 16)), True)])


def hidden_swiglu_kernel_cases(gen: torch.Generator) -> list:
    return swiglu_kernel_cases(gen, [
        ("batch 2", 2, odd(gen, 33, 64), F64, 16),
        ("batch 5", 5, odd(gen, 65, 130), F32, 32),
        ("float16", 5, odd(gen, 129, 200), F16, 64),
        ("gradcheck", 3, odd(gen, 9, 16)),
    ])


def hidden_rope_kernel_cases(gen: torch.Generator) -> list:
    shapes = [(1, 1, odd(gen, 11, 20), 2 * half_dim(gen, 3, 16)), (2, 3, odd(gen, 11, 20), 2 * half_dim(gen, 17, 30))]
    return rope_kernel_cases(gen, [
        ("batch 1", shapes[0], F64, False, False),
        ("batch 1", shapes[0], F32, True, True),
        ("batch 2", shapes[1], F64, True, False),
        ("batch 2", shapes[1], F64, False, True),
        ("gradcheck", (2, 1, odd(gen, 3, 8), 2 * half_dim(gen, 3, 8)), True),
    ])


gelu_backward = hidden(GELU_SPEC, hidden_gelu_cases)
swiglu_backward = hidden(SWIGLU_SPEC, hidden_swiglu_cases)
swiglu_bwd_kernel = hidden(SWIGLU_KERNEL_SPEC, hidden_swiglu_kernel_cases)
rope_backward = hidden(ROPE_SPEC, hidden_rope_cases)
rope_kernel = hidden(ROPE_KERNEL_SPEC, hidden_rope_kernel_cases)
