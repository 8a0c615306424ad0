"""The mutant file format: a block replaces a whole solution cell, or one definition inside it."""

from __future__ import annotations

import pytest

from tools.mutants import apply_edit, read_mutant, replace_definition, solution_cell

CELL = '''import math

SCALE = 2.0


@decorator
def kernel(x):
    ### BEGIN SOLUTION
    return x * SCALE
    ### END SOLUTION


def wrapper(x):
    return kernel(x) + 1
'''


def test_a_definition_is_replaced_with_its_decorators_and_nothing_else():
    out = replace_definition(CELL, "kernel", "def kernel(x):\n    return -x")
    assert "@decorator" not in out and "return -x" in out and "x * SCALE" not in out
    assert "### END SOLUTION" not in out, "the solution's closing marker goes with the definition it closes"
    assert out.splitlines()[:4] == CELL.splitlines()[:4] and out.endswith("return kernel(x) + 1")


def test_an_assignment_is_a_definition_too():
    assert "SCALE = 3.0" in replace_definition(CELL, "SCALE", "SCALE = 3.0")


def test_a_name_the_cell_does_not_define_is_refused():
    with pytest.raises(ValueError, match="defines no 'kernal'"):
        replace_definition(CELL, "kernal", "def kernal(x): ...")


def mutant_file(tmp_path, text: str):
    """A mutant of 01_matmul_from_shapes holding ``text``, read as the sample grader reads one."""
    folder = tmp_path / "01_matmul_from_shapes"
    folder.mkdir()
    (folder / "mutant.py").write_text(text)
    return read_mutant(folder / "mutant.py")


def test_a_block_naming_a_definition_patches_the_source_cell(tmp_path):
    m = mutant_file(tmp_path, "# Mutant: one bug.\n# expect: test_linear_backward sign\n"
                              "# %% linear_backward linear_backward\ndef linear_backward(x, w, dy):\n    return None\n")
    assert m.replaced == {"linear_backward": ("linear_backward",)}
    original = solution_cell("01_matmul_from_shapes", "linear_backward")
    assert m.cells["linear_backward"] == replace_definition(original, "linear_backward",
                                                            "def linear_backward(x, w, dy):\n    return None")


def test_a_cell_replaced_whole_and_in_parts_is_refused(tmp_path):
    with pytest.raises(ValueError, match="whole and in parts"):
        mutant_file(tmp_path, "# expect: test_linear_backward sign\n# %% linear_backward\npass\n"
                              "# %% linear_backward linear_backward\ndef linear_backward(x, w, dy): ...\n")


CLASS_CELL = '''class Fn:
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        ### BEGIN SOLUTION
        return g * 2
        ### END SOLUTION
'''


def test_a_method_is_replaced_inside_its_class():
    out = replace_definition(CLASS_CELL, "Fn.backward", "    @staticmethod\n    def backward(ctx, g):\n        return g")
    assert "return x * 2" in out and "return g * 2" not in out and "### END SOLUTION" not in out
    assert out.rstrip().endswith("return g")


def test_an_edit_changes_only_the_lines_it_names():
    out = replace_definition(CELL, "kernel", "-    return x * SCALE\n+    return x / SCALE")
    assert out == CELL.rstrip("\n").replace("return x * SCALE", "return x / SCALE")


def test_an_edit_must_find_its_lines_exactly_once():
    with pytest.raises(ValueError, match="occur 0 times"):
        apply_edit(CELL, "-    return x * 3\n+    return x")
    with pytest.raises(ValueError, match="occur 2 times"):
        apply_edit("a = 1\na = 1", "-a = 1\n+a = 2")


def test_a_block_that_edits_a_cell_keeps_the_rest_of_it(tmp_path):
    original = solution_cell("01_matmul_from_shapes", "linear_backward")
    line = next(x for x in original.splitlines() if "return" in x)
    m = mutant_file(tmp_path, f"# expect: test_linear_backward sign\n# %% linear_backward\n-{line}\n"
                              f"+{line.replace('return ', 'return -')}\n")
    assert m.cells["linear_backward"] == original.rstrip("\n").replace(line, line.replace("return ", "return -"))
