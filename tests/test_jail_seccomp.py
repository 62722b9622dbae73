"""The jail's seccomp filter (graders/seccomp.py) read instruction by instruction, for every call number of both
machines it is built for: at least as strict as the container runtimes' default profile, and open for the rest."""

import errno
import os
import re
import shutil
import subprocess

import pytest

from graders import seccomp

# moby's profiles/seccomp/default.json: what it allows a process without capabilities (arguments aside: clone
# without namespace flags, socket but AF_VSOCK, personality with five values), on every architecture.
DOCKER_ALLOWED = set("""
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown clock_adjtime clock_getres clock_gettime
clock_nanosleep close close_range connect copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl
epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit exit_group
faccessat faccessat2 fadvise64 fallocate fanotify_mark fchdir fchmod fchmodat fchown fchownat fcntl fdatasync
fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex futex_waitv futimesat
getcpu getcwd getdents getdents64 getegid geteuid getgid getgroups getitimer getpeername getpgid getpgrp getpid
getppid getpriority getrandom getresgid getresuid getrlimit get_robust_list getrusage getsid getsockname getsockopt
get_thread_area gettid gettimeofday getuid getxattr inotify_add_watch inotify_init inotify_init1 inotify_rm_watch
io_cancel ioctl io_destroy io_getevents io_pgetevents ioprio_get ioprio_set io_setup io_submit io_uring_enter
io_uring_register io_uring_setup kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown
lgetxattr link linkat listen listxattr llistxattr lremovexattr lseek lsetxattr lstat madvise membarrier memfd_create
memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 mlockall mmap mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedsend mq_unlink mremap msgctl msgget msgrcv msgsnd msync munlock munlockall munmap
name_to_handle_at nanosleep newfstatat open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc
pkey_free pkey_mprotect poll ppoll prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6 pwrite64 pwritev
pwritev2 read readahead readlink readlinkat readv recvfrom recvmmsg recvmsg remap_file_pages removexattr rename
renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn
rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam sched_get_priority_max
sched_get_priority_min sched_getscheduler sched_rr_get_interval sched_setaffinity sched_setattr sched_setparam
sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop sendfile sendmmsg sendmsg sendto setfsgid
setfsuid setgid setgroups setitimer setpgid setpriority setregid setresgid setresuid setreuid setrlimit
set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setxattr shmat shmctl shmdt shmget shutdown
sigaltstack signalfd signalfd4 socketpair splice stat statfs statx symlink symlinkat sync sync_file_range syncfs
sysinfo tee tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_settime timerfd_create
timerfd_gettime timerfd_settime times tkill truncate umask uname unlink unlinkat utime utimensat utimes vfork vmsplice
wait4 waitid write writev arch_prctl modify_ldt
""".split())
CLOSED_BEYOND_DOCKER = {"io_uring_setup", "io_uring_enter", "io_uring_register"}  # (newer moby profiles close them too)
WITH_ARGUMENTS = {"clone", "socket", "personality", "clone3"}

EPERM, ENOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS


def verdict(program: bytes, arch: str, number: int, first_argument: int = 0) -> int:
    """What the filter returns for one call: classic BPF, the instructions graders/seccomp.py writes."""
    data = {seccomp.NR: number, seccomp.ARCH: seccomp.AUDIT_ARCH[arch], seccomp.ARG0_LOW: first_argument}
    instructions = [program[i:i + 8] for i in range(0, len(program), 8)]
    pc, a = 0, None
    while True:
        code, jump_if_true, jump_if_false, k = seccomp.struct.unpack("=HBBI", instructions[pc])
        if code == seccomp.RET:
            return k
        if code == seccomp.LOAD:
            a = data[k]
            pc += 1
            continue
        taken = {seccomp.JEQ: a == k, seccomp.JGE: a >= k, seccomp.JSET: bool(a & k)}[code]
        pc += 1 + (jump_if_true if taken else jump_if_false)


NOT_CALLS = ("__NR_syscalls", "__NR_arch_specific_syscall")  # a count; the first of a range aarch64 leaves empty


