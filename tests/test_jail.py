"""The grading jail (graders/sandbox.py) seen from inside a real sandboxed kernel, started the way nbgrader starts
it (jupyter_client, the ipc transport, the "course-sandbox" kernelspec, the pipeline's GRADER_* settings, a fork of
the grading process's warm kernel server, graders/warm_kernel.py): no user namespaces, no privileges, nothing of the
server's but its imports, a connection folder that cannot fill the disk, an account the kernel can look up, threads
and processes that still start, and a kernel that ends with its launcher."""

import contextlib
import json
import os
import signal
import socket
import stat
import threading
import time
from pathlib import Path

import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from graders import jail_etc, sandbox, seccomp, slots, warm_kernel

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}")

REPO = Path(__file__).resolve().parent.parent
UID = 61990  # a sandbox uid of a block (15) that only the 16th concurrent grading run would take


class Jail:
    """A sandboxed kernel and its connection folder."""

    def __init__(self, client, ipc: str, manager):
        self.client, self.ipc, self.manager = client, ipc, manager

    def outputs(self, code: str) -> list[tuple[str, list[str]]]:
        """Run `code` in the kernel: its outputs' message types and data formats."""
        found = []
        reply = self.client.execute_interactive(code, timeout=60, output_hook=lambda message: found.append(
            (message["msg_type"], sorted(message["content"].get("data", {})))))
        assert reply["content"]["status"] == "ok", found
        return [output for output in found if output[0] not in ("status", "execute_input")]

    def run(self, code: str):
        """Run `code` in the kernel and return the JSON it printed."""
        printed, errors = [], []

        def collect(message):
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])
            elif message["msg_type"] == "error":
                errors.append("\n".join(message["content"]["traceback"]))

        reply = self.client.execute_interactive(code, timeout=60, output_hook=collect)
        assert reply["content"]["status"] == "ok", "".join(errors)
        return json.loads("".join(printed))


SECRET = "instructor-secret-4242"  # in the grader's environment: it must reach neither the server nor the kernel


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("kernels")
    env = {**os.environ, "GRADER_TOKEN": SECRET}
    kernels = slots.KernelServer(str(scratch), sandbox.jail_environment(warm_kernel.NO_HOME, env))
    yield kernels, env
    kernels.close()


@pytest.fixture(scope="module")
def jail(tmp_path_factory, server):
    with _kernel(tmp_path_factory.mktemp("jail"), *server) as started:
        yield started


@contextlib.contextmanager
def _kernel(scratch, kernels, grader_env, uid=UID, output=None):
    """A sandboxed kernel of `uid`, its launcher's stdout and stderr `output` (a file; default: this process's)."""
    specs = KernelSpecManager(kernel_dirs=[os.path.join(sandbox.kernelspec(str(scratch)), "kernels")])
    workdir = scratch / "autograded"  # the notebook's folder, where nbgrader starts the kernel
    workdir.mkdir()
    with sandbox.ipc_folder() as ipc:
        os.chmod(ipc, 0o700)
        manager = KernelManager(kernel_name="course-sandbox", kernel_spec_manager=specs, transport="ipc",
                                ip=os.path.join(ipc, "k"), connection_file=str(scratch / "kernel.json"))
        env = {**grader_env, "GRADER_SANDBOX": "1", "GRADER_IPC_PREFIX": os.path.join(ipc, "k"),
               "GRADER_SANDBOX_UID": str(uid), "GRADER_READONLY": str(REPO / "helpers"),
               "GRADER_KERNEL_SERVER": kernels.socket_path()}
        manager.start_kernel(env=env, cwd=str(workdir), **({"stdout": output, "stderr": output} if output else {}))
        client = manager.blocking_client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=120)
            yield Jail(client, ipc, manager)
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)


