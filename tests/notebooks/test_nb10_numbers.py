"""Notebook 10's prose quotes numbers its cells compute — tiles, bytes, programs, ratios: each is held here to the
notebook's own definitions, so an edit of a cell that changes a number fails until the prose is changed with it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "10_attention_as_trained.py"
CELLS = ("def cdiv", "def tile_kinds", "T_PIC = 72", "def kv_cache_bytes", "DESIGNS = {", "def packed_mask",
         "lengths = np.clip")  # the cells whose definitions the numbers come from, each by a line it holds


def prose() -> str:
    """The notebook's markdown, with the comment marks and line breaks taken out."""
    cells = re.split(r"(?m)^# %%(.*)$", NOTEBOOK.read_text())[1:]
    text = " ".join(body for marker, body in zip(cells[::2], cells[1::2]) if "[markdown]" in marker)
    return " ".join(line.removeprefix("#").strip() for line in text.splitlines())


@pytest.fixture(scope="module")
def nb() -> dict:
    """The imports, plain functions and assignments of CELLS, run in order; no picture is drawn, no kernel runs."""
    cells = re.split(r"(?m)^# %%.*$", NOTEBOOK.read_text())
    ns: dict = {}
    for key in CELLS:
        cell = next(c for c in cells if key in c)
        for node in ast.parse(cell).body:
            source = ast.get_source_segment(cell, node)
            plain = isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign)) or (
                isinstance(node, ast.FunctionDef) and not node.decorator_list)
            if plain and "plt" not in source and "course." not in source:
                exec(compile(ast.Module([node], []), str(NOTEBOOK), "exec"), ns)
    return ns


def test_the_tiles_of_the_causal_mask(nb):
    kinds = nb["tile_kinds"](np.tril(np.ones((128, 128), dtype=bool)), 16, 16)
    n = 8
    for i in range(n):  # "the row of tiles of query block i holds i full tiles, one diagonal tile and n − 1 − i skipped"
        row = [kinds[i, j] for j in range(n)]
        assert row == ["full"] * i + ["diagonal"] + ["skipped"] * (n - 1 - i), row
    assert sum(kind != "skipped" for kind in kinds.values()) == n * (n + 1) // 2
    two_to_one = nb["tile_kinds"](nb["causal"], 32, 16)  # hint 2: the block at 32 meets the diagonal in key blocks 2, 3
    assert [j for j in range(5) if two_to_one[1, j] == "diagonal"] == [2, 3]


def test_the_counts_and_flops_quoted():
    text = prose()
    for T, quoted in [(256, "3 of 4 tiles (75%)"), (4096, "528 of 1,024 (51.6%)")]:  # counted in §2
        n = T // 128  # tiles of 128 a side
        visited = n * (n + 1) // 2
        assert f"{visited:,} of {n * n:,}" in quoted and f"({visited / n**2:.1%})".replace(".0%", "%") in quoted
        assert quoted in text, quoted
    assert f"{64 * 65 // 2 / 64**2:.1%} at $T = 8{{,}}192$ with 128 × 128 tiles" in text  # what to take away: 50.8%
    dense_flops, causal_flops = 4 * 4096**2 * 128, 4 * 128 * 128 * 128 * 528  # QKᵀ and PV, d = 128, the longest count
    assert f"{dense_flops / 1e9:.1f} to {causal_flops / 1e9:.1f} GFLOP" == "8.6 to 4.4 GFLOP"
    assert "8.6 to 4.4 GFLOP" in text


def test_the_kv_cache_numbers(nb):
    kib = {g: nb["kv_cache_bytes"](g) / 1024 for g in (1, 4, 8)}
    assert kib == {1: 16, 4: 4, 8: 2}
    batch = {g: nb["kv_cache_bytes"](g, 8 * 8192, nb["LAYERS"]) / 2**30 for g in (1, 4)}
    assert batch == {1: 32, 4: 8}  # "a batch of 8 sequences of 8,192 tokens needs 32 GiB … G = 4 cuts it to 8 GiB"
    assert 2 <= batch[1] / nb["WEIGHTS_GIB"] < 2.2  # "twice the weights"
    text = prose()
    assert "needs 32 GiB of cache, twice the weights" in text and "cuts it to 8 GiB" in text
    assert "4 KiB instead of 16 KiB per token and layer" in text


def test_the_group_sum_designs(nb):
    programs, unordered, extra = zip(*nb["DESIGNS"].values())
    assert programs == (8192, 2048, 8192) and unordered == (4, 0, 0)
    assert (f"{programs[0] / 132:.0f}", f"{programs[1] / 132:.1f}") == ("62", "15.5")  # "62 waves", "15.5 waves"
    assert (extra[0] / 2**20, extra[2] / 2**20) == (256, 384)  # "256 MiB", "384 MiB"
    assert nb["cdiv"](2048, nb["KEY_BLOCK"]) * nb["H_KV"] == 128 < 132  # one 2,048-token sequence: 128 programs
    text = prose()
    for quoted in ("8{,}192$ programs, 62 waves", "(here 256 MiB", "2,048 programs, 15.5 waves",
                   "$16 \\cdot 8 = 128$ key-block programs for 132 SMs", "(384 MiB here)"):
        assert quoted in text, quoted


def test_the_packing_numbers(nb):
    cu = nb["CU_PIC"]
    blocks = -(-max(np.diff(cu)) // 16)
    holding = sum(-(-(end - first) // 16) for first, end in zip(cu[:-1], cu[1:]))
    assert (holding, blocks * (len(cu) - 1)) == (7, 12)
    assert "of the 12 programs per head, 7 hold a query" in prose()
    (pad_tokens, pad_scores), (pack_tokens, pack_scores) = nb["work"].values()
    assert pad_tokens / pack_tokens > 4 and pad_scores / pack_scores > 10  # "more than 4 times … more than 10 times"
    assert 0.7 < 1 - pack_tokens / pad_tokens < 0.8  # "three tokens in four are padding"
    assert "more than 4 times the tokens and more than 10 times the attention scores" in prose()
