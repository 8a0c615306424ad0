"""nbgrader's Execute, made to survive a submission that kills or hangs its kernel.

nbgrader drops a whole notebook when its kernel dies or a cell ignores the timeout's
interrupt: every exercise scores zero, even those that passed before the crash, and the
log says only "kernel died". :class:`SandboxExecute` instead stops at the cell where it
happened, writes what happened there as the cell's error output (which the grader reads
back as the row's ``reason``), marks every later cell as not run for the same reason,
and lets nbgrader save the grades of the cells that did run.

It runs inside the grading sandbox (``autograder.worker`` names it in the job's
nbgrader config), where the kernel is launched by ``sandbox.py kernel`` under resource
limits; the kernel's exit status says which limit it hit.
"""

from __future__ import annotations

import signal

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode

from nbgrader.preprocessors import Execute

from .worker import NOT_RUN, STOPPED

_SIGNALS = {
    signal.SIGXCPU: "CPU time limit: the kernel used up its CPU seconds",
    signal.SIGXFSZ: "file size limit: the kernel wrote a file past the limit",
    signal.SIGKILL: "kernel killed (SIGKILL): usually the memory or CPU time limit",
    signal.SIGSEGV: "kernel died (segmentation fault): often an allocation refused under the memory limit",
    signal.SIGABRT: "kernel died (abort): often an allocation refused under the memory limit",
    signal.SIGBUS: "kernel died (bus error)",
}


def death_reason(returncode: int | None) -> str:
    """Words for a kernel's exit status."""
    if returncode is None:
        return "kernel died"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"kernel died (signal {-returncode})"
        return _SIGNALS.get(sig, f"kernel died ({sig.name})")
    return f"kernel died: the process exited with status {returncode} (os._exit, or sys.exit outside a cell)"


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class SandboxExecute(Execute):
    """Execute that records a dead or stuck kernel in the cell where it happened, then stops."""

    def preprocess(self, nb, resources=None, km=None):
        self._stopped = ""
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if self._stopped:
            cell.outputs = [_error(NOT_RUN, f"{self._stopped} (in an earlier cell; this one never ran)")]
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._stopped = death_reason(self._kernel_returncode())
        except CellTimeoutError:
            self._stopped = f"timeout: the cell ran past {self.timeout} s and ignored the interrupt"
            self._kill_kernel()
        cell.outputs = list(cell.get("outputs", [])) + [_error(STOPPED, self._stopped)]
        self.log.warning("Stopped at cell %d: %s", index, self._stopped)
        return cell, resources

    def _kernel_returncode(self) -> int | None:
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        if process is None:
            return None
        try:
            return process.wait(timeout=5)
        except Exception:  # noqa: BLE001 — any failure here just means "unknown"
            return None

    def _kill_kernel(self) -> None:
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        if process is not None:
            try:
                process.kill()
            except Exception:  # noqa: BLE001
                pass
