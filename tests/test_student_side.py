"""What a student receives — course/ and release/ — holds no solution and imports none."""

import ast
import io
import json
import re
import tokenize
from pathlib import Path

from autograder.nbgrader_cli import ROOT

FORBIDDEN_PACKAGES = {"kernels", "autograder"}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in ("import_module", "__import__"):
            if node.args and isinstance(node.args[0], ast.Constant):
                found.add(str(node.args[0].value).split(".")[0])
    return found


def test_course_package_imports_no_solution():
    for path in sorted((ROOT / "course").rglob("*.py")):
        bad = imported_packages(path) & FORBIDDEN_PACKAGES
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}: course/ is given to students"


def code_of(line: str) -> str:
    """A line of Python without its trailing comment (a copy that changed only the comment is still a copy)."""
    tokens = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline):
            tokens.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # an unclosed bracket: the tokens read so far still show any comment before it
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    code = line.strip()
    return (code[:comment.start[1]] if comment else code).rstrip()


def solution_lines() -> set[str]:
    """Every non-trivial line inside a source notebook's solution region, its comment left off.

    A line the notebooks also give in plain code (a forward the exercise states, a kernel's given
    prologue, boilerplate such as a row index) is handed out on purpose: it is not a solution line.
    """
    regions, given = set(), set()
    for nb_path in (ROOT / "source").glob("*/*.ipynb"):
        for cell in json.loads(nb_path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            text = "".join(cell["source"])
            solved = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", text, re.S)
            rest = re.sub(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n.*?### END \1", "", text, flags=re.S)
            regions |= {code for region in solved for code in map(code_of, region.splitlines()) if len(code) >= 25}
            given |= {code_of(line) for line in rest.splitlines()}
    return regions - given


def student_text(name: str, raw: str) -> str:
    """What a student reads in a file: a notebook's cells as text (JSON escapes quotes), any other file as is."""
    if not name.endswith(".ipynb"):
        return raw
    return "\n".join("".join(cell["source"]) for cell in json.loads(raw)["cells"])


def test_no_solution_line_appears_on_the_student_side():
    lines = solution_lines()
    assert lines, "the source notebooks have solution regions"
    student_files = list((ROOT / "course").rglob("*.py")) + list((ROOT / "release").rglob("*.ipynb"))
    for path in student_files:
        text = student_text(path.name, path.read_text())
        leaked = [ln for ln in lines if ln in text]
        assert not leaked, f"{path.relative_to(ROOT)} contains solution lines: {leaked[:3]}"


def test_a_copy_is_found_whatever_its_comment_and_its_quotes():
    assert code_of('    return "transpose" if ok else "shape"  # the class') == 'return "transpose" if ok else "shape"'
    assert code_of("    x = f(a,  # first\n") == "x = f(a,"
    notebook = json.dumps({"cells": [{"source": ['y = "a" if ok else "b"  # another comment\n']}]})
    assert 'y = "a" if ok else "b"' in student_text("n.ipynb", notebook)
