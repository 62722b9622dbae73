"""The jail's /etc: the machine's entries, with passwd, group and hosts of its own (the sandbox user's account; the
loopback names, no DNS). graders/sandbox.py builds it into every jail."""

import os
import tempfile


def own_etc(replaced: dict[str, str]) -> list[str]:
    """/etc as the jail's own folder: the machine's entries bound one by one (links copied), `replaced`'s files in
    place of theirs. Not the machine's /etc with files bound over: Linux drops a mount whose mount point another
    namespace renames over, so useradd (which renames a new /etc/passwd in) took a running kernel's account away.
    An entry gone by the time the jail starts is left out (--ro-bind-try): useradd's and vipw's /etc/group.PID live
    for a moment, and one listed here then stopped the jail ("Can't find source path"), its submission not graded."""
    mounts = ["--perms", "0755", "--tmpfs", "/etc"]
    for name in sorted(set(os.listdir("/etc")) - set(replaced)):
        path = os.path.join("/etc", name)
        try:
            if os.path.islink(path):
                mounts += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path) or os.path.isfile(path):
                mounts += ["--ro-bind-try", path, path]
        except OSError:  # a link gone meanwhile
            continue
    for name, source in replaced.items():
        mounts += ["--ro-bind", source, f"/etc/{name}"]
    return mounts + ["--remount-ro", "/etc"]


def with_entry(name: str, line: str, uid: int) -> str:
    """A copy of /etc/<name> with one more entry, for the sandbox's uid (torch and Lightning look it up).
    Written as a new file put in place atomically: a running jail of the same uid has the previous one
    bind-mounted, and a rewrite in place would show it (and a kernel starting meanwhile) a truncated file."""
    folder = "/run" if os.path.isdir("/run") and os.access("/run", os.W_OK) else "/tmp"
    path = os.path.join(folder, f"grader-{name}-{uid}")
    with open(f"/etc/{name}") as f:
        lines = [l if l.endswith("\n") else l + "\n" for l in f if not l.startswith(("grader:", "::1 localhost\n"))]
    fd, partial = tempfile.mkstemp(prefix=f".grader-{name}-{uid}-", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)
            f.writelines(lines + [line])
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise
    return path
