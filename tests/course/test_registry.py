"""course.registry is the one list of exercises: the notebooks, the grading contract, docs/design.md's table,
nbgrader's config and the README's map agree with it, and an exercise added there gets its generated checks and
its hint pointers with nothing else wired."""

from __future__ import annotations

import importlib
import json
import re
import sys
import types

import pytest

import course.selfcheck
from autograder.nbrunner import ROOT
from course import registry
from course.diagnose import GradingFailure
from course.registry import BY_NAME, EXERCISES, NOTEBOOKS, SPECS, Entry, exercises_of
from tests.notebooks.test_contract import CONTRACT


def test_the_registry_keeps_the_grading_contract():
    assert len(BY_NAME) == len(EXERCISES), "one entry per name"
    assert {notebook: exercises_of(notebook) for notebook in NOTEBOOKS} == CONTRACT
    assert list(NOTEBOOKS) == sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir())


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_test_cells_give_the_registry_points(notebook):
    cells = json.loads((ROOT / "source" / notebook / f"{notebook}.ipynb").read_text())["cells"]
    metas = [c.get("metadata", {}).get("nbgrader", {}) for c in cells]
    points = {m["grade_id"].removeprefix("test_"): m["points"] for m in metas if m.get("grade")}
    assert points == {name: BY_NAME[name].points for name in exercises_of(notebook)}


def test_every_exercise_has_a_spec_type_and_a_hint_for_any_class():
    for exercise in EXERCISES:
        assert exercise.spec in SPECS, exercise.name
        assert "*" in exercise.hints and all(n >= 1 for n in exercise.hints.values()), exercise.name


def test_both_packages_hold_every_check_by_its_name():
    import autograder.check

    for package in (course.selfcheck, autograder.check):
        for exercise in EXERCISES:
            assert getattr(package, exercise.name).__name__ == exercise.name
            assert exercise.name in dir(package)


def test_the_design_page_lists_the_registry():
    """docs/design.md is where people read the contract: its table lists exactly these names."""
    rows = re.findall(r"^\| `(\d\d_\w+)` \| (.+) \|$", (ROOT / "docs" / "design.md").read_text(), re.M)
    assert {a: re.findall(r"`(\w+)`", names) for a, names in rows} == {nb: exercises_of(nb) for nb in NOTEBOOKS}


def test_the_readme_map_lists_the_registry():
    rows = re.findall(r"^\| \d\d \| `(\d\d_\w+)` \| .+ \| ((?:`\w+`, )*`\w+`) \|$", (ROOT / "README.md").read_text(),
                      re.M)
    assert {a: re.findall(r"`(\w+)`", names) for a, names in rows} == {nb: exercises_of(nb) for nb in NOTEBOOKS}


def test_nbgrader_config_lists_the_registry_notebooks():
    from traitlets.config import Config

    namespace = {"get_config": Config}
    exec((ROOT / "nbgrader_config.py").read_text(), namespace)
    assert [a["name"] for a in namespace["c"].CourseDirectory.db_assignments] == list(NOTEBOOKS)


# A throwaway lesson: what a lesson module holds for one PyTorch-function exercise (x ↦ x³).
THROWAWAY_VISIBLE = '''
from course.diagnose import Alternative, Case, graded, randn, seeded
from course.spec import Exercise

CUBE = Exercise(name="cube_backward", reference=lambda x, dy: 3 * x**2 * dy, outputs=("dx",), of=("x",),
                alternatives=lambda case: {"dx": [Alternative("sign", "the gradient has the wrong sign.",
                                                              -3 * case.args[0] ** 2 * case.args[1])]})


def cases(gen):
    return [Case(f"batch {b}", (randn(gen, b, 5), randn(gen, b, 5)), b) for b in (1, 7)]


@graded
def cube_backward(fn):
    CUBE.run(fn, cases(seeded(1)))
'''
THROWAWAY_HIDDEN = '''
from course.diagnose import graded
from course.selfcheck.throwaway import CUBE, cases

from autograder.inputs import generator


@graded
def cube_backward(fn):
    CUBE.run(fn, cases(generator("cube_backward")))
'''


@pytest.fixture
def throwaway(monkeypatch):
    """cube_backward added through the registry alone, its two lesson modules made in memory."""
    for module, source in (("course.selfcheck.throwaway", THROWAWAY_VISIBLE),
                           ("autograder.check.throwaway", THROWAWAY_HIDDEN)):
        lesson = types.ModuleType(module)
        monkeypatch.setitem(sys.modules, module, lesson)
        exec(compile(source, f"<{module}>", "exec"), lesson.__dict__)
    entry = Entry("cube_backward", "99_throwaway", "pytorch-function", 1, {"sign": 2, "*": 1},
                     "throwaway", "throwaway")
    monkeypatch.setattr(registry, "EXERCISES", (*EXERCISES, entry))
    monkeypatch.setitem(BY_NAME, entry.name, entry)
    import autograder.check

    packages = [importlib.reload(course.selfcheck), importlib.reload(autograder.check)]
    yield packages
    monkeypatch.undo()
    for package in packages:
        package.__dict__.pop("cube_backward")
        importlib.reload(package)


def test_an_exercise_added_to_the_registry_is_checked_and_hinted(throwaway):
    for package in throwaway:
        check = package.cube_backward
        assert "cube_backward" in dir(package)
        check(lambda x, dy: 3 * x**2 * dy)  # right: passes
        with pytest.raises(GradingFailure) as wrong:
            check(lambda x, dy: -3 * x**2 * dy)
        assert wrong.value.cls == "sign" and wrong.value.hint == 2, str(wrong.value)
        assert "→ Hint 2, just above this test cell" in str(wrong.value)
        with pytest.raises(GradingFailure) as unnamed:
            check(lambda x, dy: 2 * x * dy)
        assert unnamed.value.cls != "sign" and unnamed.value.hint == 1, str(unnamed.value)


def test_the_registry_is_whole_again_after_the_throwaway():
    assert "cube_backward" not in BY_NAME and not hasattr(course.selfcheck, "cube_backward")
