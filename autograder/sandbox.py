"""Run untrusted notebook code in throw-away Linux sandboxes, started fast from a preloaded zygote.

Standard library only, nothing from the project: the zygote runs it as a script (so the
``autograder`` package, with the hidden checks, is never in the memory sandboxes are forked
from), and the kernel launcher runs it with ``python -I -S`` to start in milliseconds.

``sandbox.py zygote SOCKET``, one per batch, imports what every notebook needs once, then
forks a *handler* per request on its socket (mode 0600). With ``isolation: full`` the handler
unshares the namespaces, its child (process 1 there) builds the new root, and the student
process under it sets its limits and uid and runs the kernel or the value worker in-process;
the handler kills it all when the client goes away. ``sandbox.py launch SOCKET SPEC
CONNECTION_FILE [ARGS]``, the job's kernelspec, asks for a kernel, forwards signals and exits
as the kernel did. What each level isolates: docs/grading.md, "What is isolated".
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import json
import os
import resource
import runpy
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback

# The sandbox's own paths, inside its root.
SANDBOX_DIR = "/sandbox"  # the spec and any files it carries
TMP = "/tmp"

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG = 38, 1

DEVICES = ["null", "zero", "full", "random", "urandom", "tty"]
LIMIT_NAMES = {
    "address_space": resource.RLIMIT_AS,
    "cpu_seconds": resource.RLIMIT_CPU,
    "processes": resource.RLIMIT_NPROC,
    "file_size": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
}
# What the zygote imports once, so that no kernel or worker pays for it. Never the project's
# grading code. Not `course` (it asks CUDA for devices, and a process that did must not fork),
# and not `triton`: triton.language decorates its own library functions (tl.max, ...) when it
# is imported, as interpreted or compiled according to TRITON_INTERPRET, which `course` sets
# only later, in the notebook.
PRELOAD = ["numpy", "torch", "matplotlib", "matplotlib.pyplot", "IPython", "ipykernel.kernelapp",
           "ipykernel.ipkernel", "jedi"]


@functools.cache
def libc():
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = libc().mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), data.encode() if data else None)
    _check(rc, f"mount {source} -> {target} ({fstype})")


# ---------------------------------------------------------------------------
# Limits and privileges


def become_student(spec: dict) -> None:
    """In the student process: its own session, the limits (a CPU limit with 5 s of grace before SIGKILL), then
    the unprivileged uid for good: no supplementary groups, no way back (no_new_privs)."""
    with contextlib.suppress(PermissionError):
        os.setsid()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, value in spec.get("limits", {}).items():
        if value is not None and name in LIMIT_NAMES:
            value = int(value)
            resource.setrlimit(LIMIT_NAMES[name], (value, value + 5 if name == "cpu_seconds" else value))
    if spec.get("isolation") == "full":
        os.setgroups([])
        os.setresgid(spec["uid"], spec["uid"], spec["uid"])
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
        libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


# ---------------------------------------------------------------------------
# The new root (isolation "full")


def _ensure_dir(path: str, mode: int = 0o755) -> None:
    os.makedirs(path, mode=mode, exist_ok=True)


def _bind(src: str, dst_in_root: str, root: str, writable: bool) -> None:
    target = root + dst_in_root
    if os.path.isdir(src):
        _ensure_dir(target)
    else:
        _ensure_dir(os.path.dirname(target))
        open(target, "a").close()
    _mount(src, target, None, MS_BIND | MS_REC)
    _mount("", target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY))


def build_root(spec: dict) -> None:
    """Mount the new root at spec['root'] and chroot into it (run as process 1 of new namespaces)."""
    root = spec["root"]
    _mount("", "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here leaks back to the host
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16m")
    for name in ("bin", "lib", "lib64", "sbin"):  # usr-merged systems: top-level links into /usr
        if os.path.islink("/" + name):
            os.symlink(os.readlink("/" + name), os.path.join(root, name))
    # A private, empty /tmp first: binds below may land inside it (job folders often live under /tmp).
    _ensure_dir(root + TMP)
    _mount("tmpfs", root + TMP, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={spec.get('tmp_size', '1g')}")
    for src, dst, writable in spec["binds"]:
        if os.path.exists(src):
            _bind(src, dst, root, writable)
    for i, path in enumerate(spec.get("overlays", [])):
        # The folder as it is, where writes land in a private layer on the sandbox's /tmp: the
        # kernel may save a figure beside its notebook, and the real folder stays untouched.
        if not os.path.isdir(path):
            continue
        layer = f"{root}{TMP}/.overlay{i}"
        _ensure_dir(layer + "/upper")
        _ensure_dir(layer + "/work")
        if spec.get("isolation") == "full":
            os.chown(layer + "/upper", spec["uid"], spec["uid"])
        _ensure_dir(root + path)
        try:
            _mount("overlay", root + path, "overlay", MS_NOSUID | MS_NODEV,
                   f"lowerdir={path},upperdir={layer}/upper,workdir={layer}/work")
        except OSError:  # no overlayfs here: the folder read-only, as a bind
            _bind(path, path, root, False)
    for path in spec.get("hide", []):  # an empty read-only tmpfs over what a bind above would show
        if os.path.exists(root + path):
            _mount("tmpfs", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=755,size=4k")
    _ensure_dir(root + "/proc")
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this pid namespace only
    if os.path.isdir("/sys"):
        _bind("/sys", "/sys", root, False)  # read-only: torch reads the CPU topology there
    _ensure_dir(root + "/dev")
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID, "mode=755,size=1m")
    for dev in DEVICES + sorted(d for d in os.listdir("/dev") if d.startswith("nvidia")):
        if os.path.exists("/dev/" + dev):
            target = root + "/dev/" + dev
            open(target, "a").close()
            _mount("/dev/" + dev, target, None, MS_BIND)
    _ensure_dir(root + "/dev/shm")
    _mount("tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={spec.get('tmp_size', '1g')}")
    for link, target in (("/var/tmp", TMP), ("/dev/fd", "/proc/self/fd")):
        _ensure_dir(os.path.dirname(root + link))
        os.symlink(target, root + link)
    _ensure_dir(root + SANDBOX_DIR)
    _mount("tmpfs", root + SANDBOX_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=8m")
    for rel, content in spec.get("write_files", {}).items():
        path = root + SANDBOX_DIR + "/" + rel
        _ensure_dir(os.path.dirname(path))
        with open(path, "w") as f:
            f.write(content)
    _mount("", root + SANDBOX_DIR, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chroot(root)
    os.chdir("/")


def loopback_up() -> None:
    """Bring up ``lo`` in a new network namespace."""
    import fcntl

    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, ifr)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def private_dirs(spec: dict) -> int:
    """HOME, TMPDIR, the Triton cache and friends, owned by the student's uid; returns that uid."""
    owner = spec["uid"] if spec.get("isolation") == "full" else os.getuid()
    env = spec["env"]
    for key in ("HOME", "TMPDIR", "TRITON_CACHE_DIR", "MPLCONFIGDIR", "IPYTHONDIR"):
        path = env.get(key)
        if path and not os.path.isdir(path):
            _ensure_dir(path, 0o700)
            os.chown(path, owner, owner)
    mpl, mpl_dir = spec.get("mpl_cache"), env.get("MPLCONFIGDIR")
    if mpl and mpl_dir and os.path.isdir(mpl):  # a prebuilt font cache: no kernel builds its own
        for name in os.listdir(mpl):
            if os.path.isfile(os.path.join(mpl, name)):
                dst = os.path.join(mpl_dir, name)
                shutil.copy(os.path.join(mpl, name), dst)
                os.chown(dst, owner, owner)
    for path in spec.get("student_dirs", []):  # e.g. the kernel's ipc socket folder
        if os.path.isdir(path):
            os.chown(path, owner, owner)
    return owner


