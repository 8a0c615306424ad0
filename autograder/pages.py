"""The memory a student's call touches, counted by the Linux kernel from outside the student's processes.

The trusted checker runs here, as the grader; the value worker's processes are in their sandbox. Around one
call: ``/proc/PID/clear_refs`` reset before, then ``Referenced`` of the writable mappings plus ``VmHWM − VmRSS``
after, summed over every process under the sandbox's init. Nothing the student's code runs can reset or hide
it; what it cannot tell is *what* the memory held, or what a process that ended before the count touched (the
checker refuses that measurement). docs/grading.md, "What the worker measures", says how checks use it.
"""

from __future__ import annotations

import contextlib
import os

MAX_PROCESSES = 64  # a sandbox holds at most this many (its uid's process limit)


def _children(pid: int) -> list[int]:
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(p) for p in f.read().split()]
    return out


def processes(init: int) -> list[int]:
    """The processes under ``init`` (not ``init`` itself: the sandbox's own, which runs no student code)."""
    found, todo = [], _children(init)
    while todo and len(found) < MAX_PROCESSES:
        pid = todo.pop()
        if pid not in found:
            found.append(pid)
            todo += _children(pid)
    return found


def _fields(pid: int) -> dict[str, int]:
    """``Referenced`` (of writable mappings), ``VmHWM`` and ``VmRSS`` of one process, in bytes.

    Only writable mappings: the heap, anonymous memory, stacks, a file mapped to be written. The pages of code a
    call runs (libtorch's, several MiB of it) are referenced too, but hold no data of the call's.
    """
    got = {"Referenced": 0}
    writable = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(None, 2)
            if "-" in head[0] and not head[0].endswith(":"):  # a mapping: "start-end perms offset dev inode path"
                writable = len(head) > 1 and head[1][1:2] == "w"
            elif writable and head[0] == "Referenced:":
                got["Referenced"] += int(head[1]) * 1024
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                got[line.split(":")[0]] = int(line.split()[1]) * 1024
    return got


class PageCounter:
    """Counts the pages the processes under one sandbox's init touch between :meth:`begin` and :meth:`end`."""

    def __init__(self, init: int | None):
        self.init = init
        self.available = init is not None and os.path.exists("/proc/self/smaps")
        self.counted: list[int] = []

    def begin(self) -> bool:
        """Start counting; False (and nothing counted) where the kernel does not let this process reset the counts."""
        if not self.available:
            return False
        self.counted = processes(self.init)
        try:
            for pid in self.counted:
                for what in (b"1", b"5"):
                    fd = os.open(f"/proc/{pid}/clear_refs", os.O_WRONLY)
                    try:
                        os.write(fd, what)
                    finally:
                        os.close(fd)
        except FileNotFoundError:  # a process that ended meanwhile: count again next time
            return False
        except OSError:  # not ours to reset (another user's process, an old kernel): never available here
            self.available = False
            return False
        return bool(self.counted)

    def end(self) -> int | None:
        """Bytes touched since :meth:`begin`, by the processes there then and those started since; None when a
        count could not be read (a process that ended: its pages are gone with it)."""
        total = 0
        now = processes(self.init)
        for pid in now:
            try:
                f = _fields(pid)
            except (OSError, ValueError):
                return None
            if pid in self.counted:
                total += f.get("Referenced", 0) + max(0, f.get("VmHWM", 0) - f.get("VmRSS", 0))
            else:  # born during the call: everything it holds, at its peak
                total += max(f.get("VmHWM", 0), f.get("Referenced", 0))
        if any(pid not in now for pid in self.counted):
            return None
        return total