# Run in a child process: where a user namespace can be made, it would change the kernel's own process.
USER_NAMESPACES = r'''
import ctypes, errno, json, os, platform, shutil, subprocess, sys
probe = """
import ctypes, errno, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def outcome(result):
    return "made" if result >= 0 else errno.errorcode[ctypes.get_errno()]
def syscall(number, *args):
    return libc.syscall(*(ctypes.c_long(a) for a in (number, *args)))
found = {"unshare": outcome(libc.unshare(0x10000000))}  # CLONE_NEWUSER
clone = {"x86_64": 56, "aarch64": 220}[platform.machine()]
child = syscall(clone, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD: a fork in a new user namespace
if child == 0:
    os._exit(0)
if child > 0:
    os.waitpid(child, 0)
found["clone"] = outcome(child)
found["clone3"] = outcome(syscall(435, 0, 0))  # its arguments are in memory: refused as if unknown
print(json.dumps(found))
"""
found = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout)
# A 64-bit x86 process can make the 32-bit calls too (int 0x80), with the numbers of the i386 ABI.
i386_unshare = """
import ctypes, mmap, struct
code = b"\\x53\\xb8" + struct.pack("<I", 310) + b"\\xbb" + struct.pack("<I", 0x10000000) + b"\\xcd\\x80\\x5b\\xc3"
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)  # push rbx; mov eax, 310 (unshare); mov ebx, CLONE_NEWUSER; int 0x80; pop rbx; ret
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))())
"""
if platform.machine() == "x86_64":
    ran = subprocess.run([sys.executable, "-c", i386_unshare], capture_output=True, text=True)
    if ran.returncode == 0:  # else a kernel without 32-bit calls
        found["unshare (i386)"] = {0: "made", -1: "EPERM", -38: "ENOSYS"}.get(int(ran.stdout), ran.stdout)
if shutil.which("unshare"):
    found["unshare -Ur"] = subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode
print(json.dumps(found))
'''


@pytest.mark.skipif(seccomp.program() is None, reason="no seccomp filter for this machine's architecture")
def test_the_jail_cannot_make_user_namespaces(jail):
    """In a user namespace of its own a student is root: mounts a tmpfs beyond every cap, and more."""
    found = jail.run(USER_NAMESPACES)
    assert found["unshare"] == "EPERM" and found["clone"] == "EPERM", found
    assert found["clone3"] == "ENOSYS", found
    assert found.get("unshare (i386)", "ENOSYS") in ("EPERM", "ENOSYS"), found  # (the whole i386 ABI: ENOSYS)
    assert found.get("unshare -Ur", 1) != 0, found


# Run in a child process: a call that works (ptrace, personality) changes the process that makes it.
CONTAINER_REFUSES = r"""
import json, os, subprocess, sys
probe = '''
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
numbers = json.loads(os.environ["CALLS"])
def call(name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(numbers[name]), *args)
    return "allowed" if result >= 0 else errno.errorcode[ctypes.get_errno()]
buffer = ctypes.create_string_buffer(512)
found = {
    "keyctl": call("keyctl", 0, -4, 0),  # KEYCTL_GET_KEYRING_ID of the user's keyring
    "add_key": call("add_key", b"user", b"probe", b"x", 1, -4),
    "request_key": call("request_key", b"user", b"probe", None, 0),
    "io_uring_setup": call("io_uring_setup", 1, buffer),
    "perf_event_open": call("perf_event_open", buffer, 0, -1, -1, 0),
    "userfaultfd": call("userfaultfd", 1),  # UFFD_USER_MODE_ONLY: open to any user
    "process_vm_readv": call("process_vm_readv", os.getpid(), None, 0, None, 0, 0),
    "process_vm_writev": call("process_vm_writev", os.getpid(), None, 0, None, 0, 0),
    "kcmp": call("kcmp", os.getpid(), os.getpid(), 0, 0, 0),  # KCMP_FILE
    "pidfd_getfd": call("pidfd_getfd", 0, 0, 0),
    "personality": call("personality", 0x0400000),  # READ_IMPLIES_EXEC
    "unshare": call("unshare", 0x00000400),  # CLONE_FILES: no namespace at all
}
try:
    socket.socket(40, socket.SOCK_STREAM).close()  # AF_VSOCK: the hypervisor's
    found["vsock"] = "allowed"
except OSError as error:
    found["vsock"] = errno.errorcode.get(error.errno, error.errno)
found["ptrace"] = call("ptrace", 0, 0, 0, 0)  # PTRACE_TRACEME, last
print(json.dumps(found))
'''
ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, "CALLS": CALLS})
print(ran.stdout or json.dumps({"probe": ran.stderr[-2000:]}))
"""


@pytest.mark.skipif(seccomp.program() is None, reason="no seccomp filter for this machine's architecture")
def test_the_jail_refuses_what_a_container_refuses(jail):
    """io_uring, perf_event_open, userfaultfd, the keyrings, another process's memory and files, ptrace,
    personality, unshare and vsock stayed open to a kernel; Docker's default profile closes them."""
    column = ("x86_64", "aarch64").index(os.uname().machine)
    calls = {name: numbers[column] for name, numbers in CALLS.items()}
    found = jail.run(f"CALLS = {json.dumps(json.dumps(calls))}\n" + CONTAINER_REFUSES)
    assert found == dict.fromkeys(found, "EPERM") and len(found) == 14, found