def _numbers(machine: str) -> dict[str, int]:
    """The kernel headers' call numbers of this machine's ABI, {} where the headers are not installed here."""
    if machine == "x86_64":
        path = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"
        text = open(path).read() if os.path.exists(path) else ""
    else:  # arm64's own header defines these, then includes the generic table
        if not (shutil.which("cpp") and os.path.exists("/usr/include/asm-generic/unistd.h")):
            return {}
        wants = ["-D__ARCH_WANT_" + w for w in ("RENAMEAT", "NEW_STAT", "SET_GET_RLIMIT", "TIME32_SYSCALLS",
                                                 "SYS_CLONE3", "MEMFD_SECRET")]
        text = subprocess.run(["cpp", "-dM", "-D__BITS_PER_LONG=64", *wants, "/usr/include/asm-generic/unistd.h"],
                              capture_output=True, text=True, check=True).stdout
    macros = dict(re.findall(r"#define (__NR\w+) (\w+)", text))
    numbers = {}
    for name, value in macros.items():
        while value in macros:
            value = macros[value]
        if name.startswith("__NR_") and value.isdigit() and name not in NOT_CALLS:
            numbers[name[len("__NR_"):]] = int(value)
    return numbers


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_every_call_a_container_refuses_is_refused(machine):
    """Each call the kernel headers know: allowed exactly when Docker's default profile allows it (io_uring closed
    besides), refused with EPERM otherwise; the table's numbers are the headers' own."""
    numbers = _numbers(machine)
    if not numbers:
        pytest.skip("no kernel headers here to read the call numbers from")
    column = seccomp.ABI_COLUMN[machine]
    for name, pair in {**seccomp.REFUSED, **seccomp.NUMBERS}.items():
        assert pair[column] == numbers.get(name), (name, pair, numbers.get(name))
    program = seccomp.program(machine)
    wrong = {}
    for name, number in numbers.items():
        if name in WITH_ARGUMENTS:
            continue
        expected = seccomp.ALLOW if name in DOCKER_ALLOWED - CLOSED_BEYOND_DOCKER else EPERM
        found = verdict(program, machine, number)
        if found != expected:
            wrong[name] = hex(found)
    assert not wrong, wrong
    assert max(numbers.values()) <= seccomp.LAST_KNOWN, "a header newer than the table: add its calls to it"


CALLS = {  # name: (x86_64, aarch64)
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "io_uring_setup": (425, 425),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "kcmp": (312, 272), "ptrace": (101, 117), "unshare": (272, 97),
    "bpf": (321, 280), "setns": (308, 268), "mount": (165, 40), "pidfd_getfd": (438, 438),
}


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_what_a_container_closes_is_closed_and_the_rest_is_open(machine):
    program, column = seccomp.program(machine), seccomp.ABI_COLUMN[machine]
    numbers = {name: pair[column] for name, pair in CALLS.items()}
    refused = {name: verdict(program, machine, number) for name, number in numbers.items()}
    assert refused == dict.fromkeys(numbers, EPERM), refused
    read, write, futex, mmap, execve = {"x86_64": (0, 1, 202, 9, 59), "aarch64": (63, 64, 98, 222, 221)}[machine]
    for number in (read, write, futex, mmap, execve):
        assert verdict(program, machine, number) == seccomp.ALLOW, number
    clone, socket, personality = (seccomp.NUMBERS[name][column] for name in ("clone", "socket", "personality"))
    assert verdict(program, machine, clone, 0x01200011) == seccomp.ALLOW  # fork's flags (CLONE_CHILD_SETTID|...)
    assert verdict(program, machine, clone, 0x003D0F00) == seccomp.ALLOW  # a thread's
    for flag in (0x10000000, 0x40000000, 0x00020000, 0x20000000):  # a user, network, mount, pid namespace
        assert verdict(program, machine, clone, 0x11 | flag) == EPERM, hex(flag)
    assert verdict(program, machine, socket, 2) == verdict(program, machine, socket, 1) == seccomp.ALLOW  # INET, UNIX
    assert verdict(program, machine, socket, 40) == EPERM  # AF_VSOCK: the host's hypervisor
    assert verdict(program, machine, personality, 0xFFFFFFFF) == seccomp.ALLOW  # the query
    assert verdict(program, machine, personality, 0x0400000) == EPERM  # READ_IMPLIES_EXEC
    assert verdict(program, machine, seccomp.NUMBERS["clone3"][column]) == ENOSYS
    for beyond in (seccomp.LAST_KNOWN + 1, 0x40000000, 0xFFFFFFFF):  # newer than the table; x32's; -1
        assert verdict(program, machine, beyond) == ENOSYS, beyond


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_other_abis_are_refused(machine):
    program = seccomp.program(machine)
    compat = seccomp.MACHINE_ABIS[machine][1]
    assert verdict(program, compat, 0) == verdict(program, compat, 26) == ENOSYS  # (i386's 26: ptrace)
    other = "aarch64" if machine == "x86_64" else "x86_64"
    assert verdict(program, other, 0) == seccomp.KILL
    assert seccomp.program("riscv64") is None
