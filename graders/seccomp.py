"""The jail's seccomp filter: classic BPF over struct seccomp_data, generated from a table of refused calls.

A deny-list at least as strict as the container runtimes' default profile (moby's profiles/seccomp/default.json for a
process without capabilities, which the jail's are): every call that profile does not allow is refused (EPERM), and
so are io_uring (its rings run calls no filter sees), ptrace, process_vm_readv/writev, kcmp and pidfd_getfd (another
process's memory and files) and the keyrings (kept per uid, not per jail: a slot's uid is reused for the next
submission). clone with a namespace flag, socket(AF_VSOCK) and personality other than Docker's few values are
refused too. clone3 fails with ENOSYS (its flags are in memory a filter cannot read; glibc falls back to clone), and
so does every number above the last call this table knows (LAST_KNOWN): a call newer than the table is refused, as
an allow-list would, and a program that probes for it falls back as on an older kernel. The other ABI a process
could call (i386 on x86_64, arm on aarch64) is refused whole (ENOSYS); a call of any other ABI kills the process.

bwrap's --seccomp reads `program()`; the warm kernel (graders/warm_kernel.py) loads it with `load`.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

AUDIT_ARCH = {"x86_64": 0xC000003E, "i386": 0x40000003, "aarch64": 0xC00000B7, "arm": 0x40000028}
# The machine's own ABI and the 32-bit one its processes can also call (int 0x80 on x86_64).
MACHINE_ABIS = {"x86_64": ("x86_64", "i386"), "aarch64": ("aarch64", "arm")}
ABI_COLUMN = {"x86_64": 0, "aarch64": 1}
LAST_KNOWN = 450  # set_mempolicy_home_node (Linux 6.1): the table's numbers go this far

# name: (x86_64, aarch64) numbers (None: that ABI has no such call); from Linux 6.1's unistd headers.
REFUSED = {
    # another process's memory, files or execution; the per-uid keyrings
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "kcmp": (312, 272),
    "pidfd_getfd": (438, 438), "process_madvise": (440, 440),
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    # calls that run past the filter, watch the machine or reach the kernel's internals
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "perf_event_open": (298, 241), "bpf": (321, 280), "userfaultfd": (323, 282), "fanotify_init": (300, 262),
    "lookup_dcookie": (212, 18), "open_by_handle_at": (304, 265), "syslog": (103, 116),
    # namespaces and mounts
    "unshare": (272, 97), "setns": (308, 268), "chroot": (161, 51), "pivot_root": (155, 41), "mount": (165, 40),
    "umount2": (166, 39), "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    # the machine's state: time, host names, swap, modules, quotas, accounting, reboot
    "settimeofday": (164, 170), "clock_settime": (227, 112), "sethostname": (170, 161),
    "setdomainname": (171, 162), "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "quotactl": (179, 60), "quotactl_fd": (443, 443),
    "acct": (163, 89), "vhangup": (153, 58), "iopl": (172, None), "ioperm": (173, None),
    # memory placement (NUMA policies: Docker's need CAP_SYS_NICE)
    "mbind": (237, 235), "set_mempolicy": (238, 237), "get_mempolicy": (239, 236), "migrate_pages": (256, 238),
    "move_pages": (279, 239), "set_mempolicy_home_node": (450, 450),
    # obsolete or never implemented
    "uselib": (134, None), "ustat": (136, None), "sysfs": (139, None), "_sysctl": (156, None),
    "nfsservctl": (180, 42), "create_module": (174, None), "get_kernel_syms": (177, None),
    "query_module": (178, None), "getpmsg": (181, None), "putpmsg": (182, None), "afs_syscall": (183, None),
    "tuxcall": (184, None), "security": (185, None), "vserver": (236, None),
}
# Allowed with some arguments only (the first argument's low half: all these take 32-bit values)
CLONE, SOCKET, PERSONALITY, CLONE3 = "clone", "socket", "personality", "clone3"
NUMBERS = {CLONE: (56, 220), SOCKET: (41, 198), PERSONALITY: (135, 92), CLONE3: (435, 435)}
CLONE_NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
AF_VSOCK = 40
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # Linux, with UNAME26/ADDR_NO_RANDOMIZE; the query

LOAD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|BPF_W|BPF_ABS; BPF_JMP|BPF_K ...; BPF_RET|BPF_K
NR, ARCH, ARG0_LOW = 0, 4, 16  # offsets in seccomp_data (the first argument's low half: little-endian machines)
ALLOW, KILL = 0x7FFF0000, 0x80000000  # SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS
MAX_JUMP = 255  # a conditional jump's offset is one byte


def _fail_with(error: int) -> int:
    return 0x00050000 | error  # SECCOMP_RET_ERRNO


ALLOWED, REFUSE, UNKNOWN = "allowed", "refused", "unknown"
LEAVES = {  # what the filter does with a call, once its number is known
    ALLOWED: [(RET, ALLOW)],
    REFUSE: [(RET, _fail_with(errno.EPERM))],
    UNKNOWN: [(RET, _fail_with(errno.ENOSYS))],
    CLONE3: [(RET, _fail_with(errno.ENOSYS))],
    CLONE: [(LOAD, ARG0_LOW), (JSET, CLONE_NAMESPACES, 0, 1), (RET, _fail_with(errno.EPERM)), (RET, ALLOW)],
    SOCKET: [(LOAD, ARG0_LOW), (JEQ, AF_VSOCK, 0, 1), (RET, _fail_with(errno.EPERM)), (RET, ALLOW)],
    PERSONALITY: [(LOAD, ARG0_LOW)] + [(JEQ, value, len(PERSONALITIES) - i, 0) for i, value in enumerate(PERSONALITIES)]
                 + [(RET, _fail_with(errno.EPERM)), (RET, ALLOW)],
}


def decisions(abi: str) -> dict[int, str]:
    """Call number -> what the filter does with it, for the calls up to LAST_KNOWN it does not simply allow."""
    column = ABI_COLUMN[abi]
    found = {numbers[column]: REFUSE for numbers in REFUSED.values() if numbers[column] is not None}
    found.update({numbers[column]: leaf for leaf, numbers in NUMBERS.items()})
    return found


def _segments(abi: str) -> list[tuple[int, str]]:
    """(first number, decision) of each run of numbers the filter treats alike, in order, from 0 to 2**32."""
    special, segments = decisions(abi), []
    for number in range(LAST_KNOWN + 2):
        leaf = special.get(number, ALLOWED) if number <= LAST_KNOWN else UNKNOWN
        if not segments or segments[-1][1] != leaf or leaf not in (ALLOWED, REFUSE, UNKNOWN):
            segments.append((number, leaf))
    return segments


def _search(segments: list[tuple[int, str]]) -> list[tuple]:
    """A binary search over the segments (the call number in A), ending in each one's leaf."""
    if len(segments) == 1:
        return list(LEAVES[segments[0][1]])
    middle = len(segments) // 2
    below, above = _search(segments[:middle]), _search(segments[middle:])
    if len(below) > MAX_JUMP:
        raise ValueError(f"segments make a filter whose jumps pass {MAX_JUMP} instructions")
    return [(JGE, segments[middle][0], len(below), 0)] + below + above


def program(machine: str | None = None) -> bytes | None:
    """The jail's seccomp filter as bwrap's --seccomp reads it (struct sock_filter[]); None on a machine
    whose ABIs it does not know."""
    abis = MACHINE_ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    native, compat = abis
    rules = [(LOAD, ARCH), (JEQ, AUDIT_ARCH[native], 3, 0),  # the machine's own ABI: to the search below
             (JEQ, AUDIT_ARCH[compat], 0, 1), (RET, _fail_with(errno.ENOSYS)), (RET, KILL),
             (LOAD, NR)] + _search(_segments(native))
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
