"""kernels.memory_scaling: attention's extra peak memory on the CPU — T² when P is saved, T with recompute."""

import importlib

import pytest
import torch

import course
from kernels.memory_scaling import interpreter_tiles, loglog_slope, measure

pytestmark = pytest.mark.skipif(not course.INTERPRETED, reason="measures on the CPU, in Triton's interpreter")

F32 = 4  # bytes per float32


@pytest.fixture(scope="module")
def rows():
    # D = 16 so that T×T outgrows T×D early; T doubles, so the growth per step is plain to read.
    return measure([64, 128, 256], head_dim=16)


def test_recompute_keeps_only_o_l_d_and_the_gradients(rows):
    for r in rows:
        t, d = r["T"], r["D"]
        # O (T, D), L and D = rowsum(dO∘O) (T each), dq, dk, dv (T, D each): nothing T×T.
        assert r["recompute"] == (4 * t * d + 2 * t) * F32, r


def test_saved_p_holds_at_least_two_t_by_t_tensors_at_once(rows):
    for r in rows:
        assert r["saved_p"] >= 2 * r["T"] ** 2 * F32, r  # P, and dP or dS beside it in the backward


def test_growth_is_linear_with_recompute_and_quadratic_with_saved_p(rows):
    ts = [r["T"] for r in rows]
    assert loglog_slope(ts, [r["recompute"] for r in rows]) == pytest.approx(1.0, abs=0.02)
    assert loglog_slope(ts, [r["saved_p"] for r in rows]) > 1.7


def test_both_give_the_same_gradients(rows):
    assert max(r["max_rel_err"] for r in rows) < 1e-5  # float32


@pytest.mark.parametrize("t", [100, 256])  # T not a multiple of the tile; T one big tile
def test_the_count_does_not_depend_on_the_tile_size(t):
    own, = measure([t], head_dim=16)
    big, = measure([t], head_dim=16, tile=256)
    assert big["recompute"] == own["recompute"] and big["saved_p"] == own["saved_p"]
    assert big["max_rel_err"] < 1e-5


def test_interpreter_tiles_restores_the_kernels_own_tiles():
    module = importlib.import_module("kernels.attention")
    own = module._blocks
    with interpreter_tiles(64):
        assert module._blocks(16, torch.float32)[:2] == (64, 64)
    assert module._blocks is own
    with pytest.raises(ValueError, match="power of two"):
        with interpreter_tiles(100):
            pass
    assert module._blocks is own


def test_loglog_slope():
    assert loglog_slope([1, 2, 4, 8], [3, 6, 12, 24]) == pytest.approx(1.0)
    assert loglog_slope([1, 2, 4], [5, 20, 80]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        loglog_slope([1], [1])
