"""Grading kernels forked from a warm copy: torch, matplotlib and ipykernel imported once per grading process.

Most of a grading kernel's start is imports: torch (2.5 CPU-seconds on this project's machine), torch._dynamo (1.4:
torch.optim imports it with a student's first optimizer), matplotlib (1.2 with its font cache, made anew in each
jail's empty /tmp) and ipykernel (0.3). This server imports them once, as root, in the jail's environment and a /tmp
of its own (with the garbage collector off, then frozen: its forks never walk those objects), and never runs student
code. For each kernel, graders/sandbox.py builds the jail with bubblewrap, a placeholder process inside it, and asks
the server for a kernel on a unix socket only root can reach. The server forks a child that

1. joins the job's cgroups, then enters the jail: its mount, pid, network, ipc, uts and cgroup namespaces and its
   root folder, and its working folder;
2. forks the kernel there (a process of the jail's pid namespace: it dies with the jail), which takes the jail's
   limits (prlimit's), session, environment and file descriptors (the jail's own stdin, stdout and stderr that the
   launcher sends: /dev/null and a pipe it drains with a byte cap, never a file of the host's; every other is
   closed), drops to the sandbox user with no groups and no capabilities, sets no_new_privs and the jail's
   seccomp filter, and only then runs ipykernel;
3. reports the kernel's pid, then its exit status, to the launcher, and kills the kernel if the launcher goes away.
The kernel imports nothing before it is the sandbox user (the server imported all it needs), in a fresh jail.

    python -m graders.warm_kernel SOCKET      (the server; graders/slots.py starts one per grading process)
"""

from __future__ import annotations

import array
import atexit
import contextlib
import ctypes
import gc
import importlib
import importlib.util
import json
import os
import random
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass

from graders import limits, seccomp
from graders.private_tmp import check as _check
from graders.private_tmp import libc as _libc
from graders.private_tmp import private_tmp

PRELOAD = ("torch", "torch._dynamo", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell",
           "IPython.core.interactiveshell", "IPython.core.completer", "jupyter_client.session", "matplotlib.pyplot")
# What ipykernel puts in every kernel's environment before a cell runs (unless set; the jail's never is), for the
# imports that read it: matplotlib takes its backend from it when imported.
IPYKERNEL_ENV = {"MPLBACKEND": "module://matplotlib_inline.backend_inline"}
NAMESPACES = (("ipc", 0x08000000), ("uts", 0x04000000), ("net", 0x40000000), ("cgroup", 0x02000000),
              ("pid", 0x20000000), ("mnt", 0x00020000))  # setns order: the mount namespace last
RLIMITS = {"--as": resource.RLIMIT_AS, "--nproc": resource.RLIMIT_NPROC, "--fsize": resource.RLIMIT_FSIZE,
           "--cpu": resource.RLIMIT_CPU, "--nofile": resource.RLIMIT_NOFILE}
UNCOMPARED = ("HOME", "PWD")  # the jail's variables that differ per kernel (its working folder)
NO_HOME = "/nonexistent"  # the server's HOME and PWD: no import may depend on a kernel's
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL, LINUX_CAPABILITY_VERSION_3 = 4, 0x20080522
REQUEST_BYTES = 1 << 20

# ---- the server (root; never runs student code) ----------------------------------------------------------------

