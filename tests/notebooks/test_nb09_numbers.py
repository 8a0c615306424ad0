"""Notebook 09's GPU numbers are the course's: the datasheet peaks of kernels/roofline.py, and a SPLIT discussion
that still matches the table the notebook prints from them."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

from kernels.roofline import PEAKS

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "09_matmul_backward_triton.py"
SMS = {"A100 80GB SXM": 108, "H100 SXM": 132}  # the datasheets' streaming multiprocessors (H100 SXM5: 132)


def code_cells() -> list[str]:
    cells = re.split(r"(?m)^# %%(.*)$", NOTEBOOK.read_text())[1:]
    return [body for marker, body in zip(cells[::2], cells[1::2]) if "[markdown]" not in marker]


def gpus() -> dict[str, tuple[int, float, float]]:
    for cell in code_cells():
        for node in ast.walk(ast.parse(cell)):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "GPUS" for t in node.targets):
                return ast.literal_eval(node.value)
    raise AssertionError("notebook 09 defines no GPUS table")


def test_the_gpu_table_holds_the_roofline_peaks():
    table = gpus()
    assert set(table) == set(SMS), "notebook 09 compares A100 and H100"
    peaks = {p.name: p for p in PEAKS}
    for name, (sms, bandwidth, flops) in table.items():
        assert name in peaks, f"{name} is not a GPU of kernels/roofline.py's PEAKS"
        assert (bandwidth, flops) == (peaks[name].bandwidth, peaks[name].bf16_flops), name
        assert sms == SMS[name], name


@pytest.fixture(scope="module")
def model():
    """The notebook's own GPUS and split_k_floor, from its cells (pure Python: no kernel runs)."""
    ns = {"math": math}
    for cell in code_cells():
        if "GPUS = {" in cell or "def split_k_floor" in cell:
            exec(compile(cell, str(NOTEBOOK), "exec"), ns)
    return ns


def test_the_split_discussion_matches_the_table(model):
    floor, splits = model["split_k_floor"], model["SPLITS"]
    best = {name: min(splits, key=lambda s: floor(s, *gpu)[2]) for name, gpu in model["GPUS"].items()}
    assert best == {"A100 80GB SXM": 8, "H100 SXM": 2}  # "The table's best is 8 on A100 and 2 on H100"
    for name, gpu in model["GPUS"].items():  # "SPLIT = 8 is within 6% of the best on both"
        assert floor(8, *gpu)[2] <= 1.06 * floor(best[name], *gpu)[2], name
    a100, h100 = model["GPUS"]["A100 80GB SXM"], model["GPUS"]["H100 SXM"]
    assert floor(1, *a100)[1] == floor(2, *a100)[1] < floor(2, *h100)[1]  # A100 gains nothing from 1 to 2, H100 does
