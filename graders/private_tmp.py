"""A process's own /tmp: a tmpfs mounted over the machine's in a mount namespace of its own, with the folders it
imports code from kept as they are (a course cloned under /tmp, its .venv inside). The warm kernel server
(graders/warm_kernel.py) imports torch and matplotlib into one, so that nothing any user put in /tmp reaches a root
process, and nothing those imports write there stays on the machine.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x00020000, 2, 4, 4096, 16384, 1 << 18

libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def private_tmp(keep: list[str] | None = None) -> None:
    """A /tmp of this process's own, as the jail's is the kernel's: what its imports read (matplotlibrc: TMPDIR and
    MPLCONFIGDIR are the jail's /tmp) or make there (matplotlib's font cache, torch.distributed's templates) is
    theirs alone, not the machine's /tmp that any user can write to. The folders of `keep` (default: where Python,
    the venv and the course are: `code_folders()`) that lie under /tmp -- a clone under /tmp -- stay as they are."""
    kept = _under_tmp(code_folders() if keep is None else keep)
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount(MS_PRIVATE)")
    machine_tmp = os.open("/tmp", os.O_PATH | os.O_DIRECTORY)  # in the new namespace (a bind's source must be)
    try:
        check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=256m,mode=1777"), "mount(/tmp)")
        for folder in kept:
            os.makedirs(folder, mode=0o755, exist_ok=True)
            source = f"/proc/self/fd/{machine_tmp}/{os.path.relpath(folder, '/tmp')}".encode()
            check(libc.mount(source, folder.encode(), None, MS_BIND | MS_REC, None), f"mount(--bind {folder})")
    finally:
        os.close(machine_tmp)


def code_folders() -> list[str]:
    """Where this process imports from: Python's prefixes, every folder on sys.path, the course."""
    from graders.course import REPO

    return [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
            str(REPO), *(p or os.getcwd() for p in sys.path)]


def _under_tmp(folders: list[str]) -> list[str]:
    """The existing folders of `folders` strictly under /tmp (resolved), none inside another."""
    tmp = os.path.realpath("/tmp")
    found = sorted({os.path.realpath(f) for f in folders if os.path.isdir(f)})
    under = [f for f in found if f.startswith(tmp + os.sep)]
    return [f for f in under if not any(f.startswith(other + os.sep) for other in under)]