def serve(path: str, control=sys.stdin) -> None:
    """Listen on `path` (before importing: a launcher may connect while the imports run), import PRELOAD, then
    fork a child per connection. Ends when `control` (the slot's pipe) closes."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    private_tmp()
    environ, path_before = dict(os.environ), list(sys.path)
    os.environ.update(IPYKERNEL_ENV)
    gc.disable()  # imports for forks, as helpers.fresh.import_for_forks says
    for name in PRELOAD:
        importlib.import_module(name)
    gc.enable()
    gc.freeze()
    made = Made({k: v for k, v in os.environ.items() if environ.get(k) != v and k not in IPYKERNEL_ENV}, environ,
                [p for p in sys.path if p not in path_before and p.startswith(tempfile.gettempdir() + os.sep)])
    try:
        _accept(listener, control, made)
    finally:
        for folder in made.folders:
            shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Made:
    """What the server's imports did that a kernel's imports would have done in the jail."""
    env: dict[str, str]  # the variables they set
    environ: dict[str, str]  # the server's environment before them
    folders: list[str]  # the folders they made in the temporary folder (torch.distributed's templates), on sys.path


def _accept(listener: socket.socket, control, made: Made) -> None:
    if threading.active_count() != 1:  # (OpenBLAS's own pool, started by numpy, is remade after a fork by its atfork handler)
        raise SystemExit("the warm kernel server started a Python thread while importing: it cannot fork kernels safely")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children (one per kernel) are reaped by the system
    while True:
        readable, _, _ = select.select([listener, control], [], [])
        if control in readable and not os.read(control.fileno(), 1):
            return
        if listener in readable:
            connection, _ = listener.accept()
            if os.fork() == 0:
                status = 1
                try:
                    listener.close()
                    status = _serve_one(connection, made)
                except BaseException as error:  # noqa: BLE001 - the launcher hears why (the log has where)
                    traceback.print_exc()
                    with contextlib.suppress(Exception):
                        why = " ".join(f"{type(error).__name__}: {error}".split())
                        connection.sendall(f"error {why}\n".encode())
                finally:
                    os._exit(status)
            connection.close()


def _serve_one(connection: socket.socket, made: Made) -> int:
    """The child for one kernel: check the launcher and its request, enter the jail, fork the kernel, report."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    uid = struct_ucred(connection)[1]
    if uid != 0:
        raise PermissionError(f"a launcher of uid {uid} asked for a kernel (only root's are served)")
    request, fds = _receive(connection)
    differs = sorted(name for name in set(request["env"]) | set(made.environ) if name not in UNCOMPARED
                     and request["env"].get(name) != made.environ.get(name))
    if differs:  # the imports read these when the server started (OMP_WAIT_POLICY, TZ, ...): refuse, do not guess
        raise ValueError(f"the kernel's environment differs from the warm server's in {differs}")
    limits.join(paths=request["cgroups"])
    _enter_jail(request["jail_pid"], request["workdir"])
    kernel = os.fork()
    if kernel == 0:
        try:
            _become_kernel(request, fds, made)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            os._exit(1)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"pid {kernel}\n".encode())
    status = _wait(kernel, connection)
    with contextlib.suppress(OSError):
        connection.sendall(f"done {status}\n".encode())
    return 0


def struct_ucred(connection: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a unix socket."""
    data = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return tuple(int.from_bytes(data[i:i + 4], sys.byteorder) for i in (0, 4, 8))


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """The launcher's request (one JSON line) and the file descriptors sent with it: the kernel's stdin, stdout and
    stderr."""
    fds = array.array("i")
    data, ancillary, _, _ = connection.recvmsg(REQUEST_BYTES, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    while not data.endswith(b"\n"):
        more = connection.recv(REQUEST_BYTES)
        if not more:
            raise ConnectionError("the launcher left before its request ended")
        data += more
    if len(fds) != 3:
        raise ValueError(f"a kernel request brings its stdin, stdout and stderr; this one brought {len(fds)} files")
    return json.loads(data), list(fds)


def _enter_jail(jail_pid: int, workdir: str) -> None:
    """Enter the namespaces and the root folder of the jail whose first process is `jail_pid`."""
    namespaces = [(os.open(f"/proc/{jail_pid}/ns/{name}", os.O_RDONLY), kind) for name, kind in NAMESPACES]
    root = os.open(f"/proc/{jail_pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    for fd, kind in namespaces:
        _check(_libc.setns(fd, kind), "setns")
        os.close(fd)
    os.fchdir(root)
    os.chroot(".")
    os.close(root)
    os.chdir(workdir)


def _wait(pid: int, connection: socket.socket) -> int:
    """The kernel's exit status; if the launcher goes away first, kill the kernel (the jail dies with the
    launcher too, and the kernel with the jail)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        readable, _, _ = select.select([connection], [], [], 0.2)
        if readable and not connection.recv(1):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL


