"""environment.yml (conda/mamba) installs what pyproject.toml lists — the one list of dependencies."""

import re
import tomllib

import yaml
from packaging.specifiers import SpecifierSet

from autograder.nbgrader_cli import ROOT


def name_of(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {name_of(r): r.replace(" ", "") for r in project["dependencies"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert any(str(d).startswith("python=3.11") for d in deps), "python 3.11"
    assert "pip" in deps
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert any(p.startswith("-e .") or p == "." for p in pip_section), "pip installs this project"
    pinned = {name_of(p): p.replace(" ", "") for p in pip_section if not p.startswith(("-e", "."))}
    assert set(pinned) == set(runtime), f"names differ: {set(pinned) ^ set(runtime)}"
    for name, spec in runtime.items():
        assert pinned[name] == spec, f"{name}: environment.yml says {pinned[name]}, pyproject.toml says {spec}"


def test_torch_is_pinned_to_the_cpu_build_on_disk():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch==2.13.0" in project["dependencies"]


def test_repository_takes_python_3_11_to_3_13():
    """Issue 17: `<3.12` turned away Python 3.12 although nothing here needs 3.11 exactly; tomllib needs 3.11."""
    requires = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    for version in ("3.11", "3.12", "3.13"):
        assert requires.contains(version), f"requires-python {requires} refuses Python {version}"
