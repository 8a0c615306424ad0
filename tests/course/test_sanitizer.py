"""course.sanitizer: races between programs, accesses out of bounds and locks never given back, read from what an
interpreted launch touched. Each case of issue 29 runs a small kernel and checks the whole report: kind, tensor,
index, the programs and the source lines (found by the ``# @tag`` comments below, so that editing this file
cannot make a line number stale)."""

import json
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import course
from course import sanitizer
from course.delegation import forbid_helpers
from course.diagnose import call_student
from course.sanitizer import Finding, Site, read_record, sanitize
from course.vocabulary import GradingFailure

HERE = Path(__file__).read_text().splitlines()


def line(tag: str) -> int:
    """The line of this file that carries the comment ``# @tag``."""
    found = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# @{tag}")]
    assert len(found) == 1, f"tag {tag} marks {len(found)} lines"
    return found[0]


def only(report) -> Finding:
    assert len(report.findings) == 1 and not any(launch.broken for launch in report.launches), str(report)
    return report.findings[0]


def lines(finding: Finding) -> tuple[int, ...]:
    return tuple(s.line for s in finding.sites)


def pids(*xs) -> tuple:
    return tuple(x if isinstance(x, tuple) else (x, 0, 0) for x in xs)


# ---------------------------------------------------------------------------------------------------------------
# Kernels: each one small, each bug on its own marked line


