"""tools/bench.py (make bench): hidden tests timed as cells of their own; no figure written unless its checks hold."""

import subprocess
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tools.bench import HIDDEN, ROOT, assignments, split_hidden


def test_split_hidden_puts_the_hidden_block_in_a_cell_after_the_visible_check():
    test_cell = new_code_cell(
        '"""f: checks f."""\ncourse.selfcheck.f(f)\n### BEGIN HIDDEN TESTS\nimport autograder.check\n'
        "autograder.check.f(f)\n### END HIDDEN TESTS",
        metadata={"nbgrader": {"grade_id": "test_f", "grade": True, "points": 1}},
    )
    nb = new_notebook(cells=[new_markdown_cell("# f"), new_code_cell("def f(x):\n    return x"), test_cell])
    out = split_hidden(nb)
    assert [c.source for c in out.cells] == [
        "# f",
        "def f(x):\n    return x",
        '"""f: checks f."""\ncourse.selfcheck.f(f)',
        "import autograder.check\nautograder.check.f(f)\n",
    ]
    assert out.cells[2].metadata["nbgrader"]["grade_id"] == "test_f"
    assert out.cells[3].metadata["bench_hidden"] == "test_f"
    assert not any("bench_hidden" in c.metadata for c in out.cells[:3])


def test_every_hidden_block_of_every_source_notebook_becomes_one_timed_cell():
    slugs = assignments()
    assert "00_vjp_contract" in slugs
    for slug in slugs:
        nb = nbformat.read(ROOT / "source" / slug / f"{slug}.ipynb", as_version=4)
        expected = [(c.metadata["nbgrader"]["grade_id"], m.group(1)) for c in nb.cells for m in [HIDDEN.search(c.source)] if m]
        out = split_hidden(nb)
        got = [(c.metadata["bench_hidden"], c.source) for c in out.cells if "bench_hidden" in c.metadata]
        assert got and got == expected, slug
        assert not any("HIDDEN TESTS" in c.source for c in out.cells), slug


def test_memory_part_writes_nothing_when_its_check_fails(tmp_path):
    # At T ≤ 128 recompute cannot yet be 20× smaller than saving P (at T = 128 it is about 2.5×).
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--only", "memory", "--seq-lens", "64", "128", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "✗ recompute needs" in done.stdout and "nothing written" in done.stdout, done.stdout
    assert list(tmp_path.iterdir()) == []
