"""The grading kernel's jail: ipykernel inside bubblewrap, as an unprivileged user, with limits.

jupyter_client starts this script (kernelspec "course-sandbox") as the kernel, in the submission's autograded
folder. It hands the connection file to the sandbox and starts prlimit (memory, processes, file size, CPU time)
-> bwrap (an allow-list of read-only folders: the system's, Python's, the venv and the course's helpers; private
size-capped /tmp; no network; only a fresh tmpfs working folder and the kernel's socket folder writable; a clean
environment; a seccomp filter as strict as a container's: graders/seccomp.py) -> setpriv (drop to the sandbox user, no
capabilities) -> a placeholder. The kernel itself is a fork of the grading process's warm kernel server
(graders/warm_kernel.py: torch and ipykernel imported once), which enters this jail and takes the same limits,
user, environment and filter before it runs ipykernel. This script ends with the kernel, and the jail with it.
The jail's stdin is /dev/null, its stdout and stderr a pipe this script drains (the first KERNEL_OUTPUT_BYTES into
the grader's log): no file of the host's is open in the jail, for a kernel to write gigabytes into.

Settings come from the environment the grading pipeline sets (GRADER_*; see graders/pipeline.py).

Bounds that depend on the machine:
* the kernel's socket folder (`ipc_folder`, made by the pipeline) is a tmpfs of its own (IPC_TMPFS: 1 MiB, 64
  inodes), so that what a student writes there is capped and never reaches the disk; where the grader may not
  mount (no CAP_SYS_ADMIN, e.g. an unprivileged container) it is a plain folder under /tmp: the one place in
  the jail where a submission can write to the machine's disk, bounded only by prlimit's file size;
* user namespaces (`unshare -Ur`, in which a student would be root of a mount namespace and could mount tmpfs
  beyond every cap) are refused by a seccomp filter on x86_64 and aarch64 machines (and their 32-bit ABIs);
  on other architectures there is no filter.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")  # read-only inside
# The only variables the kernel inherits from the grader (whose environment may hold an instructor's secrets);
# HOME, TMPDIR and MPLCONFIGDIR are the jail's own.
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS", "PJRT_DEVICE", "COURSE_XLA_CPU_DEVICES", "OMP_WAIT_POLICY",
            "COURSE_GRADED_KERNEL")
TMPFS_BYTES = ("GRADER_TMPFS_BYTES", str(2 * 2**30))  # each of /tmp, /var/tmp, /dev/shm: memory a student could fill
LIMITS = {  # prlimit option -> environment variable, default
    "--as": ("GRADER_MEMORY_BYTES", str(16 * 2**30)),  # torch needs >= 8 GiB of address space
    "--nproc": ("GRADER_MAX_PROCESSES", "512"),
    "--fsize": ("GRADER_MAX_FILE_BYTES", str(2**30)),
    "--cpu": ("GRADER_CPU_SECONDS", "3600"),
    "--nofile": ("GRADER_MAX_OPEN_FILES", "4096"),
}


def sandbox_ids() -> tuple[int, int]:
    """The unprivileged uid/gid to run as. The pipeline gives each parallel grading job its own uid
    (GRADER_SANDBOX_UID), so that one submission's fork bomb cannot use up another's process limit."""
    if os.environ.get("GRADER_SANDBOX_UID"):
        uid = int(os.environ["GRADER_SANDBOX_UID"])
        return uid, uid
    user = pwd.getpwnam("nobody")
    return user.pw_uid, user.pw_gid


def chown_tree(path: str, uid: int, gid: int) -> None:
    for folder, dirs, files in os.walk(path):
        os.chown(folder, uid, gid)
        for name in files:
            os.chown(os.path.join(folder, name), uid, gid, follow_symlinks=False)


# The kernel's socket folder: sockets and the connection file need a few inodes and no room.
IPC_TMPFS = "size=1m,nr_inodes=64,mode=0700,nosuid,nodev,noexec"


def ipc_prefix(block: int) -> str:
    """The socket folders' name prefix for a grading process holding this uid block (graders/slots.py sweeps it)."""
    return f"course-ipc-{block}-"