CALLS = {"keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "io_uring_setup": (425, 425),
         "perf_event_open": (298, 241), "userfaultfd": (323, 282), "process_vm_readv": (310, 270),
         "process_vm_writev": (311, 271), "kcmp": (312, 272), "pidfd_getfd": (438, 438), "personality": (135, 92),
         "unshare": (272, 97), "ptrace": (101, 117)}  # (x86_64, aarch64)


KEYRING = r"""
import ctypes, errno, json, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
def outcome(result):
    return result if result >= 0 else errno.errorcode[ctypes.get_errno()]
def call(*args):
    return libc.syscall(*(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
USER_KEYRING, KEYCTL_SEARCH, KEYCTL_READ = -4, 10, 11
found = {}
if WRITE:
    found["added"] = outcome(call(add_key, b"user", b"left-by-a-submission", b"its hidden inputs", 17, USER_KEYRING))
else:
    key = call(keyctl, KEYCTL_SEARCH, USER_KEYRING, b"user", b"left-by-a-submission", 0)
    found["found"] = outcome(key)
    if key >= 0:
        buffer = ctypes.create_string_buffer(64)
        found["read"] = buffer.raw[:max(call(keyctl, KEYCTL_READ, key, buffer, 64), 0)].decode(errors="replace")
print(json.dumps(found))
"""


@pytest.mark.skipif(seccomp.program() is None, reason="no seccomp filter for this machine's architecture")
def test_a_submission_leaves_nothing_in_the_keyring_for_the_next(tmp_path, server):
    """A slot's uid grades one submission after another, and the kernel's keyrings are the uid's, not the jail's:
    what one kernel put in its user keyring, the next kernel on that slot read."""
    uid = UID + 2  # not the other tests' kernels'
    try:
        with _kernel(tmp_path / "first", *server, uid=uid) as first:
            added = first.run("WRITE = True\n" + KEYRING)
        with _kernel(tmp_path / "next", *server, uid=uid) as following:
            found = following.run("WRITE = False\n" + KEYRING)
        assert "read" not in found, found
        assert added == {"added": "EPERM"} and found == {"found": "EPERM"}, (added, found)
    finally:
        _clear_user_keyring(uid)


def _clear_user_keyring(uid: int) -> None:
    """Empty `uid`'s user keyring (where a filter let add_key through, a key stays there after the test)."""
    import ctypes

    child = os.fork()
    if child == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            keyctl = CALLS["keyctl"][("x86_64", "aarch64").index(os.uname().machine)]
            ctypes.CDLL(None).syscall(ctypes.c_long(keyctl), ctypes.c_long(7), ctypes.c_long(-4))  # KEYCTL_CLEAR
        finally:
            os._exit(0)
    os.waitpid(child, 0)


WRITE_EVERYWHERE = r"""
import json, os, stat
written = {}
into_the_cell = {(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)}  # ipykernel's pipes (and their copies)
for name in os.listdir("/proc/self/fd"):
    try:
        found = os.fstat(int(name))
    except OSError:  # listdir's own
        continue
    fd = int(name)
    if (found.st_dev, found.st_ino) in into_the_cell or not (stat.S_ISREG(found.st_mode) or stat.S_ISFIFO(found.st_mode)):
        continue
    try:
        written[fd] = sum(os.write(fd, b"x" * 2**20) for _ in range(8))
    except OSError as error:
        written[fd] = error.strerror
print(json.dumps(written))
"""


def test_no_file_of_the_host_reaches_the_jail(tmp_path, server):
    """ipykernel keeps a copy of the stdout and stderr it started with: the launcher's, files of the host's (the
    grading job's log), which a kernel filled up to its file-size limit and the grader then read whole."""
    log = tmp_path / "launcher.log"
    with open(log, "wb") as output, _kernel(tmp_path, *server, uid=UID + 3, output=output) as started:
        written = started.run(WRITE_EVERYWHERE)
        assert any(isinstance(count, int) and count >= 8 * 2**20 for count in written.values()), written
        host = os.stat(log)
        holders = [(pid, fd) for pid in _host_pids_of_uid(UID + 3) for fd in _fds(pid)
                   if _same_file(f"/proc/{pid}/fd/{fd}", host)]
        assert not holders, f"processes of the jail hold the launcher's log: {holders}"
    assert os.path.getsize(log) <= 64 * 2**10 + 1_000, os.path.getsize(log)  # what the launcher keeps of it


