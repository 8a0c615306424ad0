"""What a student receives — course/ and release/ — holds no solution and imports none."""

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def solution_lines() -> set[str]:
    """Every non-trivial line inside a source notebook's solution region."""
    lines = set()
    for nb_path in (ROOT / "source").glob("*/*.ipynb"):
        for cell in json.loads(nb_path.read_text())["cells"]:
            text = "".join(cell["source"])
            for region in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", text, re.S):
                lines |= {ln.strip() for ln in region.splitlines() if len(ln.strip()) >= 25 and not ln.strip().startswith("#")}
    return lines


def test_no_solution_line_appears_on_the_student_side():
    lines = solution_lines()
    assert lines, "the source notebooks have solution regions"
    student_files = list((ROOT / "course").rglob("*.py")) + list((ROOT / "release").rglob("*.ipynb"))
    for path in student_files:
        text = path.read_text()
        leaked = [ln for ln in lines if ln in text]
        assert not leaked, f"{path.relative_to(ROOT)} contains solution lines: {leaked[:3]}"
