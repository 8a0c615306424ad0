"""course.shuffled_programs: the interpreter runs each launch's programs in a drawn order, every program once."""

import pytest
import torch
import triton
import triton.language as tl

import course
from course.sanitizer import sanitize


@triton.jit
def log_order(step, order):
    """Each program takes the next slot of ``step`` and writes its own linear id there."""
    pid = (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(2) + tl.program_id(2)
    slot = tl.atomic_add(step, 1)
    tl.store(order + slot, pid)


@triton.jit
def add_all(x, out, B: tl.constexpr):
    """out[0] += the sum of x's block: a float sum whose bits depend on the programs' order."""
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.atomic_add(out, tl.sum(tl.load(x + offs), axis=0))


def order_of(grid, seed=None):
    n = grid[0] * grid[1] * grid[2]
    step, order = torch.zeros(1, dtype=torch.int32), torch.full((n,), -1, dtype=torch.int32)
    if seed is None:
        log_order[grid](step, order)
    else:
        with course.shuffled_programs(seed):
            log_order[grid](step, order)
    return order.tolist()


def test_without_it_the_interpreter_runs_the_grid_in_order():
    assert order_of((2, 3, 2)) == list(range(12))


@pytest.mark.parametrize("grid", [(7, 1, 1), (2, 3, 2), (1, 1, 5)])
def test_every_program_runs_once_in_another_order(grid):
    got = order_of(grid, seed=1)
    assert sorted(got) == list(range(grid[0] * grid[1] * grid[2]))
    assert got != sorted(got)


def test_the_same_seed_gives_the_same_orders_and_another_seed_others():
    assert order_of((4, 3, 1), seed=5) == order_of((4, 3, 1), seed=5)
    assert order_of((4, 3, 1), seed=5) != order_of((4, 3, 1), seed=6)


def test_each_launch_of_a_block_draws_its_own_order():
    orders = []
    with course.shuffled_programs(2):
        for _ in range(2):
            step, order = torch.zeros(1, dtype=torch.int32), torch.zeros(10, dtype=torch.int32)
            log_order[(10, 1, 1)](step, order)
            orders.append(order.tolist())
    assert orders[0] != orders[1]


def test_an_atomic_float_sum_changes_its_last_bits_with_the_order():
    # Terms of very different sizes: each order rounds the running sum differently. Bound: 6 orders of 16 blocks
    # give at least two distinct float32 sums (seed fixed; the test is deterministic).
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(16 * 16, generator=gen) * torch.logspace(-4, 4, 16 * 16)).to(torch.float32)
    sums = set()
    for seed in range(6):
        out = torch.zeros(1, dtype=torch.float32)
        with course.shuffled_programs(seed):
            add_all[(16,)](x, out, B=16)
        sums.add(out.item())
    assert len(sums) > 1
    assert max(sums) - min(sums) < 1e-3 * x.abs().sum().item()  # the same sum, rounded differently


def test_the_sanitizer_names_the_programs_that_ran():
    step, order = torch.zeros(1, dtype=torch.int32), torch.zeros(6, dtype=torch.int32)
    with sanitize() as report, course.shuffled_programs(3):
        log_order[(6,)](step, order)
    (launch,) = report.launches
    assert [p[0] for p in launch.programs] == order.tolist()


def test_a_seed_that_is_no_int_is_refused():
    with pytest.raises(TypeError, match="seed must be an int"):
        with course.shuffled_programs("3"):
            pass
