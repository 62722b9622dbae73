"""nccl's watchdog on the CPU: the timeout's line, the dump wait torch computes from the environment, then the abort
(helpers.nccl_watchdog), and the launcher that gives its ranks a short wait and waits for what remains.

On a GPU machine a rank whose collective timed out is ended by nccl's watchdog a minute after its timeout (torch >= 2.8:
4 x TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC, 15 s by default), past the launch's old deadline (timeout + 30 s), whose error
carried no stderr: lesson 2's uneven-batches cell failed its own assert on every nccl machine. Here gloo ranks play it.
"""

import json
import os
import re
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from helpers import ddp, launch, nccl_watchdog

REPO = Path(__file__).resolve().parent.parent
WAIT, DUMP = nccl_watchdog.WAIT_ENV, nccl_watchdog.DUMP_ENV
LINE = "Watchdog caught collective operation timeout"


@pytest.mark.parametrize("env, version, wait_s", [
    ({}, "2.9.0", 60.0),  # 4 x 15 000 ms
    ({WAIT: "250"}, "2.9.0", 1.0),
    ({DUMP: "0"}, "2.8.0", 60.0),  # from 2.8 the sleep does not ask whether a dump was wanted
    ({WAIT: "1000", DUMP: "false"}, "2.15.0", 4.0),
    ({}, "2.7.1", 60.0),  # until the dump is written, at most TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (60 s by default)
    ({DUMP: "0"}, "2.7.0", 0.0),
    ({}, "2.6.0+cu124", 0.0),  # no dump, so no wait, unless asked for
    ({DUMP: "yes", WAIT: "2000"}, "2.6.0", 2.0),
])
def test_the_dump_wait_is_what_each_torch_computes_from_the_environment(env, version, wait_s):
    assert nccl_watchdog.dump_wait_s(env, version) == wait_s


def test_by_default_this_torchs_watchdog_waits_a_minute():
    assert torch.__version__.startswith("2.9")
    assert nccl_watchdog.dump_wait_s({}) == 60.0


