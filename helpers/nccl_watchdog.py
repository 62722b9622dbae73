"""What nccl's watchdog does once a collective has timed out, by torch version, and the same on gloo ranks (simulated).

ProcessGroupNCCL's watchdog thread writes "Watchdog caught collective operation timeout: WorkNCCL(...) ran for N
milliseconds before timing out." on stderr, signals a flight-recorder dump, waits (`dump_wait_s`), and then, with
TORCH_NCCL_ASYNC_ERROR_HANDLING 3 (the default) or 1, throws in its own thread: the process ends with SIGABRT and no
Python traceback. With 0 or 2 it leaves the rank waiting. The wait, read from torch's source
(torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, Watchdog::runLoop):

* torch 2.8 and later: a sleep of 4 x TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (15 000 ms by default: a minute),
  whatever TORCH_NCCL_DUMP_ON_TIMEOUT says (pytorch/pytorch#150652, #151329; the same in 2.9's HeartbeatMonitor);
* torch 2.7: until the dump is written, at most TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (60 000 ms by default), when
  TORCH_NCCL_DUMP_ON_TIMEOUT is on (its default since pytorch/pytorch#143446); no wait when it is off;
* torch 2.6 and earlier: the same, with TORCH_NCCL_DUMP_ON_TIMEOUT off by default.

ProcessGroupNCCL reads these variables when the group is made. `helpers.launch` gives its ranks a short wait
(RANK_DEFAULTS, unless the caller or the environment sets them) and waits for the rest (`dump_wait_s`).
`simulated(worker)` plays the watchdog on a gloo rank: where gloo raises its timeout in Python, the rank writes nccl's
line, waits as nccl would and aborts, so the CPU shows what a GPU machine shows.
"""

from __future__ import annotations

import os
import re
import time

from ._validate import function
from .language import say

WAIT_ENV = "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"
DUMP_ENV = "TORCH_NCCL_DUMP_ON_TIMEOUT"
ERROR_HANDLING_ENVS = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")  # the first wins
# 4 x 250 ms: a second between the timeout's line and the abort; no flight-recorder files from the lessons' ranks
RANK_DEFAULTS = {WAIT_ENV: "250", DUMP_ENV: "0"}
# gloo's words for a collective's timeout, and for a peer's: the peer that timed out first closes its connections, and
# the rank still waiting hears that instead of its own timeout. On nccl nobody closes anything: it times out as well.
TIMED_OUT = re.compile(r"timed out|connection (closed|reset) by peer", re.IGNORECASE)


def dump_wait_s(environ=None, torch_version: str | None = None) -> float:
    """The longest time nccl's watchdog waits between a collective's timeout and ending the rank, as the given torch
    version (this one's by default) computes it from `environ` (this process's environment by default)."""
    environ = os.environ if environ is None else environ
    version = _major_minor(torch_version)
    if version >= (2, 8):
        return 4 * _milliseconds(environ, 15_000) / 1000
    dump_default = version >= (2, 7)
    return _milliseconds(environ, 60_000) / 1000 if _flag(environ, DUMP_ENV, dump_default) else 0.0


def tears_down(environ=None) -> bool:
    """Whether the watchdog ends the rank after a timeout (TORCH_NCCL_ASYNC_ERROR_HANDLING 1 or 3; 3 by default)."""
    environ = os.environ if environ is None else environ
    name = next((name for name in ERROR_HANDLING_ENVS if name in environ), None)
    if name is None:
        return True
    if environ[name].strip() not in ("0", "1", "2", "3"):
        raise ValueError(say("{name} must be 0, 1, 2 or 3, got {value!r}", name=name, value=environ[name]))
    return int(environ[name]) in (1, 3)


def rank_environment(env: dict) -> dict:
    """The dump settings a launch gives its ranks: `env`'s, else this process's, else RANK_DEFAULTS (set explicitly:
    a rank forked from a server has the server's environment, not this process's)."""
    defaults = {name: os.environ.get(name, value) for name, value in RANK_DEFAULTS.items()}
    return {**defaults, **env}


def timeout_line(rank: int, timeout_ms: int) -> str:
    """What the watchdog writes when it catches a timed-out collective (torch 2.9's words)."""
    return (f"[rank{rank}]:[E ProcessGroupNCCL.cpp] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(Timeout(ms)={timeout_ms}) ran for {timeout_ms} milliseconds "
            f"before timing out.")


def simulated(worker):
    """`worker`, run on a gloo rank as if its group were nccl: a collective's timeout ends the rank the way nccl's
    watchdog ends it (its line on stderr, the dump wait, SIGABRT) instead of raising in Python."""
    function("worker", worker)
    return _Simulated(worker)


class _Simulated:
    def __init__(self, worker):
        self.worker = worker

    def __call__(self, rank, world_size, *args):
        wait_s, tear_down = dump_wait_s(), tears_down()  # read once, as ProcessGroupNCCL reads them
        try:
            return self.worker(rank, world_size, *args)
        except RuntimeError as error:
            if not TIMED_OUT.search(str(error)):
                raise
            _watchdog(rank, _timeout_ms(error), wait_s, tear_down)


def _watchdog(rank: int, timeout_ms: int, wait_s: float, tear_down: bool) -> None:
    import resource

    os.write(2, f"{timeout_line(rank, timeout_ms)}\n".encode())
    time.sleep(wait_s)
    if not tear_down:  # nccl leaves the rank waiting for good; the launch stops it
        while True:
            time.sleep(3600)
    os.write(2, b"terminate called after throwing an instance of 'c10::DistBackendError'\n")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
    os.abort()


def _timeout_ms(error: BaseException) -> int:
    """The group's timeout, in gloo's words ("Timed out waiting 5000ms ...") or from the default group."""
    found = re.search(r"(\d+)\s*ms", str(error))
    if found:
        return int(found.group(1))
    import torch
    from torch.distributed import distributed_c10d as c10d

    timeout = c10d._get_default_group()._get_backend(torch.device("cpu")).options._timeout
    return int(timeout.total_seconds() * 1000)


def _major_minor(torch_version: str | None) -> tuple[int, int]:
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    found = re.match(r"(\d+)\.(\d+)", str(torch_version))
    if not found:
        raise ValueError(say("torch_version must look like '2.9.0', got {torch_version!r}",
                             torch_version=torch_version))
    return int(found.group(1)), int(found.group(2))


def _milliseconds(environ, default: int) -> int:
    value = environ.get(WAIT_ENV)
    if value is None:
        return default
    if not value.strip().isdigit():
        raise ValueError(say("{wait_env} must be a whole number of milliseconds, got {value!r}", wait_env=WAIT_ENV,
                             value=value))
    return int(value)


def _flag(environ, name: str, default: bool) -> bool:
    """A boolean variable as torch's getCvarBool reads it."""
    value = environ.get(name)
    if value is None:
        return default
    if value.strip().lower() in ("y", "yes", "1", "t", "true"):
        return True
    if value.strip().lower() in ("n", "no", "0", "f", "false"):
        return False
    raise ValueError(say("{name} must be a boolean (1/0, true/false, yes/no), got {value!r}", name=name, value=value))
