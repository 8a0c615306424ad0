"""lab-config/, the JupyterLab configuration of `make lab` and of test_lab.py, without a browser.

test_lab.py checks what a student sees through it (no Nbgrader menu, no assignment list on the
server, no news pop-up); these check, in seconds and without Chromium, that `make lab` uses it
and that JupyterLab reads the plugins it switches off.
"""

from __future__ import annotations

import os
import subprocess

from autograder.nbgrader_cli import ROOT, with_bin

LAB_CONFIG = ROOT / "lab-config"
SWITCHED_OFF = (
    "@jupyterlab/apputils-extension:announcements",  # the news pop-up and the update check
    "@jupyter/nbgrader:assignment-list",  # the Assignments tab: "Error fetching courses!"
    "@jupyter/nbgrader:course-list",
)


def test_make_lab_starts_jupyterlab_with_lab_config():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "JUPYTER_CONFIG_PATH")}
    done = subprocess.run(["make", "-n", "lab"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    command = done.stdout[done.stdout.index("JUPYTER_CONFIG_PATH="):]
    assert command.startswith(f'JUPYTER_CONFIG_PATH="{LAB_CONFIG}'), command
    assert "jupyter lab" in command, command


def test_jupyterlab_reads_the_plugins_lab_config_switches_off(tmp_path):
    env = with_bin(dict(os.environ))
    env.update(JUPYTER_CONFIG_PATH=str(LAB_CONFIG), JUPYTER_CONFIG_DIR=str(tmp_path))  # nothing of this user's
    done = subprocess.run(["jupyter", "labextension", "list"], env=env, capture_output=True, text=True, timeout=120)
    listing = done.stdout + done.stderr
    assert done.returncode == 0, listing
    disabled = listing.split("Disabled extensions:", 1)[1].split() if "Disabled extensions:" in listing else []
    for plugin in SWITCHED_OFF:
        assert plugin in disabled, f"{plugin} is not disabled:\n{listing}"
    assert "@jupyter/nbgrader:validate-assignment" not in disabled, "the Validate button stays"
