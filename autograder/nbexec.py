"""nbgrader's Execute, made to survive a submission that kills or hangs its kernel, and to keep only what is safe.

nbgrader drops a whole notebook when its kernel dies or a cell ignores the timeout's interrupt;
:class:`SandboxExecute` (named in the job's config by ``autograder.autograde``) stops at that cell
instead, marks every later cell as not run, and lets nbgrader save the grades of those that ran.
What happened goes, in the grader's words, to the execution record out of the sandbox's reach,
which the rows' reasons come from (``autograder.autograde.read_outcomes``); what the outputs keep:
docs/grading.md, "Outputs: what the grader keeps".
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, SaveAutoGrades
from nbgrader.utils import determine_grade
from traitlets import Bool, Unicode

from . import contract
from .autograde import EXECUTION_RECORD as RECORD
from .autograde import NOT_RUN, STOPPED, grade_cell_id

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


KiB, MiB = 1 << 10, 1 << 20
CELL_OUTPUT_MAX = 1 * MiB  # what one cell's outputs may keep
NOTEBOOK_OUTPUT_MAX = 4 * MiB  # what all of a notebook's outputs together may keep
ERROR_MAX = 16 * KiB  # one error output: name, message and traceback
ERRORS_PER_CELL = 3  # error outputs kept per cell (a test cell's, whatever the budget)
IMAGES = ("image/png", "image/jpeg")  # kept beside text/plain; every other type keeps its text/plain only
NOT_KEPT = "[an output the grader does not keep: it keeps text and PNG/JPEG images only]"
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")


def truncated(what: str) -> str:
    """The marker a cell ends with when a cap cut its output."""
    return f"[output truncated by the grader: {what}]"


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _cut(text: str, room: int) -> str:
    """At most ``room`` bytes of ``text`` (UTF-8), cut at a character boundary; reads only what it keeps."""
    head = text[:max(room, 0)].encode("utf-8", "surrogatepass")
    if len(head) <= room and len(text) <= room:
        return text
    return head[:max(room, 0)].decode("utf-8", "ignore")


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _bounded_error(ename, evalue, traceback, limit: int = ERROR_MAX) -> tuple[str, str, list[str]]:
    """An error's fields as strings, together at most ``limit`` bytes (the traceback is cut first)."""
    ename = _cut(ename if isinstance(ename, str) else "Error", 200)
    evalue = _cut(evalue if isinstance(evalue, str) else "", max(0, min(limit // 4, limit - _size(ename))))
    room = limit - _size(ename) - _size(evalue)
    lines: list[str] = []
    for line in traceback if isinstance(traceback, list) else []:
        if room <= 0 or len(lines) >= 200:
            lines.append(truncated("traceback cut"))
            break
        line = _cut(line if isinstance(line, str) else "", room)
        lines.append(line)
        room -= _size(line)
    return ename, evalue, lines


class SandboxExecute(Execute):
    """Execute that records a dead or stuck kernel in the cell where it happened, then stops;
    and keeps of the kernel's outputs only text and images, within the caps."""

    # Widgets are never run here: their state and Output widgets would keep what the caps cut.
    store_widget_state = Bool(False).tag(config=True)
    record_file = Unicode(RECORD, help="Where the grader's record of stops and timeouts goes "
                                       "(relative to nbgrader's working folder).").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._stopped = ""
        self._reasons: dict[str, str] = {}
        self._used = 0  # bytes the notebook's outputs keep
        self._start_cell(False)
        self._write_record()  # a stale record from an earlier run never counts
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        grade_id = grade_cell_id(cell)
        if self._stopped:
            reason = f"{self._stopped} (in an earlier cell; this one never ran)"
            cell.outputs = [_error(NOT_RUN, reason)]
            self._note(grade_id, reason)
            return cell, resources
        self._start_cell(bool(grade_id))
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._stopped = death_reason(self._kernel_process(lambda p: p.wait(timeout=5)))
        except CellTimeoutError:
            self._stopped = f"timeout: the cell ran past {self.timeout} s and ignored the interrupt"
            self._kernel_process(lambda p: p.kill())
        self._finish_cell(cell)
        if not self._stopped:
            if self._timed_out:
                self._note(grade_id, f"timeout: the cell ran past {self.timeout} s and was interrupted")
            return cell, resources
        cell.outputs = list(cell.get("outputs", [])) + [_error(STOPPED, self._stopped)]
        self._note(grade_id, self._stopped)
        self.log.warning("Stopped at cell %d: %s", index, self._stopped)
        return cell, resources

    # -- the grader's record -----------------------------------------------------

    def _note(self, grade_id: str, reason: str) -> None:
        if grade_id:
            self._reasons[grade_id] = reason
            self._write_record()

    def _write_record(self) -> None:
        path = Path(self.record_file)
        try:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps({"reasons": self._reasons}))
            os.replace(tmp, path)
        except OSError as exc:
            self.log.error("Could not write %s: %s", path, exc)

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True  # seen here, in the grader's process: the kernel cannot fake it
        return await super()._async_handle_timeout(timeout, cell)

    # -- what the outputs keep -----------------------------------------------------

    def _start_cell(self, graded: bool) -> None:
        self._graded, self._cell_used, self._cell_errors, self._cell_cut, self._timed_out = graded, 0, 0, "", False
        self._cell_records = 0  # diagnosis records kept in this cell

    def _room(self) -> int:
        return max(0, min(CELL_OUTPUT_MAX - self._cell_used, NOTEBOOK_OUTPUT_MAX - self._used))

    def _spend(self, size: int) -> None:
        self._cell_used += size
        self._used += size

    def _mark_cut(self) -> None:
        if not self._cell_cut:
            self._cell_cut = (f"this cell's output passed {CELL_OUTPUT_MAX // KiB} KiB"
                              if CELL_OUTPUT_MAX - self._cell_used <= NOTEBOOK_OUTPUT_MAX - self._used
                              else f"the notebook's outputs passed {NOTEBOOK_OUTPUT_MAX // MiB} MiB")

    def _forget_cell(self) -> None:
        """The cell's outputs were cleared: what they kept no longer counts."""
        self._used -= self._cell_used
        self._cell_used = self._cell_errors = 0

    def output(self, outs, msg, display_id, cell_index):
        if self.clear_before_next_output:  # a clear_output(wait=True) takes effect now, kept or not what follows
            outs[:] = []
            self.clear_before_next_output = False
            self._forget_cell()
        content = msg.get("content")
        if not isinstance(content, dict) or not self._admit(msg.get("msg_type"), content):
            return None
        # No display id is recorded, so a later update_display_data finds nothing to replace.
        return super().output(outs, msg, None, cell_index)

    def _update_display_id(self, display_id, msg):
        return None

    def clear_output(self, outs, msg, cell_index):
        super().clear_output(outs, msg, cell_index)
        if not outs:
            self._forget_cell()

    def handle_comm_msg(self, outs, msg, cell_index):
        return None

    def _admit(self, kind, content: dict) -> bool:
        """Keep this output? Cut it to what the caps leave, in place; True when anything is kept."""
        room = self._room()
        if kind == "error":
            if self._cell_errors >= ERRORS_PER_CELL:
                return False
            limit = ERROR_MAX if self._graded else min(ERROR_MAX, room)
            if limit <= 0:
                self._mark_cut()
                return False
            ename, evalue, tb = _bounded_error(content.get("ename"), content.get("evalue"),
                                               content.get("traceback"), limit)
            content.update(ename=ename, evalue=evalue, traceback=tb)
            self._cell_errors += 1
            self._spend(_size(ename) + _size(evalue) + sum(map(_size, tb)))
            return True
        if kind == "stream":
            text = content.get("text")
            if content.get("name") not in ("stdout", "stderr") or not isinstance(text, str) or not text:
                return False
            if room <= 0:
                self._mark_cut()
                return False
            kept = _cut(text, room)
            if kept is not text:
                self._mark_cut()
            content["text"] = kept
            self._spend(_size(kept))
            return True
        if kind in ("display_data", "execute_result"):
            return self._admit_data(kind, content, room)
        return False

    def _admit_data(self, kind: str, content: dict, room: int) -> bool:
        data = content.get("data") if isinstance(content.get("data"), dict) else {}
        record = contract.read_record(data.get(contract.DIAGNOSIS_MIME)) if self._graded else None
        if record:  # a check's diagnosis as typed JSON (course.vocabulary.publish): kept as read, as an error is
            if self._cell_records >= ERRORS_PER_CELL:  # kept whatever the caps (a record is at most ~2 KiB)
                return False
            content.update(data={contract.DIAGNOSIS_MIME: record}, metadata={}, execution_count=None)
            self._cell_records += 1
            self._spend(len(json.dumps(record)))
            return True
        if not data:
            return False
        if room <= 0:
            self._mark_cut()
            return False
        plain = data.get("text/plain")
        plain = plain if isinstance(plain, str) else NOT_KEPT
        kept = {"text/plain": _cut(plain, room)}
        if kept["text/plain"] is not plain:
            self._mark_cut()
        used = _size(kept["text/plain"])
        metadata = content.get("metadata") if isinstance(content.get("metadata"), dict) else {}
        meta = {}
        for mime in IMAGES:
            image = data.get(mime)
            if not isinstance(image, str) or not image:
                continue
            if used + len(image) > room:
                self._mark_cut()
                continue
            if not _BASE64.fullmatch(image):  # not an image: it could only break out of the page's <img>
                continue
            kept[mime] = image
            used += len(image)
            size = metadata.get(mime) if isinstance(metadata.get(mime), dict) else {}
            dims = {k: v for k, v in size.items() if k in ("width", "height") and type(v) is int and 0 < v < 100000}
            if dims:
                meta[mime] = dims
        count = content.get("execution_count")
        content.update(data=kept, metadata=meta, execution_count=count if type(count) is int else None)
        self._spend(used)
        return True

    def _finish_cell(self, cell) -> None:
        """Cap what reached the cell by other ways (the error nbgrader copies from the kernel's reply);
        end the cell with the marker when a cap cut its output."""
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                out.ename, out.evalue, out.traceback = _bounded_error(out.get("ename"), out.get("evalue"),
                                                                      out.get("traceback"))
        if self._cell_cut:
            cell.outputs.append(NotebookNode(output_type="display_data", metadata={},
                                             data={"text/plain": truncated(self._cell_cut)}))

    def _kernel_process(self, action):
        """``action(the kernel's process)``, or None when there is none or it fails ("unknown")."""
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        try:
            return None if process is None else action(process)
        except Exception:  # noqa: BLE001
            return None


class SaveCheckedGrades(SaveAutoGrades):
    """nbgrader's SaveAutoGrades without partial credit: a test cell scores all its points or none.

    What a cell displays is the kernel's to choose (nbgrader reads a displayed number as partial
    credit), so a test cell scores only when nbgrader's reading is exactly full marks *and* its
    outputs hold no error; where the trusted re-check runs, ``autograder.grader.decide`` decides.
    """

    def _add_score(self, cell, resources):
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("solution"):
            return super()._add_score(cell, resources)  # autograded answers and markdown: nbgrader's own rule
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        points = float(grade.max_score)  # the instructor's, from the gradebook
        failed = any(out.get("output_type") == "error" for out in cell.get("outputs", []))
        try:
            score, max_points = determine_grade(cell, self.log)
            exact = score == max_points
        except Exception:  # noqa: BLE001 — a displayed value nbgrader cannot read (too large, no text): no pass
            exact = False
        grade.auto_score = points if exact and not failed else 0.0
        grade.needs_manual_grade = grade.manual_score is not None
        self.gradebook.db.commit()
