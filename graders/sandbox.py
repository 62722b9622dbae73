"""The grading kernel's jail: ipykernel inside bubblewrap, as an unprivileged user, with limits.

jupyter_client starts this script (kernelspec "course-sandbox") as the kernel, in the
submission's autograded folder. It hands the connection file to the sandbox and replaces itself
with:  prlimit (memory, processes, file size, CPU time) -> bwrap (an allow-list of read-only folders:
the system's, Python's, the venv and the course's helpers; private size-capped /tmp; no network; only a
fresh tmpfs working folder and the kernel's socket folder writable; a clean environment) -> setpriv (drop to the sandbox user, no capabilities) -> python -m ipykernel_launcher.

Settings come from the environment the grading pipeline sets (GRADER_*; see graders/pipeline.py).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")  # read-only inside
# The only variables the kernel inherits from the grader (whose environment may hold an instructor's secrets);
# HOME, TMPDIR and MPLCONFIGDIR are the jail's own.
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS", "PJRT_DEVICE", "COURSE_XLA_CPU_DEVICES", "OMP_WAIT_POLICY")
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


def command(connection_file: str, workdir: str) -> list[str]:
    uid, gid = sandbox_ids()
    with open(connection_file) as f:
        info = json.load(f)
    if info.get("transport") != "ipc":
        raise SystemExit("the sandboxed kernel needs the ipc transport (c.KernelManager.transport = 'ipc')")
    ipc_dir = os.path.dirname(info["ip"])
    private = os.path.join(ipc_dir, "connection.json")
    shutil.copy(connection_file, private)
    chown_tree(ipc_dir, uid, gid)

    keep_readonly = [sys.base_prefix, sys.prefix] + [p for p in os.environ.get("GRADER_READONLY", "").split(os.pathsep) if p]
    size = ["--size", os.environ.get(*TMPFS_BYTES)]
    mounts = []
    for path in SYSTEM:  # an allow-list: nothing else of the machine (homes, /srv, /opt, /var, /run) exists inside
        if os.path.islink(path):
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
    for name, line in (("passwd", f"grader:x:{uid}:{gid}:grading sandbox:{workdir}:/usr/sbin/nologin\n"),
                       ("group", f"grader:x:{gid}:\n"),
                       ("hosts", "::1 localhost\n::ffff:127.0.0.1 localhost\n")):  # no DNS in here: loopback by file
        mounts += ["--ro-bind", _with_entry(name, line, uid), f"/etc/{name}"]  # getpass/pwd must know the uid
    binds = [("--ro-bind", p, p) for p in keep_readonly if os.path.exists(p)]
    binds += [("--bind", ipc_dir, ipc_dir)]
    made: set[str] = set()
    for kind, source, target in binds:
        mounts += _traversable_parents(os.path.abspath(target), made) + [kind, source, target]
    mounts += _traversable_parents(os.path.abspath(workdir), made) + workdir_mount

    limits = [f"{option}={os.environ.get(var, default)}" for option, (var, default) in LIMITS.items()]
    # bwrap runs as root to see what it mounts (pyenv's Python lives under /root), creates no user
    # namespace, and the kernel drops to the sandbox user inside: a real unprivileged uid, no capabilities.
    return [
        "prlimit", *limits, "--",
        "bwrap", *mounts, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--chdir", workdir,
        "--clearenv", *[arg for name in ENV_KEEP if name in os.environ for arg in ("--setenv", name, os.environ[name])],
        "--setenv", "HOME", workdir, "--setenv", "TMPDIR", "/tmp", "--setenv", "MPLCONFIGDIR", "/tmp",
        "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
        "--bounding-set=-all", "--",
        sys.executable, "-m", "ipykernel_launcher", "-f", private,
    ]


ACCELERATOR_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/accel*", "/dev/vfio/*")


def accelerator_devices() -> list[str]:
    """The GPU (NVIDIA) and TPU (accel, vfio) device nodes of this machine: bwrap's /dev has none of them."""
    import glob

    return sorted(p for pattern in ACCELERATOR_DEVICES for p in glob.glob(pattern) if not os.path.isdir(p))


def _with_entry(name: str, line: str, uid: int) -> str:
    """A copy of /etc/<name> with one more entry, for the sandbox's uid (torch and Lightning look it up)."""
    path = f"/run/grader-{name}-{uid}" if os.path.isdir("/run") and os.access("/run", os.W_OK) else f"/tmp/grader-{name}-{uid}"
    with open(f"/etc/{name}") as f:
        lines = [l if l.endswith("\n") else l + "\n" for l in f if not l.startswith(("grader:", "::1 localhost\n"))]
    with open(path, "w") as f:
        f.writelines(lines + [line])
    return path


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


def main() -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from graders import limits

    limits.join()  # the job's cgroups (CPU share, memory with tmpfs, processes), before the jail starts
    cmd = command(sys.argv[1], os.getcwd())
    os.execvp(cmd[0], cmd)


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
