"""The grading jail (graders/sandbox.py) seen from inside a real sandboxed kernel, started the way nbgrader starts
it (jupyter_client, the ipc transport, the "course-sandbox" kernelspec, the pipeline's GRADER_* settings): no
user namespaces, a connection folder that cannot fill the disk, an account the kernel can look up, and threads
and processes that still start."""

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from graders import sandbox

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}")

REPO = Path(__file__).resolve().parent.parent
UID = 61990  # a sandbox uid of a block (15) that only the 16th concurrent grading run would take


class Jail:
    """A sandboxed kernel and its connection folder."""

    def __init__(self, client, ipc: str):
        self.client, self.ipc = client, ipc

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


@pytest.fixture(scope="module")
def jail(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("jail")
    specs = KernelSpecManager(kernel_dirs=[os.path.join(sandbox.kernelspec(str(scratch)), "kernels")])
    workdir = scratch / "autograded"  # the notebook's folder, where nbgrader starts the kernel
    workdir.mkdir()
    with sandbox.ipc_folder() as ipc:
        os.chmod(ipc, 0o700)
        manager = KernelManager(kernel_name="course-sandbox", kernel_spec_manager=specs, transport="ipc",
                                ip=os.path.join(ipc, "k"), connection_file=str(scratch / "kernel.json"))
        env = {**os.environ, "GRADER_SANDBOX": "1", "GRADER_IPC_PREFIX": os.path.join(ipc, "k"),
               "GRADER_SANDBOX_UID": str(UID), "GRADER_READONLY": str(REPO / "helpers")}
        manager.start_kernel(env=env, cwd=str(workdir))
        client = manager.blocking_client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=60)
            yield Jail(client, ipc)
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
        found["unshare (i386)"] = {0: "made", -1: "EPERM"}.get(int(ran.stdout), ran.stdout)
if shutil.which("unshare"):
    found["unshare -Ur"] = subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode
print(json.dumps(found))
'''


@pytest.mark.skipif(sandbox.seccomp_program() is None, reason="no seccomp filter for this machine's architecture")
def test_the_jail_cannot_make_user_namespaces(jail):
    """In a user namespace of its own a student is root: mounts a tmpfs beyond every cap, and more."""
    found = jail.run(USER_NAMESPACES)
    assert found["unshare"] == "EPERM" and found["clone"] == "EPERM", found
    assert found["clone3"] == "ENOSYS", found
    assert found.get("unshare (i386)", "EPERM") == "EPERM", found
    assert found.get("unshare -Ur", 1) != 0, found


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
    path = sandbox._with_entry("passwd", line, uid)
    with open(path) as bound:  # the file a running jail sees
        before = bound.read()
        stop, misses = threading.Event(), []

        def rewrite():
            while not stop.is_set():
                sandbox._with_entry("passwd", line, uid)

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