@triton.jit
def scatter_rmw(src, idx, out, N: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    d = tl.load(idx + i)
    v = tl.load(src + i * N + cols)
    acc = tl.load(out + d * N + cols)  # @rmw-load
    tl.store(out + d * N + cols, acc + v)  # @rmw-store


@triton.jit
def scatter_atomic(src, idx, out, N: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    d = tl.load(idx + i)
    tl.atomic_add(out + d * N + cols, tl.load(src + i * N + cols))


@triton.jit
def partials_one_row(x, partial, N: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    tl.store(partial + cols, tl.load(x + i * N + cols))  # @one-row


@triton.jit
def partials_own_row(x, partial, N: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    tl.store(partial + i * N + cols, tl.load(x + i * N + cols) * 2)


@triton.jit
def sum_rows(partial, out, M, N: tl.constexpr):
    cols = tl.arange(0, N)
    acc = tl.zeros((N,), dtype=tl.float32)
    for r in range(M):
        acc += tl.load(partial + r * N + cols)
    tl.store(out + cols, acc)


@triton.jit
def lock_released_early(x, dw, lock, N: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    v = tl.load(x + i * N + cols)
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    tl.atomic_xchg(lock, 0)
    acc = tl.load(dw + cols)  # @early-load
    tl.store(dw + cols, acc + v)  # @early-store


@triton.jit
def lock_never_released(x, dw, lock, N: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    v = tl.load(x + i * N + cols)
    while tl.atomic_cas(lock, 0, 1) == 1:  # @never-take
        pass
    tl.store(dw + cols, tl.load(dw + cols) + v)


@triton.jit
def last_keeps_the_lock(dw, lock, n_programs, N: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    while tl.atomic_cas(lock, 0, 1) == 1:  # @last-take
        pass
    tl.store(dw + cols, tl.load(dw + cols) + 1)
    if i < n_programs - 1:  # the last program to run forgets: on a GPU it may run first
        tl.atomic_xchg(lock, 0)


@triton.jit
def tas_lock(x, dw, lock, N: tl.constexpr, RELEASE: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    while tl.atomic_xchg(lock, 1) == 1:  # @tas-take
        pass
    tl.store(dw + cols, tl.load(dw + cols) + tl.load(x + i * N + cols))
    if RELEASE:
        tl.atomic_xchg(lock, 0)


@triton.jit
def lock_out_of_bounds(dw, lock, lock_id, N: tl.constexpr):
    while tl.atomic_cas(lock + lock_id, 0, 1) == 1:  # @oob-lock
        pass
    tl.store(dw + tl.arange(0, N), tl.load(dw + tl.arange(0, N)) + 1)
    tl.atomic_xchg(lock + lock_id, 0)


@triton.jit
def layer_norm_bwd_dwdb(X, DY, DW, DB, Lock, stride, N, GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    # The lock pattern of Triton's LayerNorm tutorial (05-layer-norm.py, _layer_norm_bwd_dx_fused), as is.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    partial_dw = (dy * x).to(x.dtype)
    partial_db = (dy).to(x.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.atomic_xchg(Lock, 0)


@triton.jit
def layer_norm_bwd_dwdb_sum(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr,
                            BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.)
        db += tl.load(DB + offs, mask=mask, other=0.)
    tl.store(FINAL_DW + cols, tl.sum(dw, axis=0), mask=cols < N)
    tl.store(FINAL_DB + cols, tl.sum(db, axis=0), mask=cols < N)


@triton.jit
def every_atomic(x, flag):
    v = tl.program_id(0)
    tl.atomic_max(x, v)
    tl.atomic_min(x + 1, v)
    tl.atomic_xchg(x + 2, v)
    tl.atomic_add(x + 3, v)
    tl.atomic_cas(flag, 0, 1)  # the first program claims the flag; the others find it taken, once each


@triton.jit
def cas_loop_update(x):
    # An atomic multiply built from compare-and-swap: retried until no other program changed x in between.
    old = tl.load(x)
    while tl.atomic_cas(x, old, old * 2) != old:
        old = tl.load(x)


@triton.jit
def unmasked_tail(x, y, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    v = tl.load(x + offs, mask=offs < n)
    tl.store(y + offs, v)  # @tail-store


@triton.jit
def off_by_one(x, y, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    mask = offs <= n
    tl.store(y + offs, tl.load(x + offs, mask=mask), mask=mask)  # @off-by-one


@triton.jit
def rows_copy(x, y, n_rows, n_cols, x_row_stride, B: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, B)
    mask = cols < n_cols
    v = tl.load(x + row * x_row_stride + cols, mask=mask)  # @stride-load
    tl.store(y + row * n_cols + cols, v, mask=mask)


@triton.jit
def shifted_left(x, y, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    mask = offs < n
    tl.store(y + offs, tl.load(x + offs - 1, mask=mask), mask=mask)  # @negative


@triton.jit
def far_store(y, far):
    tl.store(y + far + tl.arange(0, 4), tl.zeros((4,), dtype=tl.float32))  # @far


@triton.jit
def store_by_column(out, stride):
    tl.store(out + tl.program_id(1) * stride, 1.0)  # @grid2


@triton.jit
def store_by_two_ids(out, s0, s1):
    tl.store(out + tl.program_id(0) * s0 + tl.program_id(1) * s1, 1.0)  # @grid3


@triton.jit
def store_own_cell(out, s0, s1, s2):
    tl.store(out + tl.program_id(0) * s0 + tl.program_id(1) * s1 + tl.program_id(2) * s2, 1.0)


@triton.jit
def _add_row(ptr, v, N: tl.constexpr):
    cols = tl.arange(0, N)
    tl.store(ptr + cols, tl.load(ptr + cols) + v)  # @helper


@triton.jit
def calls_a_helper(x, out, N: tl.constexpr):
    i = tl.program_id(0)
    _add_row(out, tl.load(x + i * N + tl.arange(0, N)), N)


@triton.jit
def shift_in_place(x, y, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)  # @alias-load
    tl.store(y + offs, v, mask=mask)  # @alias-store


@triton.jit
def store_one(out, i0, i1, s0, s1, value):
    tl.store(out + i0 * s0 + i1 * s1, value)  # @one


@triton.jit
def own_lane(out, B: tl.constexpr):
    lanes = tl.arange(0, B)
    far = lanes + 1000  # every lane but the program's own is far outside `out`
    offs = tl.where(lanes == tl.program_id(0), lanes, far)
    mine = lanes == tl.program_id(0)
    tl.store(out + offs, lanes.to(tl.float32), mask=mine)
    tl.store(out + lanes, tl.load(out + lanes, mask=mine) + 1, mask=mine)


@triton.jit
def raises(y, B: tl.constexpr):
    tl.store(y + B + tl.arange(0, B), tl.zeros((B,), dtype=tl.float32))  # out of bounds, then
    tl.arange(0, 3)  # not a power of two: the interpreter raises


# ---------------------------------------------------------------------------------------------------------------
# Races


def scatter_inputs():
    torch.manual_seed(0)
    return torch.randn(6, 4), torch.tensor([0, 1, 0, 2, 1, 0]), torch.zeros(3, 4)


def test_a_read_add_store_scatter_races_between_the_programs_that_share_a_row():
    src, idx, out = scatter_inputs()
    with sanitize() as report:
        scatter_rmw[(6,)](src, idx, out, N=4)
    f = only(report)
    assert (f.kind, f.cls, f.kernel, f.tensor, f.index, f.shape) == ("race", "race", "scatter_rmw", "out", (0, 0),
                                                                     (3, 4))
    # Program 0 stores row 0; program 2 then loads it: the first pair, in the order the interpreter ran them.
    assert f.programs == pids(0, 2) and f.ops == ("stores to", "loads")
    assert lines(f) == (line("rmw-store"), line("rmw-load"))
    assert f.sites[0].function == "scatter_rmw" and f.sites[1].code.startswith("acc = tl.load(out")
    assert f.count == 8, "rows 0 and 1 are shared (4 elements each); row 2 has one program"
    assert torch.allclose(out, torch.zeros(3, 4).index_add_(0, idx, src)), "the interpreter still adds right"


def test_an_atomic_scatter_is_clean():
    src, idx, out = scatter_inputs()
    with sanitize() as report:
        scatter_atomic[(6,)](src, idx, out, N=4)
    assert report.clean and report.findings == [], str(report)


def test_every_program_storing_its_partial_into_row_zero_races():
    x, partial = torch.randn(5, 4), torch.zeros(5, 4)
    with sanitize() as report:
        partials_one_row[(5,)](x, partial, N=4)
    f = only(report)
    assert (f.kind, f.tensor, f.index, f.programs) == ("race", "partial", (0, 0), pids(0, 1))
    assert f.ops == ("stores to", "stores to") and lines(f) == (line("one-row"),) * 2 and f.count == 4


def test_partial_rows_then_a_second_launch_that_sums_them_is_clean():
    x, partial, out = torch.randn(5, 4), torch.zeros(5, 4), torch.zeros(4)
    with sanitize() as report:
        partials_own_row[(5,)](x, partial, N=4)
        sum_rows[(1,)](partial, out, 5, N=4)  # reads what every program of the first launch wrote: no race
    assert len(report.launches) == 2 and report.clean, str(report)
    assert torch.allclose(out, 2 * x.sum(0))


def test_a_lock_released_before_the_accesses_guards_nothing():
    x, dw, lock = torch.randn(5, 4), torch.zeros(4), torch.zeros(1, dtype=torch.int32)
    with sanitize() as report:
        lock_released_early[(5,)](x, dw, lock, N=4)
    f = only(report)
    assert (f.kind, f.tensor, f.index, f.programs, f.ops) == ("race", "dw", (0,), pids(0, 1), ("stores to", "loads"))
    assert lines(f) == (line("early-store"), line("early-load"))


def test_the_layer_norm_tutorials_spin_lock_is_clean():
    torch.manual_seed(0)
    M, N, GROUP = 12, 10, 4
    x, dy = torch.randn(M, N), torch.randn(M, N)
    locks = torch.zeros(2 * GROUP, dtype=torch.int32)
    dw, db = torch.zeros(GROUP, N), torch.zeros(GROUP, N)
    final_dw, final_db = torch.empty(N), torch.empty(N)
    with sanitize() as report:
        layer_norm_bwd_dwdb[(M,)](x, dy, dw, db, locks, x.stride(0), N, GROUP_SIZE_M=GROUP, BLOCK_SIZE_N=16)
        layer_norm_bwd_dwdb_sum[(1,)](dw, db, final_dw, final_db, GROUP, N, BLOCK_SIZE_M=4, BLOCK_SIZE_N=16)
    assert report.clean, str(report)
    assert torch.allclose(final_dw, (x * dy).sum(0), atol=1e-5) and torch.allclose(final_db, dy.sum(0), atol=1e-5)
    assert locks[:GROUP].tolist() == [0] * GROUP and locks[GROUP:].tolist() == [1] * GROUP


def test_a_test_and_set_lock_made_with_exchanges_guards_its_accesses_and_is_caught_kept():
    x, dw, lock = torch.randn(5, 4), torch.zeros(4), torch.zeros(1, dtype=torch.int32)
    with sanitize() as report:
        tas_lock[(5,)](x, dw, lock, N=4, RELEASE=True)
    assert report.clean and torch.allclose(dw, x.sum(0)), str(report)
    with sanitize() as report:
        tas_lock[(5,)](x, dw, lock.zero_(), N=4, RELEASE=False)
    f = report.findings[0]
    assert (f.kind, f.tensor, f.programs, f.ops, lines(f)) == ("lock", "lock", pids(0), ("takes",), (line("tas-take"),))
    assert report.launches[0].programs == pids(0, 1)


def test_atomics_never_race_with_each_other():
    x, flag = torch.zeros(4, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    with sanitize() as report:
        every_atomic[(6,)](x, flag)
    assert report.clean, str(report)
    assert x.tolist() == [5, 0, 5, 15] and flag.tolist() == [1]


def test_a_compare_and_swap_loop_is_an_atomic_update_not_a_lock_left_taken():
    x = torch.ones(1, dtype=torch.int32)
    with sanitize() as report:
        cas_loop_update[(5,)](x)
    assert report.clean, str(report)
    assert x.tolist() == [32]


# ---------------------------------------------------------------------------------------------------------------
# Out of bounds


def test_no_mask_on_the_tail_is_out_of_bounds():
    x, y = torch.randn(10), torch.zeros(10)
    with sanitize() as report:
        unmasked_tail[(3,)](x, y, 10, B=4)
    f = only(report)
    assert (f.kind, f.cls, f.tensor, f.index, f.shape) == ("out-of-bounds", "out-of-bounds", "y", (10,), (10,))
    assert f.programs == pids(2) and f.ops == ("stores to",) and lines(f) == (line("tail-store"),)
    assert f.count == 2 and "past the last element" in f.outside
    assert torch.equal(y, x), "the two stores out of bounds were not made"


def test_a_mask_off_by_one_is_out_of_bounds():
    x, y = torch.randn(10), torch.zeros(10)
    with sanitize() as report:
        off_by_one[(3,)](x, y, 10, B=4)
    f = only(report)
    assert (f.tensor, f.index, f.programs, f.ops) == ("x", (10,), pids(2), ("loads",))
    assert lines(f) == (line("off-by-one"),) and f.count == 2, "x[10] loaded, y[10] stored: one lane each"


def test_a_row_stride_that_ignores_the_padding_reads_between_the_elements():
    storage = torch.randn(4, 8)
    x, y = storage[:, :6], torch.zeros(4, 6)  # (4, 6) view of rows padded to 8
    with sanitize() as report:
        rows_copy[(4,)](x, y, 4, 6, 6, B=8)  # row stride 6 (n_cols) where x's is 8
    f = only(report)
    assert (f.kind, f.tensor, f.programs, f.ops) == ("out-of-bounds", "x", pids(1), ("loads",))
    assert f.index == (6,) and "between the elements" in f.outside, "offset 6: row 0's padding"
    assert lines(f) == (line("stride-load"),)
    with sanitize() as report:
        rows_copy[(4,)](x, y, 4, 6, x.stride(0), B=8)
    assert report.clean and torch.equal(y, x), str(report)


def test_a_negative_offset_is_out_of_bounds_inside_the_storage_or_outside_it():
    storage = torch.randn(9)
    x, y = storage[1:], torch.zeros(8)  # x[-1] is storage[0]: memory, but no element of x
    with sanitize() as report:
        shifted_left[(2,)](x, y, 8, B=4)
    f = only(report)
    assert (f.tensor, f.index, f.programs, f.ops, f.count) == ("x", (-1,), pids(0), ("loads",), 1)
    assert "1 element before the first element" in f.outside and lines(f) == (line("negative"),)
    x = storage.clone()[:8]  # its own storage, starting at x[0]
    with sanitize() as report:
        shifted_left[(2,)](x, y, 8, B=4)
    f = only(report)
    assert (f.tensor, f.index, f.programs) == ("x", (-1,), pids(0))
    assert y[0] == 0 and torch.equal(y[1:], x[:-1]), "the load outside every storage was not made (it reads 0)"


def test_an_access_far_outside_every_tensor_is_not_made_and_reported():
    y = torch.zeros(4)
    with sanitize() as report:
        far_store[(1,)](y, 1 << 40)  # 4 TiB past y: made, it would crash or overwrite the interpreter's memory
    f = only(report)
    assert (f.kind, f.tensor, f.index, f.count) == ("out-of-bounds", "y", (1 << 40,), 4)
    assert lines(f) == (line("far"),) and "past the last element" in f.outside
    assert y.tolist() == [0.0] * 4


def test_masked_off_lanes_are_never_counted():
    out = torch.zeros(4)
    with sanitize() as report:
        own_lane[(4,)](out, B=4)  # masked lanes point 1000 elements away and at other programs' elements
    assert report.clean, str(report)
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_a_lock_never_released_stops_the_launch_and_is_reported():
    x, dw, lock = torch.randn(5, 4), torch.zeros(4), torch.zeros(1, dtype=torch.int32)
    with sanitize() as report:
        lock_never_released[(5,)](x, dw, lock, N=4)  # program 1 would spin forever
    f = report.findings[0]
    assert (f.kind, f.cls, f.tensor, f.index, f.programs) == ("lock", "race", "lock", (0,), pids(0))
    assert lines(f) == (line("never-take"),)
    assert report.launches[0].programs == pids(0, 1), "stopped in program 1, the first that waits"
    assert "never gave it back" in f.sentence() and "spins forever" in f.sentence()


def test_a_lock_that_is_never_free_stops_the_launch():
    x, dw, lock = torch.randn(5, 4), torch.zeros(4), torch.ones(1, dtype=torch.int32)  # taken before the launch
    with sanitize() as report:
        lock_never_released[(5,)](x, dw, lock, N=4)
    f = only(report)
    assert (f.kind, f.tensor, f.index, f.programs, f.ops) == ("lock", "lock", (0,), pids(0), ("waits for",))
    assert lines(f) == (line("never-take"),) and "spins forever in program (0, 0, 0)" in f.sentence()


def test_a_lock_the_last_program_keeps_is_reported_though_no_program_waited():
    dw, lock = torch.zeros(4), torch.zeros(1, dtype=torch.int32)
    with sanitize() as report:
        last_keeps_the_lock[(3,)](dw, lock, 3, N=4)
    f = only(report)
    assert (f.kind, f.tensor, f.programs, f.ops, lines(f)) == ("lock", "lock", pids(2), ("takes",), (line("last-take"),))
    assert dw.tolist() == [3.0] * 4


def test_a_lock_out_of_bounds_is_reported_as_such_and_spins_no_longer():
    dw, lock = torch.zeros(4), torch.zeros(1, dtype=torch.int32)
    with sanitize() as report:
        lock_out_of_bounds[(2,)](dw, lock, 1, N=4)  # no lock there: the compare-and-swap is not made, fails
    first, then = report.findings
    assert (first.kind, first.tensor, first.index, first.programs) == ("out-of-bounds", "lock", (1,), pids(0))
    assert (then.kind, then.ops, lines(then)) == ("lock", ("waits for",), (line("oob-lock"),))
    assert lines(first) == (line("oob-lock"),) and first.ops == ("updates atomically",)


# ---------------------------------------------------------------------------------------------------------------
# Grids, helpers, arguments, views, dtypes


def test_program_ids_of_a_2d_grid():
    out = torch.zeros(3)
    with sanitize() as report:
        store_by_column[(2, 3)](out, 1)  # programs (0, j) and (1, j) both store out[j]
    f = only(report)
    assert (f.index, f.programs, f.count, lines(f)) == ((0,), pids((0, 0, 0), (1, 0, 0)), 3, (line("grid2"),) * 2)
    assert report.launches[0].grid == (2, 3, 1)


def test_program_ids_of_a_3d_grid():
    out = torch.zeros(2, 3)
    with sanitize() as report:
        store_by_two_ids[(2, 3, 2)](out, *out.stride())  # programs (i, j, 0) and (i, j, 1) both store out[i, j]
    f = only(report)
    assert (f.tensor, f.index, f.programs, f.count) == ("out", (0, 0), pids((0, 0, 0), (0, 0, 1)), 6)
    out = torch.zeros(2, 3, 2)
    with sanitize() as report:
        store_own_cell[(2, 3, 2)](out, *out.stride())
    assert report.clean and out.sum() == 12, str(report)
    assert report.launches[0].programs[:3] == pids((0, 0, 0), (0, 0, 1), (0, 1, 0)) and report.launches[0].grid == (
        2, 3, 2)


def test_an_access_in_a_jit_helper_names_the_helpers_line():
    x, out = torch.randn(3, 4), torch.zeros(4)
    with sanitize() as report:
        calls_a_helper[(3,)](x, out, N=4)
    f = only(report)
    assert f.sites[0] == Site("_add_row", line("helper"), "tl.store(ptr + cols, tl.load(ptr + cols) + v)  # @helper")
    assert (f.kernel, f.tensor, f.programs, f.ops) == ("calls_a_helper", "out", pids(0, 1), ("stores to", "loads"))


def test_tensor_arguments_passed_by_keyword_keep_their_names():
    x, y = torch.randn(10), torch.zeros(10)
    with sanitize() as report:
        unmasked_tail[(3,)](n=10, y=y, x=x, B=4)
    f = only(report)
    assert (f.tensor, f.index) == ("y", (10,))
    assert set(report.launches[0].tensors) == {"x", "y"} and report.launches[0].tensors["y"] == ((10,), "float32")


def test_a_reinterpreted_tensor_is_the_tensor_it_wraps():
    xi, y = torch.arange(16, dtype=torch.int32).view(4, 4), torch.zeros(4, 4)
    with sanitize() as report:
        partials_own_row[(4,)](triton.reinterpret(xi, tl.float32), y, N=4)
    assert report.clean and report.launches[0].tensors["x"] == ((4, 4), "int32"), str(report)
    assert torch.equal(y, 2 * xi.view(torch.float32)), "every load was made"


def test_an_argument_whose_memory_is_unknown_is_left_alone(monkeypatch):
    add = sanitizer._add_tensors
    monkeypatch.setattr(sanitizer, "_add_tensors", lambda out, name, value: name != "x" and add(out, name, value))
    x, partial = torch.randn(5, 4), torch.zeros(1, 4)
    with sanitize() as report:
        partials_one_row[(5,)](x, partial, N=4)
    f = only(report)
    assert (f.kind, f.tensor, f.programs) == ("race", "partial", pids(0, 1)), "what is known is still read"
    assert torch.equal(partial[0], x[4]), "x's loads were made, though x is no argument the sanitizer knows"


def test_two_views_of_one_buffer_race_where_they_overlap():
    buf = torch.arange(9, dtype=torch.float32)
    x, y = buf[1:], buf[:-1]  # y[i] = x[i] shifts the buffer left in place
    with sanitize() as report:
        shift_in_place[(2,)](x, y, 8, B=4)
    f = only(report)
    # buf[4] is x[3] (loaded by program 0) and y[4] (stored by program 1).
    assert (f.kind, f.programs, f.ops) == ("race", pids(0, 1), ("loads", "stores to"))
    assert (f.tensor, f.index) in {("x", (3,)), ("y", (4,))} and f.count == 1
    assert lines(f) == (line("alias-load"), line("alias-store"))
    assert "x[3]" in f.sentence() and "y[4]" in f.sentence(), "both views' names of the shared element"


def test_a_transposed_view_gives_the_views_index():
    out = torch.zeros(3, 5).t()  # shape (5, 3), strides (1, 5)
    with sanitize() as report:
        store_one[(4,)](out, 2, 1, *out.stride(), 1.0)
    f = only(report)
    assert (f.tensor, f.index, f.shape, f.programs) == ("out", (2, 1), (5, 3), pids(0, 1))
    assert out[2, 1] == 1 and out.sum() == 1


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.float16, torch.float64])
def test_indices_count_elements_whatever_the_dtype(dtype):
    out = torch.zeros(4, 5, dtype=dtype)
    with sanitize() as report:
        store_one[(2,)](out, 3, 2, *out.stride(), 7)
    f = only(report)
    assert (f.tensor, f.index, f.programs) == ("out", (3, 2), pids(0, 1))
    assert report.launches[0].tensors["out"] == ((4, 5), str(dtype).replace("torch.", ""))
    out = torch.zeros(4, dtype=dtype)
    with sanitize() as report:
        store_one[(1,)](out, 5, 0, 1, 1, 7)  # one past the end, which lies in out's storage only if it is padded
    f = only(report)
    assert (f.kind, f.tensor, f.index) == ("out-of-bounds", "out", (5,))
    assert "2 elements past the last element" in f.outside


# ---------------------------------------------------------------------------------------------------------------
# The report, the failure, the records


def test_the_report_and_the_failure_a_check_raises():
    src, idx, out = scatter_inputs()
    with sanitize() as report:
        scatter_rmw[(6,)](src, idx, out, N=4)
    failure = report.failure("scatter_add")
    assert isinstance(failure, GradingFailure) and failure.cls == "race"
    said = failure.sentence
    assert said.startswith("scatter_add launched scatter_rmw, which races on out[0, 0]: program (0, 0, 0) stores")
    for part in ("program (0, 0, 0) stores to", "program (2, 0, 0) loads", f"line {line('rmw-store')}",
                 f"line {line('rmw-load')}", "atomic", "lock"):
        assert part in said, part
    assert failure.where == "in scatter_rmw: out (shape (3, 4)), programs (0, 0, 0), (2, 0, 0)"
    text = str(report)
    assert text.splitlines()[0] == "sanitizer: 1 launch(es), 1 finding(s)"
    assert text.splitlines()[1] == f"- race: {report.findings[0].sentence()}"
    assert report._repr_markdown_().count("\n\n- ") == 1


def test_an_out_of_bounds_sentence_names_the_tensor_where_it_lies_and_the_line():
    x, y = torch.randn(10), torch.zeros(10)
    with sanitize() as report:
        unmasked_tail[(3,)](x, y, 10, B=4)
    said = report.findings[0].sentence()
    assert said == (f"unmasked_tail stores to y + 10 in program (2, 0, 0) (line {line('tail-store')} of "
                    "unmasked_tail: `tl.store(y + offs, v)  # @tail-store`), 1 element past the last element of y "
                    "(shape (10,)): no element of any tensor argument (2 accesses out of bounds in this launch). A "
                    "mask is missing or off by one, or a stride or an offset is wrong: on a GPU this reads or "
                    "overwrites another tensor's memory, or faults.")
    failure = report.failure("copy")
    assert failure.cls == "out-of-bounds" and failure.sentence == "copy launched " + said.replace(
        "unmasked_tail stores", "unmasked_tail, which stores", 1)


def test_a_clean_report_and_an_empty_one():
    with sanitize() as report:
        pass
    assert report.clean and report.launches == [] and report.failure("f") is None
    assert "no interpreted launch ran" in str(report)
    x, out = torch.randn(2, 4), torch.zeros(2, 4)
    with sanitize() as report:
        partials_own_row[(2,)](x, out, N=4)
    assert str(report) == "sanitizer: 1 launch(es), no race, no access out of bounds"


def findings_of_every_kind() -> list[Finding]:
    found = []
    src, idx, out = scatter_inputs()
    x, dw, lock = torch.randn(5, 4), torch.zeros(4), torch.zeros(1, dtype=torch.int32)
    with sanitize() as report:
        scatter_rmw[(6,)](src, idx, out, N=4)
        unmasked_tail[(3,)](torch.randn(10), torch.zeros(10), 10, B=4)
        lock_never_released[(5,)](x, dw, lock, N=4)
        lock_never_released[(5,)](x, dw, torch.ones(1, dtype=torch.int32), N=4)
        far_store[(1,)](torch.zeros(4), 1 << 40)
        buf = torch.arange(9.0)
        shift_in_place[(2,)](buf[1:], buf[:-1], 8, B=4)
    found = report.findings
    assert [f.kind for f in found] == ["race", "out-of-bounds", "lock", "lock", "out-of-bounds", "race"]
    assert found[3].ops == ("waits for",) and found[5].also
    return found


def test_a_record_round_trips_through_json():
    for f in findings_of_every_kind():
        assert read_record(json.loads(json.dumps(f.record()))) == f


def good_record() -> dict:
    return Finding("race", "k", "out", (0, 1), pids(0, 2), (Site("k", 3, "x"), Site("k", 4, "y")),
                   ("stores to", "loads"), 2, "", (3, 4)).record()


@pytest.mark.parametrize("change", [
    lambda d: d.update(kind="segfault"),  # no such kind
    lambda d: d.pop("programs"),  # a key missing
    lambda d: d.pop("sites"),
    lambda d: d.update(programs=[[0, 0], [2, 0, 0]]),  # a program id with two coordinates
    lambda d: d.update(programs=[[True, 0, 0], [2, 0, 0]]),  # a bool for an int
    lambda d: d.update(programs=[["0", 0, 0], [2, 0, 0]]),  # a string for an int
    lambda d: d.update(programs=[]),  # no program
    lambda d: d.update(programs=5),  # not a list
    lambda d: d.update(sites=[["k", "3", "x"], ["k", 4, "y"]]),  # a line that is a string
    lambda d: d.update(sites=[["k", True, "x"], ["k", 4, "y"]]),  # a line that is a bool
    lambda d: d.update(sites=[["k", 3, "x"]]),  # fewer sites than programs
    lambda d: d.update(sites=[{"function": "k"}, ["k", 4, "y"]]),  # a site that is a dict
    lambda d: d.update(index=[1.5, 2]),  # a float index
    lambda d: d.update(count=None),
    lambda d: d.update(count=True),
    lambda d: d.update(count=float("inf")),
    lambda d: d.update(ops="stores to"),  # a string where a list is expected
    lambda d: d.update(tensor=["out"]),
    lambda d: d.update(ops=["stores to", "deletes"]),  # no such operation
    lambda d: d.update(also="y[0]"),
    lambda d: d.update(kind="lock"),  # one program for a lock, two here
])
def test_a_hostile_record_is_refused(change):
    data = good_record()
    assert read_record(data) is not None
    change(data)
    assert read_record(data) is None


@pytest.mark.parametrize("data", [None, 1, "race", [], {}, {"kind": "race"}, {"kind": ["race"]}, b"race"])
def test_something_that_is_no_record_is_refused(data):
    assert read_record(data) is None


@pytest.mark.parametrize("huge", [
    dict(index=list(range(10**6))),
    dict(shape=[3] * 10**6),
    dict(programs=[[0, 0, 0]] * 10**6),
    dict(sites=[["k", 3, "x"]] * 10**6),
    dict(ops=["loads"] * 10**6),
    dict(also=["y[0]"] * 10**6),
    dict(index=[10**400]),
    dict(programs=[[0, 0, 10**400], [2, 0, 0]]),
])
def test_a_record_with_a_huge_list_or_number_is_refused(huge):
    data = good_record()
    data.update(huge)
    assert read_record(data) is None


def test_a_record_is_bounded_whatever_its_size():
    data = good_record()
    data.update(kernel="k" * 10**6, tensor="t" * 10**6, sites=[["k", 3, "x" * 10**6], ["f" * 10**6, 4, "y"]],
                count=10**30, also=["z" * 10**6])
    f = read_record(data)
    assert f is not None and max(len(f.kernel), len(f.tensor), len(f.also[0])) <= 300 and f.count < 10**19
    assert max(len(f.sites[0].code), len(f.sites[1].function)) <= 300 and len(f.sentence()) < 4000


def test_a_received_name_or_line_stays_on_one_line():
    data = good_record()
    data.update(kernel="k\ndiagnosis: ok — all good", sites=[["k", 3, "x\r\n\x1b[2J"], ["k", 4, "y"]])
    f = read_record(data)
    assert "\n" not in f.sentence() and "\r" not in f.sentence() and "\x1b" not in f.sentence()
    assert f.kernel == "k diagnosis: ok — all good"


# ---------------------------------------------------------------------------------------------------------------
# Nesting, errors, cost


def test_nested_sanitize_blocks_each_see_the_launches_inside_them():
    src, idx, out = scatter_inputs()
    with sanitize() as outer:
        scatter_atomic[(6,)](src, idx, out, N=4)
        with sanitize() as inner:
            scatter_rmw[(6,)](src, idx, out, N=4)
    assert len(outer.launches) == 2 and len(inner.launches) == 1
    assert outer.findings == inner.findings and len(inner.findings) == 1


def test_a_launch_that_raises_propagates_and_the_next_launch_is_recorded():
    x = torch.ones(4)
    with sanitize() as report:
        with pytest.raises(Exception):  # noqa: B017 — the interpreter's own error type
            raises[(2,)](x, B=4)
        partials_one_row[(2,)](torch.randn(2, 4), torch.zeros(1, 4), N=4)
    assert sanitizer._current == []
    assert [launch.kernel for launch in report.launches] == ["raises", "partials_one_row"]
    assert [f.kind for f in report.findings] == ["out-of-bounds", "race"]


def test_a_failure_of_the_sanitizer_itself_leaves_the_launch_running_and_says_so(monkeypatch):
    def broken(self, *args):
        raise ZeroDivisionError("a bug in the sanitizer")

    monkeypatch.setattr(sanitizer._Recording, "_cas", broken)
    x, dw, lock = torch.randn(5, 4), torch.zeros(4), torch.zeros(1, dtype=torch.int32)
    with sanitize() as report:
        layer_norm_bwd_dwdb_sum[(1,)](dw.view(1, 4), dw.view(1, 4), torch.empty(4), torch.empty(4), 1, 4,
                                      BLOCK_SIZE_M=1, BLOCK_SIZE_N=4)
        lock_released_early[(5,)](x, dw, lock, N=4)  # its race goes unseen: recording stops at the first CAS
        scatter_rmw[(6,)](*scatter_inputs(), N=4)  # the next launch is recorded again
    assert [launch.broken for launch in report.launches] == ["", "ZeroDivisionError: a bug in the sanitizer", ""]
    assert torch.allclose(dw, x.sum(0)), "the launch ran to its end, unrecorded"
    assert [f.kernel for f in report.findings] == ["scatter_rmw"]
    assert "the sanitizer itself failed in lock_released_early (ZeroDivisionError" in str(report)
    assert sanitizer._current == []


def test_without_sanitize_the_interpreter_records_nothing(monkeypatch):
    def refuse(*args):
        raise AssertionError("a launch was recorded outside sanitize()")

    sanitizer._install()
    monkeypatch.setattr(sanitizer, "_Recording", refuse)
    src, idx, out = scatter_inputs()
    scatter_rmw[(6,)](src, idx, out, N=4)
    assert sanitizer._current == [] and sanitizer._recorders == []


def test_a_large_launch_is_read_but_not_kept_for_drawing(monkeypatch):
    src, idx, out = scatter_inputs()
    with sanitize() as report:
        scatter_rmw[(6,)](src, idx, out, N=4)
    assert set(report.launches[0].touched) == {"src", "idx", "out"}
    monkeypatch.setattr(sanitizer, "MAX_KEPT", 6 * 4 * 3)  # fewer accesses than the launch makes
    with sanitize() as report:
        scatter_rmw[(6,)](src, idx, out, N=4)
    assert report.launches[0].touched == {} and report.findings[0].count == 8


# ---------------------------------------------------------------------------------------------------------------
# The public entry


def test_course_sanitize_is_the_sanitizer():
    assert course.sanitize is sanitize and "sanitize" in course.__all__


def test_a_student_using_course_sanitize_inside_a_checked_call_trips_no_tripwire():
    src, idx, out = scatter_inputs()

    def student(src, idx, out):
        with course.sanitize() as report:
            scatter_atomic[(6,)](src, idx, out, N=4)
        print(report)  # a student looking at their own kernel
        return out, report.clean, report.findings

    with forbid_helpers() as record:
        _, clean, findings = student(src, idx, out)
    assert record == [] and clean and findings == []
    got, clean, _ = call_student("scatter_add", student, src, idx, out)
    assert clean and torch.equal(got, out)


def test_a_student_sanitizing_a_racy_kernel_inside_a_checked_call_gets_the_race_raised():
    src, idx, out = scatter_inputs()

    def student(src, idx, out):
        with course.sanitize() as report:
            scatter_rmw[(6,)](src, idx, out, N=4)
        print(report)
        return out

    with pytest.raises(GradingFailure) as raised:
        call_student("scatter_add", student, src, idx, out)
    assert raised.value.cls == "race"


# ---------------------------------------------------------------------------------------- loads sent to the grader


@triton.jit
def strided_rows(x, out, stride, N: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.arange(0, N)
    tl.store(out + i * N + cols, tl.load(x + i * stride + cols))


def _loaded_pairs(launch, tensor: str) -> set[tuple[int, int]]:
    program, flat = launch.touched[tensor]["load"]
    return set(zip(program.tolist(), flat.tolist(), strict=True))


def test_a_launchs_loads_travel_as_runs_and_read_back_the_same():
    # x as a strided view with a gap between its rows: each program's row is one run of the view's own elements.
    x = torch.randn(5, 6)[:, :4]
    with sanitize() as report:
        strided_rows[(5,)](x, torch.zeros(5, 4), x.stride(0), N=4)
    launch = report.launches[0]
    record = launch.loads()
    assert report.clean and record["kernel"] == "strided_rows" and len(record["programs"]) == 5
    assert len(record["tensors"]["x"]) == 3 * 5  # one run [program, first, 4] per program
    assert json.loads(json.dumps(record)) == record  # plain JSON, as the worker sends it
    back = sanitizer.read_loads(record)
    assert back.programs == launch.programs and back.grid == (5, 1, 1) and not back.findings
    assert _loaded_pairs(back, "x") == _loaded_pairs(launch, "x") and len(_loaded_pairs(back, "x")) == 20
    assert back.touched["out"]["load"].shape == (2, 0)  # only stored to
    assert launch.loads(budget=4) is None  # five runs do not fit in four


def _record(**change):
    record = {"kernel": "k", "programs": [[0, 0, 0], [1, 0, 0]], "tensors": {"K_ptr": [0, 0, 16, 1, 16, 16]}}
    return {**record, **change}


@pytest.mark.parametrize("bad", [
    None, [], _record(extra=1), _record(kernel=3), _record(programs=[]), _record(programs=[[0, 0]]),
    _record(programs=[[0, 0, -1]]), _record(programs=[[True, 0, 0]]),
    _record(tensors={"K_ptr": [0, 0, 16, 1, 16]}),  # not whole runs
    _record(tensors={"K_ptr": [2, 0, 16]}),  # a program the launch does not have
    _record(tensors={"K_ptr": [0, 0, 0]}),  # an empty run
    _record(tensors={"K_ptr": [0, sanitizer.MAX_PLOTTED - 1, 2]}),  # past the largest tensor kept
    _record(tensors={"K_ptr": [0, 1 << 62, 1 << 14]}),
    _record(tensors={"K_ptr": [0, 0, 1.5]}), _record(tensors={"K_ptr": "0 0 16"}), _record(tensors={3: [0, 0, 1]}),
    _record(tensors={"K_ptr": [0, 0, 1] * (sanitizer.MAX_LOAD_RUNS + 1)}),
    _record(tensors={f"t{i}": [0, 0, 1 << 14] for i in range(300)}),  # more elements than a report covers
], ids=lambda v: repr(v)[:50])
def test_malformed_loads_read_back_as_nothing(bad):
    assert sanitizer.read_loads(bad) is None


def test_received_loads_are_launches_of_the_checks_report():
    from course import witness

    with sanitize() as report:
        witness.report(witness.Measurement(loads=(_record(),)))
    (launch,) = report.launches
    assert launch.kernel == "k" and _loaded_pairs(launch, "K_ptr") == {(p, e) for p in (0, 1) for e in range(16 * p, 16 * p + 16)}
    assert report.clean
