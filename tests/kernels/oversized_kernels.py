"""Toy kernels sized on purpose to pass or to fail the compile check, for tests/kernels/test_compile_check.py.

    TRITON_INTERPRET=0 python -m tests.kernels.oversized_kernels     # prints every toy case's rows as JSON

Run it with TRITON_INTERPRET=0: the kernels below must be compiled kernels, and without a GPU ``import kernels``
switches the interpreter on unless TRITON_INTERPRET says otherwise.
"""

import json
from dataclasses import asdict

import torch
import triton
import triton.language as tl

from kernels import compile_check as cc
from kernels._target import GPUS


@triton.jit
def row_in_registers(X_ptr, n_cols, BLOCK: tl.constexpr):
    """Shift a row by its max: the whole row stays live across the reduction, BLOCK / lanes values per thread."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(X_ptr + row * n_cols + cols, tl.exp(x - tl.max(x, axis=0)), mask=cols < n_cols)


@triton.jit
def tile_product(A_ptr, B_ptr, C_ptr, K, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr, ACC: tl.constexpr):
    """C = A B for A (BLOCK, K), B (K, BLOCK): num_stages tiles of A and B in flight in shared memory."""
    rows = tl.arange(0, BLOCK)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK, BLOCK], dtype=ACC)
    for k in range(0, K, BLOCK_K):
        a = tl.load(A_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(B_ptr + (k + ks)[:, None] * BLOCK + rows[None, :])
        acc += tl.dot(a, b)
    tl.store(C_ptr + rows[:, None] * BLOCK + rows[None, :], acc.to(C_ptr.dtype.element_ty))


@triton.jit
def zero_rows(X_ptr, n_cols, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    """Zero each row; row * n_cols is formed in int64 only when WIDE."""
    row = tl.program_id(0)
    if WIDE:
        row = row.to(tl.int64)
    cols = tl.arange(0, BLOCK)
    tl.store(X_ptr + row * n_cols + cols, 0.0, mask=cols < n_cols)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=2), triton.Config({"BLOCK": 1024}, num_warps=4),
             triton.Config({"BLOCK": 4096}, num_warps=8)],
    key=["n_elements"],
    prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: [c for c in configs if c.kwargs["BLOCK"] <= nargs["n_elements"]]},
)
@triton.jit
def tuned_copy(X_ptr, Y_ptr, n_elements, BLOCK: tl.constexpr):
    """Y = X, with the block chosen among the configs that fit the input."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y_ptr + offs, tl.load(X_ptr + offs, mask=offs < n_elements), mask=offs < n_elements)


def copy(shape, dtype):
    x = torch.empty(shape, device="cuda", dtype=dtype)
    tuned_copy[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, torch.empty_like(x), x.numel())


def one_warp_rows(shape, dtype):
    x = torch.empty(shape, device="cuda", dtype=dtype)
    row_in_registers[(shape[0],)](x, shape[1], BLOCK=triton.next_power_of_2(shape[1]), num_warps=1)


def product(shape, dtype, b_dtype=None, stages=4):
    block, k = shape
    a = torch.empty(block, k, device="cuda", dtype=dtype)
    b = torch.empty(k, block, device="cuda", dtype=b_dtype or dtype)
    c = torch.empty(block, block, device="cuda", dtype=dtype)
    acc = tl.float64 if dtype == torch.float64 else tl.float32
    tile_product[(1,)](a, b, c, k, BLOCK=block, BLOCK_K=64, ACC=acc, num_warps=4, num_stages=stages)


def zeros(shape, dtype, wide):
    x = torch.empty(shape, device="cuda", dtype=dtype)
    zero_rows[(shape[0],)](x, shape[1], WIDE=wide, BLOCK=1024)


def refuse(shape, dtype):
    raise ValueError("rows longer than this kernel holds")


def _op(name, kernels, run):
    return cc.Op(name, kernels, run, lambda shape: "×".join(map(str, shape)), full=(), quick=())


# (op, shape, dtype, targets): what each case is sized to show
CASES = [
    (_op("small_row", ("row_in_registers",), one_warp_rows), (64, 256), "fp32", tuple(GPUS)),
    (_op("long_row", ("row_in_registers",), one_warp_rows), (64, 8192), "fp32", ("sm_80", "sm_90")),
    (_op("long_row", ("row_in_registers",), one_warp_rows), (64, 32768), "fp32", ("gfx942",)),
    (_op("long_row", ("row_in_registers",), one_warp_rows), (64, 4096), "fp64", ("sm_80",)),
    (_op("big_tiles", ("tile_product",), product), (128, 4096), "fp32", ("sm_86", "sm_80", "gfx942")),
    (_op("big_tiles", ("tile_product",), product), (128, 4096), "fp64", ("sm_80",)),
    (_op("small_tiles", ("tile_product",), lambda s, d: product(s, d, stages=1)), (32, 4096), "fp32",
     ("sm_75", "sm_89", "sm_90", "gfx942")),
    (_op("mixed_tiles", ("tile_product",), lambda s, d: product(s, d, torch.float16)), (32, 64), "fp32", ("sm_80",)),
    (_op("narrow_offsets", ("zero_rows",), lambda s, d: zeros(s, d, False)), (70000, 65536), "fp32", ("sm_90", "gfx942")),
    (_op("wide_offsets", ("zero_rows",), lambda s, d: zeros(s, d, True)), (70000, 65536), "fp32", ("sm_90", "gfx942")),
    (_op("tuned", ("tuned_copy",), copy), (2048,), "fp32", ("sm_90",)),
    (_op("refused", ("row_in_registers",), refuse), (64, 256), "fp32", ("sm_90",)),
    (_op("half_launched", ("row_in_registers", "never_launched"), one_warp_rows), (64, 256), "fp32", ("sm_90",)),
]


def main() -> None:
    rows = [row for op, shape, dtype, targets in CASES for target in targets
            for row in cc.check_case(cc.Case(op, shape, dtype), GPUS[target])]
    print(json.dumps([asdict(row) for row in rows]))


if __name__ == "__main__":
    main()