def test_bad_settings_are_refused_naming_the_variable():
    with pytest.raises(ValueError, match=WAIT):
        nccl_watchdog.dump_wait_s({WAIT: "a minute"})
    with pytest.raises(ValueError, match=DUMP):
        nccl_watchdog.dump_wait_s({DUMP: "maybe"}, "2.7.0")
    with pytest.raises(ValueError, match="torch_version"):
        nccl_watchdog.dump_wait_s({}, "nightly")
    with pytest.raises(ValueError, match="TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        nccl_watchdog.tears_down({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "on"})
    with pytest.raises(ValueError, match="worker"):
        nccl_watchdog.simulated("not a function")
    with pytest.raises(ValueError, match=WAIT):
        launch.launch(lambda rank, world: rank, 2, env={WAIT: "-1"})


def test_the_error_handling_mode_decides_whether_the_rank_is_ended():
    assert nccl_watchdog.tears_down({}) and nccl_watchdog.tears_down({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
    assert not nccl_watchdog.tears_down({"NCCL_ASYNC_ERROR_HANDLING": "0"})
    assert not nccl_watchdog.tears_down({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2", "NCCL_ASYNC_ERROR_HANDLING": "3"})


def _dump_settings(rank, world_size):
    return os.environ.get(WAIT), os.environ.get(DUMP)


def test_the_launch_gives_its_ranks_a_short_dump_wait_unless_told_otherwise(monkeypatch):
    assert launch.launch(_dump_settings, 2) == [("250", "0")] * 2
    assert launch.launch(_dump_settings, 2, env={WAIT: "1000"}) == [("1000", "0")] * 2
    monkeypatch.setenv(DUMP, "1")  # the notebook's own environment counts too
    assert launch.launch(_dump_settings, 1) == [("250", "1")]


def _uneven_on_nccl(timeout_s, env=None):
    """Lesson 2's uneven batches ([3, 2]) on a simulated nccl: (the launch's error, the seconds it took)."""
    start = time.perf_counter()
    with pytest.raises(launch.WorkerFailed) as info:
        launch.launch(nccl_watchdog.simulated(ddp.uneven_worker), 2, args=([3, 2],), timeout_s=timeout_s, env=env)
    return info.value, time.perf_counter() - start


def test_the_watchdog_writes_its_line_waits_the_dump_wait_then_aborts_the_rank():
    failed, waited = _uneven_on_nccl(2, env={WAIT: "500"})  # 4 x 500 ms
    assert failed.signal == "SIGABRT" and failed.exitcode == -6
    assert waited >= 2 + 2
    words = failed.stderr
    assert LINE in words and "Timeout(ms)=2000" in words
    assert words.index(LINE) < words.index("terminate called after throwing an instance of 'c10::DistBackendError'")
    assert "Traceback" not in failed.details  # a rank ended from C++ leaves no Python traceback


def test_a_rank_left_waiting_is_reported_at_the_deadline_with_what_it_wrote(monkeypatch):
    """With TORCH_NCCL_ASYNC_ERROR_HANDLING=0 the watchdog writes its line and leaves the rank waiting for good: the
    launch's deadline error names every rank without a result and carries the end of its stderr."""
    monkeypatch.setattr(launch, "DEADLINE_MARGIN_S", 8, raising=False)  # (the old deadline: timeout + 30 s)
    failed, waited = _uneven_on_nccl(1, env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"})
    assert "before the launch's deadline" in str(failed) and failed.signal is None
    assert waited < 25
    assert LINE in failed.stderr and LINE in failed.details
    assert set(failed.unfinished) == {1 - failed.rank} and LINE in failed.unfinished[1 - failed.rank]


def test_the_deadline_covers_the_dump_wait_the_ranks_were_given(monkeypatch):
    monkeypatch.setattr(launch, "DEADLINE_MARGIN_S", 6, raising=False)
    failed, waited = _uneven_on_nccl(1, env={WAIT: "2500"})  # a 10 s wait, longer than the margin
    assert failed.signal == "SIGABRT" and LINE in failed.stderr
    assert waited >= 1 + 10


def _late_partner(rank, world_size):
    """Rank 0's collective times out while rank 1 comes late to its own: gloo ends rank 1's with "Connection closed by
    peer" as rank 0 gives up, where nccl's rank 1 would have timed out in turn."""
    if rank == 1:
        time.sleep(0.6)
        dist.barrier()
    else:
        dist.all_reduce(torch.ones(2))


def test_a_rank_that_hears_its_peer_give_up_times_out_as_on_nccl():
    with pytest.raises(launch.WorkerFailed) as info:
        launch.launch(nccl_watchdog.simulated(_late_partner), 2, timeout_s=1)
    failed = info.value
    assert failed.signal == "SIGABRT" and "Traceback" not in failed.details, failed.details
    assert set(failed.unfinished) == {1 - failed.rank} and LINE in failed.unfinished[1 - failed.rank] and LINE in failed.stderr


def _lesson_2_cell(marker: str) -> str:
    notebook = json.loads((REPO / "solutions" / "02-ddp" / "02-ddp.ipynb").read_text())
    cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"])]
    assert len(cells) == 1, marker
    return cells[0]


class _OnNccl:
    """`launch` as the lesson uses it, its ranks' collectives ended by a simulated nccl watchdog."""

    WorkerFailed = launch.WorkerFailed

    @staticmethod
    def launch(worker, *args, **kwargs):
        return launch.launch(nccl_watchdog.simulated(worker), *args, **kwargs)


def test_lesson_2s_uneven_batches_cell_passes_its_own_check_on_nccl(capsys):
    """The cell as the lesson has it, on ranks ended by nccl's watchdog with its default wait (this launcher's)."""
    namespace = {"launch": _OnNccl, "ddp": ddp, "time": time, "WORLD": 2}
    exec(compile(_lesson_2_cell("TIMEOUT = re.compile"), "02-ddp.ipynb uneven batches", "exec"), namespace)
    assert namespace["hang_error"].signal == "SIGABRT"
    assert re.search(rf"rank \d \(killed by SIGABRT\): .*{LINE}", capsys.readouterr().out)


def test_the_simulation_leaves_other_errors_and_results_alone():
    def fails(rank, world_size):
        raise RuntimeError("not a timeout")

    with pytest.raises(launch.WorkerFailed, match="not a timeout") as info:
        launch.launch(nccl_watchdog.simulated(fails), 2)
    assert info.value.signal is None

    def barrier(rank, world_size):
        dist.barrier()
        return rank

    assert launch.launch(nccl_watchdog.simulated(barrier), 2) == [0, 1]