def _fds(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        return os.listdir(f"/proc/{pid}/fd")
    return []


def _same_file(path: str, host) -> bool:
    with contextlib.suppress(OSError):
        found = os.stat(path)
        return (found.st_dev, found.st_ino) == (host.st_dev, host.st_ino)
    return False


THREADS_AND_PROCESSES = r'''
import json, multiprocessing, os, subprocess, threading
started = {}
box = []
thread = threading.Thread(target=box.append, args=(1,))
thread.start()
thread.join()
started["thread"] = box == [1]
child = os.fork()
if child == 0:
    os._exit(7)
started["fork"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 7
started["subprocess"] = subprocess.run(["true"]).returncode == 0
for method in ("fork", "spawn"):
    process = multiprocessing.get_context(method).Process(target=os.getpid)
    process.start()
    process.join(30)
    started[f"multiprocessing ({method})"] = process.exitcode == 0
print(json.dumps(started))
'''


def test_threads_and_processes_still_start(jail):
    started = jail.run(THREADS_AND_PROCESSES)
    assert started == dict.fromkeys(started, True) and len(started) == 5, started


FILL_THE_CONNECTION_FOLDER = r'''
import errno, ipykernel, json, os
folder = os.path.dirname(ipykernel.get_connection_file())
try:
    with open(os.path.join(folder, "filler"), "wb") as f:
        f.write(bytes(8 * 2**20))
    error = None
except OSError as e:
    error = errno.errorcode.get(e.errno, e.errno)
print(json.dumps({"folder": folder, "error": error}))
'''


def test_the_connection_folder_cannot_fill_the_disk(jail):
    """The folder of the kernel's sockets is writable inside: a student once wrote 2.9 GiB there."""
    outcome = jail.run(FILL_THE_CONNECTION_FOLDER)
    assert outcome["folder"] == jail.ipc
    try:
        assert outcome["error"] in ("ENOSPC", "EACCES"), outcome
        assert _mount_of(jail.ipc)[0] == "tmpfs"
        assert sum(entry.stat().st_size for entry in os.scandir(jail.ipc) if entry.is_file()) <= 2**20
    finally:
        Path(jail.ipc, "filler").unlink(missing_ok=True)


def test_the_connection_folder_is_a_small_tmpfs_removed_afterwards():
    with sandbox.ipc_folder() as folder:
        fstype, options = _mount_of(folder)
        assert fstype == "tmpfs" and "size=1024k" in options and "nr_inodes=64" in options
        assert os.stat(folder).st_dev != os.stat("/tmp").st_dev
    assert not os.path.exists(folder) and _mount_of(folder) is None


def _mount_of(path: str):
    """(file system type, its options) of the mount on `path`, None if nothing is mounted there."""
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, rest = line.partition(" - ")
            if fields.split()[4] == path:
                fstype, _source, options = rest.split()[:3]
                found = fstype, options  # the last one mounted there is the one seen
    return found


ACCOUNT = r'''
import getpass, grp, json, os, pwd
print(json.dumps({"uid": os.getuid(), "user": pwd.getpwuid(os.getuid()).pw_name,
                  "group": grp.getgrgid(os.getgid()).gr_name, "getuser": getpass.getuser()}))
'''


def test_the_kernel_knows_its_account(jail):
    assert jail.run(ACCOUNT) == {"uid": UID, "user": "grader", "group": "grader", "getuser": "grader"}


def test_account_files_are_replaced_never_rewritten_in_place():
    """A running jail has its passwd file bound read-only: rewritten in place (truncated, then written), it
    showed a kernel of the same uid starting meanwhile no entry for its uid (getpwuid(): uid not found)."""
    uid = UID + 1
    line = f"grader:x:{uid}:{uid}:grading sandbox:/nowhere:/usr/sbin/nologin\n"
    path = jail_etc.with_entry("passwd", line, uid)
    with open(path) as bound:  # the file a running jail sees
        before = bound.read()
        stop, misses = threading.Event(), []

        def rewrite():
            while not stop.is_set():
                jail_etc.with_entry("passwd", line, uid)

        writer = threading.Thread(target=rewrite)
        writer.start()
        try:
            for _ in range(2000):
                with open(path) as starting:  # a kernel starting meanwhile
                    misses += [] if line in starting.read() else [1]
        finally:
            stop.set()
            writer.join()
        bound.seek(0)
        assert bound.read() == before and line in before
        assert os.fstat(bound.fileno()).st_ino != os.stat(path).st_ino, "the bound file was rewritten in place"
    assert not misses, f"{len(misses)} of 2000 reads found no entry"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


WHO_AND_WHAT = r"""
import gc, json, os, sys
def link(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # listdir's own
        return None
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
print(json.dumps({"ids": [os.getresuid(), os.getresgid(), os.getgroups()],
                  "capabilities": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
                  "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
                  "fds": sorted(filter(None, map(link, os.listdir("/proc/self/fd")))),
                  "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                  "environ": open("/proc/self/environ", "rb").read().decode(errors="replace"),
                  "env": dict(os.environ), "cwd": os.getcwd(), "root": sorted(os.listdir("/")),
                  "graders": sorted(n for n in sys.modules if n.startswith("graders")),
                  "gc": [gc.isenabled(), gc.get_freeze_count()]}))
"""


def test_the_warm_kernel_keeps_nothing_of_the_server_but_its_imports(jail, server):
    """The kernel is a fork of a root process (graders/warm_kernel.py): it must be the sandbox user with no groups
    and no capabilities, no_new_privs and the seccomp filter set, with no file of the server's (its socket, its
    pipe) open and no variable of the grader's environment, inside the jail's namespaces."""
    found = jail.run(WHO_AND_WHAT)
    assert found["ids"] == [[UID] * 3, [UID] * 3, []], found["ids"]
    assert set(found["capabilities"].values()) == {"0000000000000000"}, found["capabilities"]
    assert found["no_new_privs"] == "1" and found["seccomp"] == ("2" if seccomp.program() else "0"), found
    servers = {os.readlink(f"/proc/{server[0].proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{server[0].proc.pid}/fd")}
    assert not servers & set(found["fds"]), servers & set(found["fds"])  # its socket, its control pipe, its log
    assert not [fd for fd in found["fds"] if fd.startswith("/") and not fd.startswith((jail.ipc, found["cwd"], "/dev/", "/proc/"))
                and "(deleted)" not in fd], found["fds"]
    assert SECRET not in json.dumps(found), "the grader's environment reached the kernel"
    assert found["env"]["HOME"] == found["cwd"] == found["env"]["PWD"] and found["env"]["TMPDIR"] == "/tmp"
    assert "GRADER_KERNEL_SERVER" not in found["env"] and not found["graders"], found["graders"]
    assert found["processes"][:3] == [1, 2, 3] and len(found["processes"]) < 20, found["processes"]  # the jail's pid namespace
    assert "home" not in found["root"] and "run" not in found["root"], found["root"]
    # the kernel collects its own garbage, never the ~250,000 objects the server imported (they are frozen)
    assert found["gc"][0] and found["gc"][1] > 100_000, found["gc"]


def test_only_root_is_served(server):
    """The server's socket is root's alone; a process of any other uid that reaches it anyway is refused."""
    kernels, _ = server
    path = kernels.socket_path()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and os.stat(path).st_uid == 0
    assert _connect_as(UID, path) == "PermissionError"
    folders = [os.path.dirname(path)] + [str(p) for p in Path(path).parents[1:] if (os.stat(p).st_mode & 0o001) == 0]
    modes = {folder: os.stat(folder).st_mode for folder in folders}
    try:  # past the folders' and the file's modes: the server checks the peer's credentials
        for folder in folders:
            os.chmod(folder, 0o711)
        os.chmod(path, 0o666)
        answer = _connect_as(UID, path)
        assert answer.startswith("error") and "only root's are served" in answer, answer
    finally:
        os.chmod(path, 0o600)
        for folder, mode in modes.items():
            os.chmod(folder, mode)


def _connect_as(uid: int, path: str) -> str:
    """What a process of `uid` gets from the socket at `path`: the server's first line, or the error's name."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(read)
            os.setgid(uid)
            os.setuid(uid)
            try:
                connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                connection.connect(path)
                connection.settimeout(30)
                answer = connection.recv(4096).decode(errors="replace") or "closed"
            except OSError as error:
                answer = type(error).__name__
            os.write(write, answer.encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read, "rb") as answer:
        return answer.read().decode()


def test_a_request_in_another_environment_is_refused(server, tmp_path):
    """The server's imports read their environment once (OpenMP's wait policy, the time zone): a kernel asked for
    in another one is refused, not started with settings it did not ask for."""
    kernels, env = server
    request = {"env": sandbox.jail_environment(str(tmp_path), {**env, "OMP_WAIT_POLICY": "ACTIVE-NOT-PASSIVE"}),
               "jail_pid": os.getpid(), "workdir": str(tmp_path), "uid": UID, "gid": UID, "argv": [], "limits": {},
               "cgroups": [], "seccomp": None, "umask": 0o22}
    with pytest.raises(RuntimeError, match="differs from the warm server's in \\['OMP_WAIT_POLICY'\\]"):
        warm_kernel.start_kernel(kernels.socket_path(), request, (0, 1, 2))


def test_the_kernel_ends_with_its_launcher(tmp_path, server):
    """jupyter_client kills the launcher (graders/sandbox.py) of a kernel that does not shut down: the jail dies
    with it, and the kernel (a process of the jail's pid namespace) and everything it started with the jail."""
    uid = UID + 1  # not the module's other kernel's
    with _kernel(tmp_path, *server, uid=uid) as started:
        found = started.run("import json, os, subprocess\n"
                            "child = subprocess.Popen(['sleep', '300'])\n"
                            "print(json.dumps({'kernel': os.getpid(), 'child': child.pid}))")
        launcher = started.manager.provisioner.process.pid
        in_jail = _host_pids_of_uid(uid)
        assert len(in_jail) >= 3 and found["kernel"] != found["child"], in_jail  # the placeholder, the kernel, its sleep
        os.kill(launcher, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while _host_pids_of_uid(uid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _host_pids_of_uid(uid), "a process of the jail outlived its launcher"


def _host_pids_of_uid(uid: int) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{pid}").st_uid == uid:
                found.append(int(pid))
    return found


def test_a_plot_shows_in_the_notebook(jail):
    """The server imported matplotlib before any kernel started: a kernel's plot still goes to the notebook (the
    backend ipykernel sets), and matplotlib keeps its files in the jail's /tmp."""
    outputs = jail.outputs("import matplotlib, matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"
                           "print(matplotlib.get_backend(), matplotlib.get_configdir())")
    assert ("display_data", ["image/png", "text/plain"]) in outputs, outputs
    assert ("stream", []) in outputs
    found = jail.run("import json, matplotlib\nprint(json.dumps([matplotlib.get_backend(), matplotlib.get_configdir()]))")
    assert found == ["module://matplotlib_inline.backend_inline", "/tmp"]


def test_the_server_has_a_tmp_of_its_own(server):
    """What the server's imports read from or write to /tmp (a matplotlibrc, the font cache) is not the machine's
    /tmp, where any user could have put a file for a root process to read."""
    kernels, _ = server
    kernels.socket_path()
    pid = kernels.proc.pid
    deadline = time.monotonic() + 120
    while os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    mounts = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    assert any(line.split()[4] == "/tmp" and " - tmpfs " in line for line in mounts), "no tmpfs on the server's /tmp"


def test_a_course_under_tmp_keeps_its_code_in_the_servers_tmp(tmp_path):
    """A clone under /tmp (its .venv inside): the server's private /tmp still shows the folders it imports from,
    and nothing else of the machine's /tmp. (Before, the tmpfs hid a .venv under /tmp and every kernel failed.)"""
    import subprocess
    import sys
    import tempfile

    clone = Path(tempfile.mkdtemp(prefix="clone-", dir="/tmp"))
    other = Path(tempfile.mkdtemp(prefix="not-code-", dir="/tmp"))
    try:
        (clone / "site").mkdir()
        (clone / "site" / "course_code_under_tmp.py").write_text("VALUE = 42\n")
        script = (f"import json, os, sys; sys.path.append({str(clone / 'site')!r})\n"
                  "from graders import private_tmp; private_tmp.private_tmp()\n"
                  "import course_code_under_tmp\n"
                  f"print(json.dumps([course_code_under_tmp.VALUE, os.path.exists({str(other)!r}), os.listdir('/tmp')]))")
        ran = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr[-2000:]
        value, sees_other, listed = json.loads(ran.stdout)
        # (a course that is itself under /tmp keeps its folder too)
        assert value == 42 and not sees_other and clone.name in listed and other.name not in listed, listed
    finally:
        for folder in (clone, other):
            for path in sorted(folder.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            folder.rmdir()