@contextlib.contextmanager
def ipc_folder(prefix: str = "g-"):
    """A fresh folder under /tmp for the kernel's unix sockets (GRADER_IPC_PREFIX), on a small tmpfs mounted on
    it in this (the host's) mount namespace, so that nbgrader outside the jail and the kernel inside (bwrap binds
    it writable) reach the same sockets, and what a student writes there is capped and never reaches the disk.
    Unmounted and removed at the end. Where this process may not mount, a plain folder (see the module's doc)."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir="/tmp") as folder:
        mounted = _mount_tmpfs(folder, IPC_TMPFS)
        try:
            yield folder
        finally:
            if mounted:
                _unmount(folder, check=True)


def remove_ipc_folders(prefix: str) -> None:
    """Unmount and remove the socket folders named `prefix`* that a killed grading process left behind."""
    for name in os.listdir("/tmp"):
        folder = os.path.join("/tmp", name)
        if name.startswith(prefix):
            if os.path.ismount(folder):
                _unmount(folder, check=False)
            shutil.rmtree(folder, ignore_errors=True)


def _unmount(folder: str, check: bool) -> None:
    # lazy: a process still inside cannot keep the folder from being removed
    subprocess.run(["umount", "--lazy", folder], check=check, capture_output=True)


def _mount_tmpfs(folder: str, options: str) -> bool:
    if os.geteuid() != 0:
        return False
    try:
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", folder], capture_output=True)
    except OSError:  # no mount command
        return False
    return mount.returncode == 0


def jail_environment(workdir: str, environ=None) -> dict[str, str]:
    """The kernel's whole environment: ENV_KEEP's variables of `environ` (this process's), and the jail's own."""
    environ = os.environ if environ is None else environ
    return {**{name: environ[name] for name in ENV_KEEP if name in environ},
            "HOME": workdir, "TMPDIR": "/tmp", "MPLCONFIGDIR": "/tmp", "PWD": workdir}


def private_connection_file(connection_file: str) -> str:
    """A copy of the connection file in the kernel's socket folder (the jail sees that folder only), both
    the sandbox user's."""
    uid, gid = sandbox_ids()
    with open(connection_file) as f:
        info = json.load(f)
    if info.get("transport") != "ipc":
        raise SystemExit("the sandboxed kernel needs the ipc transport (c.KernelManager.transport = 'ipc')")
    ipc_dir = os.path.dirname(info["ip"])
    private = os.path.join(ipc_dir, "connection.json")
    shutil.copy(connection_file, private)
    chown_tree(ipc_dir, uid, gid)
    return private


def command(workdir: str, ipc_dir: str, ready_fd: int, info_fd: int, seccomp_fd: int | None = None) -> list[str]:
    """The jail's command line, with a placeholder inside (the sandbox user's shell: it writes a byte to `ready_fd`
    once the jail is built, then sleeps) that graders/warm_kernel.py's kernel joins; bwrap writes the host pid of
    the jail's first process to `info_fd`. `seccomp_fd` is an inherited file descriptor holding graders/seccomp.py's `program()`."""
    from graders import jail_etc

    uid, gid = sandbox_ids()
    keep_readonly = [sys.base_prefix, sys.prefix] + [p for p in os.environ.get("GRADER_READONLY", "").split(os.pathsep) if p]
    size = ["--size", os.environ.get(*TMPFS_BYTES)]
    accounts = {name: jail_etc.with_entry(name, line, uid) for name, line in (  # getpass/pwd must know the uid
        ("passwd", f"grader:x:{uid}:{gid}:grading sandbox:{workdir}:/usr/sbin/nologin\n"), ("group", f"grader:x:{gid}:\n"),
        ("hosts", "::1 localhost\n::ffff:127.0.0.1 localhost\n"))}  # no DNS in here: loopback by file
    mounts = []
    for path in SYSTEM:  # an allow-list: nothing else of the machine (homes, /srv, /opt, /var, /run) exists inside
        if path == "/etc":
            mounts += jail_etc.own_etc(accounts)
        elif os.path.islink(path):
            mounts += ["--symlink", os.readlink(path), path]  # merged /usr: /bin -> usr/bin
        elif os.path.isdir(path):
            mounts += ["--ro-bind", path, path]
    mounts += ["--dev", "/dev", "--proc", "/proc"]
    for device in accelerator_devices():  # a GPU or TPU grading machine lends its accelerators to the kernel
        mounts += ["--dev-bind", device, device]
    for path in ("/tmp", "/var/tmp", "/dev/shm"):
        mounts += ["--perms", "1777", *size, "--tmpfs", path]
    # The kernel's working folder is a fresh, size-capped tmpfs mounted where nbgrader runs it (the
    # autograded folder): what the student's code writes or links there never reaches the folder that
    # nbgrader, as root, writes the graded notebook and the feedback from, nor the machine's disk.
    workdir_mount = ["--perms", "1777", *size, "--tmpfs", workdir]
    binds = [("--ro-bind", p, p) for p in keep_readonly if os.path.exists(p)]
    binds += [("--bind", ipc_dir, ipc_dir)]
    made: set[str] = set()
    for kind, source, target in binds:
        mounts += _traversable_parents(os.path.abspath(target), made) + [kind, source, target]
    mounts += _traversable_parents(os.path.abspath(workdir), made) + workdir_mount

    limits = [f"{option}={value}" for option, value in limit_values().items()]
    # bwrap runs as root to see what it mounts (pyenv's Python lives under /root) and creates no user namespace;
    # the placeholder, like the kernel, is the sandbox user: a real unprivileged uid, no capabilities.
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    return [
        "prlimit", *limits, "--",
        "bwrap", *mounts, *seccomp, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session", "--info-fd", str(info_fd), "--chdir", workdir, "--clearenv",
        "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
        "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--",
        "/bin/sh", "-c", f"printf . >&{ready_fd} && exec sleep infinity",
    ]


def limit_values() -> dict[str, str]:
    """prlimit's option -> the value this job's environment sets (or the default)."""
    return {option: os.environ.get(var, default) for option, (var, default) in LIMITS.items()}


ACCELERATOR_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/accel*", "/dev/vfio/*")


def accelerator_devices() -> list[str]:
    """The GPU (NVIDIA) and TPU (accel, vfio) device nodes of this machine: bwrap's /dev has none of them."""
    import glob

    return sorted(p for pattern in ACCELERATOR_DEVICES for p in glob.glob(pattern) if not os.path.isdir(p))


def _traversable_parents(path: str, made: set[str]) -> list[str]:
    """bwrap makes missing mount points mode 0700; make the folders leading to a bound path (outside the
    system folders) 0755 so the sandbox user can reach it."""
    args, parents, parent = [], [], os.path.dirname(path)
    while parent not in ("/", ""):
        parents.append(parent)
        parent = os.path.dirname(parent)
    for folder in reversed(parents):
        if folder not in made and not any(folder == s or folder.startswith(s + "/") for s in SYSTEM):
            made.add(folder)
            args += ["--perms", "0755", "--dir", folder]
    return args


def _inherited_fd(data: bytes) -> int:
    """A file descriptor that reads `data` and survives the execs (prlimit, then bwrap, which reads it)."""
    read, write = os.pipe()
    os.write(write, data)  # a few hundred bytes: the pipe holds them
    os.close(write)
    os.set_inheritable(read, True)
    return read


def main() -> None:
    """The kernel launcher (the "course-sandbox" kernelspec): build the jail, ask the grading process's warm kernel
    server (GRADER_KERNEL_SERVER) for a kernel inside it, and end with the kernel, taking the jail down."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from graders import limits, seccomp, warm_kernel

    warm_kernel.die_with_parent()  # nbgrader: a killed grading run leaves no jail (bwrap dies with this process)
    server = os.environ.get("GRADER_KERNEL_SERVER")
    if not server:
        raise SystemExit("the sandboxed kernel is started by the grading pipeline (GRADER_KERNEL_SERVER is not set)")
    limits.join()  # the job's cgroups (CPU share, memory with tmpfs, processes), before the jail starts
    workdir = os.getcwd()
    private = private_connection_file(sys.argv[1])
    program = seccomp.program()
    ready_read, ready_write = os.pipe()
    info_read, info_write = os.pipe()
    inherited = [ready_write, info_write] + ([_inherited_fd(program)] if program else [])
    output_read, output_write = os.pipe()  # the jail's stdout and stderr: never this process's (files of the host)
    forwarding = threading.Thread(target=forward, args=(output_read, sys.stderr.buffer, KERNEL_OUTPUT_BYTES),
                                  daemon=True)
    forwarding.start()
    jail = subprocess.Popen(command(workdir, os.path.dirname(private), ready_write, info_write,
                                    inherited[2] if program else None),
                            pass_fds=inherited, stdin=subprocess.DEVNULL, stdout=output_write, stderr=output_write)
    for fd in inherited:
        os.close(fd)
    try:
        with os.fdopen(info_read, "rb") as info:
            jail_pid = json.loads(info.read() or b"{}").get("child-pid")
        with os.fdopen(ready_read, "rb") as ready:
            built = ready.read(1)
        if not jail_pid or not built:
            raise SystemExit(f"the jail did not start (bwrap exited with {jail.wait()})")
        uid, gid = sandbox_ids()
        request = {"jail_pid": jail_pid, "workdir": workdir, "uid": uid, "gid": gid, "argv": ["-f", private],
                   "env": jail_environment(workdir), "limits": limit_values(), "cgroups": limits.job_paths(),
                   "seccomp": program.hex() if program else None, "umask": _umask()}
        with open(os.devnull, "rb") as nothing:
            kernel = warm_kernel.start_kernel(server, request, (nothing.fileno(), output_write, output_write))
        status = warm_kernel.kernel_status(kernel)
    finally:
        jail.kill()
        jail.wait()
        os.close(output_write)
        forwarding.join(timeout=5)  # the rest of the jail's output, unless a process outside the jail still holds it
    sys.exit(status if 0 <= status < 256 else 128 - status)


KERNEL_OUTPUT_BYTES = 64 * 2**10  # what of the jail's stdout and stderr reaches the grader's log, per kernel


def forward(read_fd: int, sink, limit: int) -> None:
    """Copy the first `limit` bytes read from `read_fd` to `sink` (a binary stream), then read on to the end and drop
    the rest: the jail's writes never block, and never fill the grader's log or its memory."""
    if limit < 0:
        raise ValueError(f"limit must be a number of bytes (0 or more), got {limit}")
    kept = 0
    with os.fdopen(read_fd, "rb", buffering=0) as source:
        while chunk := source.read(2**16):
            if kept >= limit:
                continue
            part = chunk[:limit - kept]
            kept += len(part)
            note = b"\n[the kernel's output passed the grader's limit: the rest was dropped]\n" if kept >= limit else b""
            with contextlib.suppress(OSError, ValueError):
                sink.write(part + note)
                sink.flush()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def available() -> str | None:
    """Why the sandbox cannot run here, or None when it can."""
    for tool in ("bwrap", "prlimit", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian/Ubuntu: apt-get install bubblewrap util-linux)"
    if os.geteuid() != 0:
        return "grading in the sandbox runs as root (it hands each submission to an unprivileged user)"
    return None


def kernelspec(folder: str) -> str:
    """Write the "course-sandbox" kernelspec under `folder`/kernels and return `folder` (for JUPYTER_PATH)."""
    spec = os.path.join(folder, "kernels", "course-sandbox")
    os.makedirs(spec, exist_ok=True)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, os.path.abspath(__file__), "{connection_file}"],
                   "display_name": "Python 3 (grading sandbox)", "language": "python",
                   "interrupt_mode": "message"}, f)  # SIGINT would stop at bwrap; a message reaches the kernel
    return folder


if __name__ == "__main__":
    main()
