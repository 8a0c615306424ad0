"""kernels._common.row_launch, the one block and warp rule, and the choices each op makes with it.

The tables pin every op's block sizes and warps at the edges of its rule: they are what the
compile check (``python -m kernels.compile_check``) verified to compile without spilling, so a
change to them must be deliberate.
"""

import importlib

import pytest
import torch

from kernels import _common as common
from kernels import _norm as norm_module

softmax_module = importlib.import_module("kernels.softmax")
ce_module = importlib.import_module("kernels.cross_entropy")
scatter_module = importlib.import_module("kernels.scatter_add")


def launch(block, whole_row, num_warps):
    return common.RowLaunch(block, whole_row, num_warps)


@pytest.mark.parametrize(
    "n_cols, kwargs, expected",
    [
        (1, {"whole_row_max": 16}, launch(1, True, 4)),  # one element: a block of one
        (13, {"whole_row_max": 16}, launch(16, True, 4)),  # the next power of two holds the row
        (16, {"whole_row_max": 16}, launch(16, True, 4)),  # exactly the largest whole row
        (17, {"whole_row_max": 16, "loop_block": 8}, launch(8, False, 4)),  # one past it: walked in blocks of 8
        (5, {"loop_block": 8}, launch(8, False, 4)),  # no whole rows: a walk, of one block shorter than loop_block
        (100, {"loop_block": 8}, launch(8, False, 4)),
        (1024, {"whole_row_max": 1 << 14, "four_warps_max": 1024}, launch(1024, True, 4)),  # the warp steps' edges
        (1025, {"whole_row_max": 1 << 14, "four_warps_max": 1024}, launch(2048, True, 8)),
        (4096, {"whole_row_max": 1 << 14, "four_warps_max": 1024}, launch(4096, True, 8)),
        (4097, {"whole_row_max": 1 << 14, "four_warps_max": 1024}, launch(8192, True, 16)),
    ],
)
def test_row_launch(n_cols, kwargs, expected):
    assert common.row_launch(n_cols, **kwargs) == expected


@pytest.mark.parametrize("backend, arch, name", [
    ("cuda", 75, "sm_75"), ("cuda", 86, "sm_86"), ("cuda", 89, "sm_89"), ("cuda", 80, "sm_80"), ("cuda", 87, "sm_80"),
    ("cuda", 90, "sm_90"), ("cuda", 100, "sm_90"), ("hip", "gfx942", "gfx942"),
])
def test_a_launchs_gpu_is_named_as_in_the_compile_checks_table(backend, arch, name):
    from kernels._target import GPUS

    assert common.target_name(common.LaunchTarget(backend, arch, 64 if backend == "hip" else 32, 1, 65536)) == name
    assert name in GPUS  # the per-target tables (attention, linear) have a row for it, checked by the compile check


def test_row_launch_refuses_a_row_it_cannot_hold_or_walk():
    with pytest.raises(ValueError, match="rows of 17 elements are longer than the 16 this kernel holds"):
        common.row_launch(17, whole_row_max=16)


@pytest.fixture(params=[True, False], ids=["interpreter", "gpu"])
def interpreted(request, monkeypatch):
    """Pick the blocks as in the interpreter or as on a GPU, whichever this machine has."""
    monkeypatch.setattr(common, "interpreted", lambda: request.param)
    return request.param


@pytest.mark.parametrize(
    "n_cols, dtype, forward, backward",
    [
        (1151, torch.float32, launch(2048, True, 8), launch(2048, True, 8)),  # odd row
        (4096, torch.float64, launch(4096, True, 8), launch(4096, True, 8)),  # the longest whole float64 backward row
        (4097, torch.float64, launch(8192, True, 16), launch(2048, False, 8)),  # one past it
        (8192, torch.float32, launch(8192, True, 16), launch(8192, True, 16)),  # the longest whole float32 backward row
    ],
)
def test_norm_blocks(interpreted, n_cols, dtype, forward, backward):
    assert norm_module.forward_launch(n_cols) == forward
    assert norm_module.backward_launch(n_cols, dtype) == backward


@pytest.mark.parametrize("interpret, target, warps", [
    (True, None, 16),  # the interpreter: warps do not matter there
    (False, common.LaunchTarget("cuda", 86, 32, 82, 101376), 32),  # 16 warps spill 8 B in float32 on sm_75/86/89
    (False, common.LaunchTarget("hip", "gfx942", 64, 304, 65536), 16),  # 16 waves of 64 lanes: 16 elements a lane
])
def test_norm_blocks_of_the_longest_forward_row(monkeypatch, interpret, target, warps):
    monkeypatch.setattr(norm_module, "interpreted", lambda: interpret)
    monkeypatch.setattr(norm_module, "launch_target", lambda: target)
    assert norm_module.forward_launch(16384) == launch(16384, True, warps)
    assert norm_module.backward_launch(16384, torch.float32) == launch(2048, False, 8)


def test_norm_forward_refuses_rows_past_one_block():
    with pytest.raises(ValueError, match="rows of 16385 elements are longer than the 16384"):
        norm_module.forward_launch(16385)


@pytest.mark.parametrize(
    "n_cols, on_gpu, in_interpreter",
    [
        (2048, launch(2048, True, 4), launch(2048, True, 4)),  # 16 elements a thread on 4 warps
        (2049, launch(4096, True, 8), launch(4096, True, 8)),
        (8192, launch(8192, True, 8), launch(8192, True, 8)),  # the longest row held in one block
        (32768, launch(4096, False, 8), launch(8192, False, 8)),  # walked: the interpreter takes bigger steps
    ],
)
def test_softmax_blocks(interpreted, n_cols, on_gpu, in_interpreter):
    assert softmax_module._launch(n_cols) == (in_interpreter if interpreted else on_gpu)


@pytest.mark.parametrize(
    "n_cols, on_gpu, in_interpreter",
    [
        (781, 1024, 1024),  # a row shorter than one step: one block of the next power of two
        (128256, 4096, 8192),  # a Llama-3 vocabulary, walked
    ],
)
def test_cross_entropy_blocks(interpreted, n_cols, on_gpu, in_interpreter):
    assert ce_module._block(n_cols) == (in_interpreter if interpreted else on_gpu)


@pytest.mark.parametrize("n_cols, block", [(1, 1), (33, 64), (1024, 1024), (4096, 1024)])  # D = 1, odd, the cap, past it
def test_scatter_add_column_blocks(n_cols, block):
    assert scatter_module._block_d(n_cols) == block