# ---- the kernel (root until _drop_privileges; then the student's) ----------------------------------------------

def die_with_parent(parent: int | None = None) -> None:
    """SIGKILL this process when its parent dies; leave at once if its parent is no longer `parent` (a fork's
    server, which may have died before this took effect; default: the parent it has now)."""
    parent = os.getppid() if parent is None else parent
    try:
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    finally:
        if os.getppid() != parent:
            os._exit(1)


def _become_kernel(request: dict, fds: list[int], made: Made) -> None:
    die_with_parent()  # the server's child for this kernel
    os.setsid()  # as bwrap's --new-session: no terminal to push input into
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    os.umask(request["umask"])
    for option, value in request["limits"].items():
        resource.setrlimit(RLIMITS[option], (int(value), int(value)))
    _drop_privileges(request["uid"], request["gid"])
    os.environ.clear()
    os.environ.update({**request["env"], **made.env})
    if request["seccomp"]:
        seccomp.load(bytes.fromhex(request["seccomp"]))  # and no_new_privs
    else:
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _run_ipykernel(request["argv"], made)


def _drop_privileges(uid: int, gid: int) -> None:
    """As setpriv --reuid --regid --clear-groups --inh-caps=-all --bounding-set=-all."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for capability in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # clears the permitted and effective capabilities
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    _check(_libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")  # and the inheritable ones
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl(PR_CAP_AMBIENT)")
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")  # /proc/self is the user's, as after exec
    if os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3 or os.getgroups():
        raise PermissionError("the kernel did not drop to the sandbox user")


def _run_ipykernel(argv: list[str], made: Made) -> None:
    """What `python -m ipykernel_launcher ARGV` does in a fresh interpreter, from here."""
    for folder in made.folders:  # the server's are outside the jail
        os.makedirs(folder, mode=0o700, exist_ok=True)
    del sys.path[0]  # the server's folder (ipykernel_launcher removes the kernel's: IPython puts '' back)
    sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *argv]
    for name in [n for n in sys.modules if n == "graders" or n.startswith("graders.")]:
        del sys.modules[name]
    random.seed()  # a fresh interpreter's state, not the server's
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    from ipykernel import kernelapp

    status = 0
    try:
        kernelapp.launch_new_instance()
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    finally:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)


# ---- the launcher's side (graders/sandbox.py) ----------------------------------------------------------------

def start_kernel(path: str, request: dict, stdio: tuple[int, int, int], timeout: float = 120) -> socket.socket:
    """Ask the server at `path` for a kernel in a jail; returns the connection once the kernel runs ("pid N").
    The file descriptors `stdio` become the kernel's stdin, stdout and stderr."""
    if len(stdio) != 3:
        raise ValueError(f"stdio must be three file descriptors (stdin, stdout, stderr), got {stdio!r}")
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    data = json.dumps(request).encode() + b"\n"
    connection.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", stdio).tobytes())])
    connection.settimeout(timeout)  # the server's imports, if it just started
    reply = _read_line(connection)
    connection.settimeout(None)
    if not reply.startswith("pid "):
        raise RuntimeError(f"the warm kernel server did not start the kernel: {reply}")
    return connection


def _read_line(connection: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        more = connection.recv(4096)
        if not more:
            break
        data += more
    return data.decode(errors="replace").strip()


def kernel_status(connection: socket.socket) -> int:
    """Wait for the kernel to end; its exit status (1 if the server's child went away without one)."""
    reply = _read_line(connection)
    return int(reply.split()[1]) if reply.startswith("done ") else 1


if __name__ == "__main__":
    serve(sys.argv[1])
