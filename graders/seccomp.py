"""The jail's seccomp filter: classic BPF over struct seccomp_data, like Flatpak's.

It refuses new user namespaces (unshare and clone with CLONE_NEWUSER: EPERM) and clone3 (ENOSYS: its flags are in
memory a filter cannot read; glibc and Rust then fall back to clone), and allows everything else. bwrap's --seccomp
reads `program()`; the warm kernel (graders/warm_kernel.py) loads it with `load`.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

AUDIT_ARCH = {"x86_64": 0xC000003E, "i386": 0x40000003, "aarch64": 0xC00000B7, "arm": 0x40000028}
SYSCALL_NUMBERS = {"x86_64": (56, 272, 435), "i386": (120, 310, 435),  # clone, unshare, clone3
                   "aarch64": (220, 97, 435), "arm": (120, 337, 435)}
# The ABIs a process of the machine can call (a 64-bit process can also make 32-bit calls, int 0x80 on x86_64).
# A call of any other ABI kills the process; x32 calls fail with ENOSYS, as where the kernel has no x32.
MACHINE_ABIS = {"x86_64": ("x86_64", "i386"), "aarch64": ("aarch64", "arm")}
CLONE_NEWUSER = 0x10000000
X32_SYSCALL_BIT = 0x40000000
LOAD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|BPF_W|BPF_ABS; BPF_JMP|BPF_K ...; BPF_RET|BPF_K
NR, ARCH, ARG0_LOW = 0, 4, 16  # offsets in seccomp_data (the first argument's low half: little-endian machines)
ALLOW, KILL = 0x7FFF0000, 0x80000000  # SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS


def _fail_with(error: int) -> int:
    return 0x00050000 | error  # SECCOMP_RET_ERRNO


def _abi_rules(abi: str) -> list[tuple]:
    """(code, k, jump if true, jump if false) rules for one ABI's calls; each path ends in a return."""
    clone, unshare, clone3 = SYSCALL_NUMBERS[abi]
    rules = [(LOAD, NR)]
    if abi == "x86_64":
        rules += [(JGE, X32_SYSCALL_BIT, 0, 1), (RET, _fail_with(errno.ENOSYS))]
    return rules + [(JEQ, clone3, 0, 1), (RET, _fail_with(errno.ENOSYS)),
                    (JEQ, unshare, 1, 0), (JEQ, clone, 0, 3),
                    (LOAD, ARG0_LOW), (JSET, CLONE_NEWUSER, 0, 1), (RET, _fail_with(errno.EPERM)),
                    (RET, ALLOW)]


def program(machine: str | None = None) -> bytes | None:
    """The jail's seccomp filter as bwrap's --seccomp reads it (struct sock_filter[]); None on a machine
    whose ABIs it does not know."""
    abis = MACHINE_ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    rules = [(LOAD, ARCH)]
    for abi in abis:
        block = _abi_rules(abi)
        rules += [(JEQ, AUDIT_ARCH[abi], 0, len(block))] + block
    rules.append((RET, KILL))
    return b"".join(_instruction(*rule) for rule in rules)


def _instruction(code: int, k: int, jump_if_true: int = 0, jump_if_false: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jump_if_true, jump_if_false, k)  # struct sock_filter


PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load(program_bytes: bytes) -> None:
    """Set no_new_privs and load the filter into this process (and every process it starts)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program_bytes, len(program_bytes))
    fprog = _SockFprog(len(program_bytes) // 8, ctypes.addressof(buffer))
    for call in ((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)):
        if libc.prctl(*call) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({call[0]}): {errno.errorcode.get(ctypes.get_errno())}")