# ---------------------------------------------------------------------------
# Messages on the zygote's socket: a 4-byte length, then JSON; fds ride on the length.


def send_msg(sock: socket.socket, obj, fds: list[int] = ()) -> None:
    body = json.dumps(obj).encode()
    header = struct.pack(">I", len(body))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(body)


def recv_msg(sock: socket.socket, with_fds: bool = False):
    if with_fds:
        header, fds, _, _ = socket.recv_fds(sock, 4, 16)
    else:
        header, fds = sock.recv(4), []
    if len(header) < 4:
        header += _recv_exact(sock, 4 - len(header))
    (n,) = struct.unpack(">I", header)
    msg = json.loads(_recv_exact(sock, n).decode())
    return (msg, fds) if with_fds else msg


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("socket closed")
        data += chunk
    return data


# ---------------------------------------------------------------------------
# The zygote and its handlers


def _exit_with(default: int, fn, *args) -> None:
    """In a forked child: ``fn(*args)``, then ``os._exit`` with its status; never returns into the parent's code."""
    code = default
    try:
        code = fn(*args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        os._exit(code)


def zygote(path: str, extra_preload: list[str] = ()) -> int:
    """Preload, then fork one handler per request on the socket at ``path``, for ever."""
    os.environ["MPLBACKEND"] = "Agg"
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # no module of ours by a bare name
    ready = os.dup(1)
    os.dup2(2, 1)  # what imports print goes to the log; only "ready" goes to the parent
    for name in PRELOAD + list(extra_preload):
        with contextlib.suppress(Exception):  # a missing optional package only costs its import later
            __import__(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the grader
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(64)
    os.write(ready, b"ready\n")
    os.close(ready)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _exit_with(1, handle, conn)  # a handler must never return into the zygote's loop
        conn.close()


def handle(conn: socket.socket) -> int:
    """Serve one request: build the sandbox, run the target, report how it ended."""
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a sandbox never outlives the zygote
    req, fds = recv_msg(conn, with_fds=True)
    spec = req["spec"]
    full = spec.get("isolation") == "full"
    if full:
        _check(libc().unshare(NAMESPACES), "unshare")
    init = os.fork()
    if init == 0:
        conn.close()
        _exit_with(120, run_init, spec, req, fds)
    for fd in fds:
        os.close(fd)
    # The init's pid as the grader's processes see it (this handler is outside the sandbox's pid namespace): the
    # trusted checker counts the pages the student's processes touch from /proc (autograder/pages.py).
    send_msg(conn, {"event": "started", "init": init})
    while True:
        ready, _, _ = select.select([conn], [], [], 0.2)
        done, status = os.waitpid(init, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                send_msg(conn, {"event": "exit", "code": code})
            return 0
        if ready:
            try:
                msg = recv_msg(conn)
            except (EOFError, OSError, ValueError):
                _signal_student(init, signal.SIGKILL, full)  # the client is gone: so is the sandbox, all of it
                os.kill(init, signal.SIGKILL)
                os.waitpid(init, 0)
                return 0
            if "signal" in msg:
                _signal_student(init, int(msg["signal"]), full)


def _signal_student(init: int, sig: int, full: bool) -> None:
    """Forward a signal to the student process (the init's child) and its process group."""
    try:
        with open(f"/proc/{init}/task/{init}/children") as f:
            children = [int(p) for p in f.read().split()]
    except OSError:
        children = []
    for pid in children or ([] if full else [init]):
        try:
            os.killpg(pid, sig)
        except OSError:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)


def run_init(spec: dict, req: dict, fds: list[int]) -> int:
    """Process 1 of the sandbox (or, without namespaces, the student's parent): set up, run, reap."""
    full = spec.get("isolation") == "full"
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if full:
        loopback_up()
        build_root(spec)
    owner = private_dirs(spec) if spec.get("isolation") != "host" else os.getuid()
    target = req["target"]
    conn_copy = None
    if target == "kernel":  # the connection file, readable by the student's uid only
        conn_copy = os.path.join(spec["env"].get("TMPDIR") or TMP, "kernel.json")
        with open(conn_copy, "w") as f:
            f.write(req["connection"])
        os.chown(conn_copy, owner, owner)
        os.chmod(conn_copy, 0o600)
    student = os.fork()
    if student == 0:
        _exit_with(121, run_student, spec, req, fds, conn_copy)
    for fd in fds[3:]:
        os.close(fd)
    while True:  # reap orphans (a fork bomb's children land here) until the student process ends
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if done == student:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


def run_student(spec: dict, req: dict, fds: list[int], conn_copy: str | None) -> int:
    """The student process: stdio from the client, env, cwd, limits, uid; then the target in-process."""
    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
    os.environ.clear()
    os.environ.update(spec["env"])
    os.chdir(req.get("cwd") or spec.get("cwd") or "/")
    target = req["target"]
    if spec.get("isolation") == "host":  # the grader's own code (the trusted checker): no sandbox
        # The checker sets its own rlimits once it has started (autograder.checker.limit_checker): its
        # address-space limit is relative to its size then, with CUDA started where the checks use it.
        os.setsid()
        libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        sys.argv = [req["module"], *req.get("args", [])]
        runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
        return 0
    become_student(spec)
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after the uid change, which clears it
    if "torch" in sys.modules and spec["env"].get("OMP_NUM_THREADS", "").isdigit():
        sys.modules["torch"].set_num_threads(int(spec["env"]["OMP_NUM_THREADS"]))  # the pool was sized in the zygote
    if target == "kernel":
        from ipykernel.kernelapp import IPKernelApp

        IPKernelApp.launch_instance(argv=["-f", conn_copy, *req.get("args", [])])
        return 0
    if target == "valueworker":
        if spec.get("isolation") != "full":
            sys.meta_path.insert(0, _Refuse(spec.get("refuse_imports", [])))
        sys.argv = ["valueworker", str(fds[3]), str(fds[4])]
        runpy.run_path(req["script"], run_name="__main__")
        return 0
    raise ValueError(f"unknown target {target!r}")


class _Refuse:
    """Without a new root, keep the grading packages out of the worker's imports (a speed bump only)."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named '{name}'")
        return None


# ---------------------------------------------------------------------------
# Clients


def spawn(socket_path: str, spec: dict, target: str, fds: list[int], started: dict | None = None,
          **extra) -> socket.socket:
    """Ask the zygote for a sandbox running ``target``; the returned socket is its lifeline.

    ``started``: filled with the zygote's answer (``init``: the pid of the sandbox's first process, whose
    descendants are the student's).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path)
    send_msg(sock, {"spec": spec, "target": target, **extra}, fds)
    msg = recv_msg(sock)
    if msg.get("event") != "started":
        raise OSError(f"the zygote did not start the sandbox: {msg}")
    if started is not None:
        started.update(msg)
    return sock


def run(socket_path: str, spec: dict, target: str, fds: list[int], timeout: float, **extra) -> int | None:
    """Spawn and wait for the exit status; None when ``timeout`` passed first (then it is killed)."""
    sock = spawn(socket_path, spec, target, fds, **extra)
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                return None
            msg = recv_msg(sock)
            if msg.get("event") == "exit":
                return int(msg["code"])
    except (EOFError, OSError):
        return 1
    finally:
        sock.close()


def launch(socket_path: str, spec_path: str, connection_file: str, args: list[str]) -> int:
    """The kernelspec's command: a kernel in a sandbox, standing in for it towards jupyter_client."""
    with open(spec_path) as f:
        spec = json.load(f)
    with open(connection_file) as f:
        connection = f.read()
    pid_file = spec.get("pid_file")
    if pid_file:
        with open(pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    sock = spawn(socket_path, spec, "kernel", [0, 1, 2], connection=connection, args=args, cwd=os.getcwd())

    def forward(signum, frame):
        with contextlib.suppress(OSError):
            send_msg(sock, {"signal": signum})

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            msg = recv_msg(sock)
        except InterruptedError:
            continue
        except (EOFError, OSError):
            return 1
        if msg.get("event") == "exit":
            code = int(msg["code"])
            if code > 128:  # the kernel died of a signal: so do we, for nbclient to read
                signal.signal(code - 128, signal.SIG_DFL)
                os.kill(os.getpid(), code - 128)
            return code


class Zygote:
    """The parent's handle on a zygote process: start it, wait until it has preloaded, stop it."""

    def __init__(self, folder: str, log_path: str, env: dict | None = None, preload: list[str] = (),
                 wait: bool = True):
        """Start it. Call from the thread that will outlive it: the zygote dies with the thread that started it."""
        self.short = None
        if len(os.path.join(folder, "zygote.sock")) > SOCKET_PATH_MAX:
            # A Unix socket's path holds at most 107 bytes: under a long --work path, listen in a
            # folder of /tmp named after this one instead (and remove it on stop).
            self.short = folder = short_folder(folder, "agz")
            shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        self.socket = os.path.join(folder, "zygote.sock")
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "zygote", self.socket, *preload],
                                     stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until it has preloaded and listens (several seconds)."""
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"the sandbox zygote did not start (see {self.log_path})")

    def stop(self) -> None:
        kill_group(self.proc)
        self.proc.wait()
        self.log.close()
        if self.short:
            shutil.rmtree(self.short, ignore_errors=True)


# The longest path a Unix socket may have (sun_path is 108 bytes, NUL included), less a margin.
SOCKET_PATH_MAX = 100


def short_folder(owner: str, prefix: str) -> str:
    """A folder in /tmp whose short name ``owner``'s path determines: for sockets whose own place is too deep."""
    import hashlib

    return os.path.join("/tmp", f"{prefix}-{hashlib.sha256(os.path.abspath(owner).encode()).hexdigest()[:16]}")


@functools.cache
def available_isolation() -> str:
    """"full" where namespaces and chroot work (root on Linux), else "none". Probed once, in a child."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "none"
    pid = os.fork()
    if pid == 0:
        _exit_with(1, lambda: 0 if libc().unshare(NAMESPACES) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return "full" if os.waitstatus_to_exitcode(status) == 0 else "none"


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a process started with start_new_session=True: its whole process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if argv[:1] == ["zygote"]:
        return zygote(argv[1], argv[2:])
    if argv[:1] == ["launch"]:
        return launch(argv[1], argv[2], argv[3], argv[4:])
    print("usage: sandbox.py zygote SOCKET | sandbox.py launch SOCKET SPEC CONNECTION_FILE [ARGS]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
