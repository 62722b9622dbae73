"""The multi-process launcher: results, failures, timeouts, re-launching."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
import torch
import torch.distributed as dist

from helpers import launch


def rank_sum(rank, world_size, offset):
    value = torch.tensor([float(rank + offset)])
    dist.all_reduce(value)
    return {"rank": rank, "sum": value.item(), "pid": os.getpid(), "env": os.environ["WORLD_SIZE"]}


def fails_on_rank_one(rank, world_size):
    if rank == 1:
        raise KeyError("rank one is broken")
    dist.all_reduce(torch.ones(1))  # left alone, rank 0 would wait here until the group's timeout


def skips_a_collective(rank, world_size):
    if rank == 0:
        dist.all_reduce(torch.ones(1))
    else:
        time.sleep(300)


def dies_silently(rank, world_size):
    if rank == 1:
        os._exit(3)
    dist.barrier()


def test_results_come_back_in_rank_order_from_separate_processes():
    results = launch.launch(rank_sum, 3, args=(10,))
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["sum"] == 10 + 11 + 12 for r in results)
    assert len({r["pid"] for r in results} | {os.getpid()}) == 4
    assert {r["env"] for r in results} == {"3"}


def test_relaunching_works_every_time():
    for _ in range(3):
        assert [r["sum"] for r in launch.launch(rank_sum, 2, args=(0,))] == [1.0, 1.0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork server on Linux only: elsewhere, spawn")
def test_ranks_start_with_what_ddp_imports_already_imported():
    """DDP and Accelerate import torch._dynamo (sympy, triton...) when they first wrap a model: the fork
    server has, so a rank does not spend a second or more on it at every launch."""

    def imported(rank, world_size):
        import sys

        return "torch._dynamo" in sys.modules

    assert launch.launch(imported, 2) == [True, True]
    assert "torch._dynamo" in launch.FORKSERVER_PRELOAD


def _gc_here_and_in_a_fork(*_):
    """(collector on, objects frozen) in this process and in a fork of it (a DataLoader worker's way)."""
    import gc

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, f"{int(gc.isenabled())} {gc.get_freeze_count()}".encode())
        os._exit(0)
    os.waitpid(pid, 0)
    enabled, frozen = os.read(read, 100).decode().split()
    return (gc.isenabled(), gc.get_freeze_count()), (enabled == "1", int(frozen))


def test_ranks_collect_their_garbage_and_never_walk_what_the_server_imported():
    """The fork server imports with the collector off and freezes its heap (helpers.forkserver_heap): a rank collects
    its own garbage but never walks torch's ~250,000 objects; a rank's own forks are left as they are."""
    for (enabled, frozen), in_its_fork in launch.launch(_gc_here_and_in_a_fork, 2):
        assert enabled and frozen > 100_000 and in_its_fork == (True, frozen)
    assert launch.FORKSERVER_PRELOAD[0] == "helpers.forkserver_heap"  # first: before torch's objects are made


def test_a_notebook_style_closure_is_shipped_by_value():
    scale = 7.0

    def worker(rank, world_size):
        return torch.full((2,), scale * rank)

    out = launch.launch(worker, 2)
    assert torch.equal(out[1], torch.tensor([7.0, 7.0]))


def test_a_failing_rank_stops_everyone_quickly_with_its_traceback():
    start = time.monotonic()
    with pytest.raises(launch.WorkerFailed) as info:
        launch.launch(fails_on_rank_one, 2, timeout_s=60)
    assert time.monotonic() - start < 40  # not the 60 s timeout (a loaded machine's fork server takes seconds)
    assert info.value.rank == 1 and "KeyError" in info.value.details and "rank one is broken" in str(info.value)


def test_a_rank_that_skips_a_collective_fails_at_the_timeout():
    start = time.monotonic()
    with pytest.raises(launch.WorkerFailed) as info:
        launch.launch(skips_a_collective, 2, timeout_s=4)
    assert time.monotonic() - start < 40
    assert info.value.rank == 0 and "Timed out" in info.value.details


def test_a_rank_that_dies_without_a_word_is_reported():
    start = time.monotonic()
    with pytest.raises(launch.WorkerFailed, match="exited with code 3") as info:
        launch.launch(dies_silently, 2, timeout_s=30)
    assert time.monotonic() - start < 25  # not the 30 s timeout
    assert info.value.rank == 1


def test_a_worker_may_start_processes_as_under_torchrun():
    """A DataLoader with workers, over a dataset and a collate_fn the worker defines (a notebook's: they come by
    value), and a Pool: the ranks may have children, and give what they give without them."""

    def worker(rank, world_size, num_workers):
        import multiprocessing

        from torch.utils.data import DataLoader, Dataset
        from torch.utils.data.distributed import DistributedSampler

        class Squares(Dataset):
            def __len__(self):
                return 10

            def __getitem__(self, i):
                return torch.tensor([float(i * i)])

        def total(batch):
            return torch.cat(batch).sum().item()

        squares = Squares()
        loader = DataLoader(squares, batch_size=2, sampler=DistributedSampler(squares, shuffle=False),
                            num_workers=num_workers, collate_fn=total)
        with multiprocessing.Pool(2) as pool:
            negated = pool.map(abs, [-rank, -2])
        return list(loader), negated

    alone = launch.launch(worker, 2, args=(0,))
    # the squares of 0 2 | 4 6 | 8 on rank 0, of 1 3 | 5 7 | 9 on rank 1
    assert alone == [([4.0, 52.0, 64.0], [0, 2]), ([10.0, 74.0, 81.0], [1, 2])]
    assert launch.launch(worker, 2, args=(2,)) == alone


def _worker_pid(batch):
    return os.getpid()


def starts_processes(rank, world_size, folder, then):
    """Starts what a worker may start (a DataLoader's workers, kept running; a command left running), notes them in
    `folder` with its own process, then ends as `then` says."""
    from torch.utils.data import DataLoader

    batches = iter(DataLoader(range(4), batch_size=1, num_workers=2, persistent_workers=True, collate_fn=_worker_pid))
    pids = {next(batches) for _ in range(4)} | {subprocess.Popen(["sleep", "300"]).pid, os.getpid()}
    with open(os.path.join(folder, f"rank{rank}.tmp"), "w") as f:
        f.write(" ".join(f"{pid}:{psutil.Process(pid).create_time()}" for pid in pids))
    os.rename(os.path.join(folder, f"rank{rank}.tmp"), os.path.join(folder, f"rank{rank}"))
    dist.barrier()  # every rank has noted its processes
    if rank == 1 and then == "is killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if (rank == 1 and then == "misses a collective") or then == "waits":
        time.sleep(300)
    if then == "hangs holding the GIL":
        sys.setswitchinterval(1e6)  # no other thread of this process runs again
        while True:
            pass
    dist.all_reduce(torch.ones(1))
    return rank


def _noted_processes(folder, n_procs=2, wait_s=60.0) -> list:
    """The processes `starts_processes` noted in `folder` (once every rank has noted its own)."""
    deadline = time.monotonic() + wait_s
    while len(list(folder.glob("rank?"))) < n_procs and time.monotonic() < deadline:
        time.sleep(0.1)
    noted = [entry.split(":") for path in sorted(folder.glob("rank?")) for entry in path.read_text().split()]
    assert len(noted) == 4 * n_procs, "each rank notes itself, two DataLoader workers and a command"
    return [(int(pid), float(started)) for pid, started in noted]


def _still_running(noted, wait_s=3.0) -> list:
    """Those of the `noted` (pid, start time) still running after `wait_s` (less than the 5 s in which a DataLoader's
    worker notices that its rank has gone, and leaves by itself), killed."""
    deadline = time.monotonic() + wait_s
    while True:
        running = []
        for pid, started in noted:
            try:
                process = psutil.Process(pid)
                if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                    running.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not running or time.monotonic() > deadline:
            for pid in running:  # a failing test leaves nothing behind either
                os.kill(pid, signal.SIGKILL)
            return running
        time.sleep(0.1)


def _interrupt_once_noted(folder, n_procs=2) -> None:
    """Jupyter's stop button: KeyboardInterrupt in the main thread, once every rank has started its processes."""

    def interrupt():
        _noted_processes(folder, n_procs)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and `sleep`: Linux")
@pytest.mark.parametrize("then, raised", [("returns", None), ("is killed", launch.WorkerFailed),
                                          ("misses a collective", launch.WorkerFailed), ("waits", KeyboardInterrupt)])
def test_nothing_a_rank_started_outlives_the_launch(tmp_path, then, raised):
    """Whether the launch returns, a rank is killed (it leaves its children behind), a rank misses a collective
    (the launch fails at the group's timeout), or the cell is interrupted: the ranks' DataLoader workers and
    commands are stopped with them."""
    if raised is None:
        assert launch.launch(starts_processes, 2, args=(str(tmp_path), then), timeout_s=30) == [0, 1]
    else:
        if raised is KeyboardInterrupt:
            _interrupt_once_noted(tmp_path)
        with pytest.raises(raised):
            launch.launch(starts_processes, 2, args=(str(tmp_path), then), timeout_s=6)
    assert not _still_running(_noted_processes(tmp_path, wait_s=0)), "left running after the launch"


LAUNCHER = textwrap.dedent("""
    import sys

    from helpers import launch
    from test_launch import starts_processes

    if __name__ == "__main__":
        launch.launch(starts_processes, 2, args=(sys.argv[1], "hangs holding the GIL"), timeout_s=300)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and `sleep`: Linux")
def test_the_ranks_and_what_they_started_die_with_the_launcher(tmp_path):
    """A rank leads a process group of its own (which `_stop` stops whole), out of the kernel's: a kernel restart,
    which kills the kernel's group, would not reach it. The ranks end with their launcher, however it ends, and take
    their processes with them, even ranks that hang holding the GIL (no thread of theirs can run)."""
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    (tmp_path / "noted").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    launcher = subprocess.Popen([sys.executable, str(script), str(tmp_path / "noted")], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        noted = _noted_processes(tmp_path / "noted", wait_s=120)
        launcher.kill()  # the launcher alone, as the OOM killer would
        launcher.wait()
        assert not _still_running(noted), "left running after the launcher died"
    finally:
        launcher.kill()
        launcher.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)  # its fork server


def test_without_init_the_worker_finds_torchruns_environment():
    def worker(rank, world_size):
        keys = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
        was_initialized = dist.is_initialized()
        dist.init_process_group("gloo")
        t = torch.ones(1)
        dist.all_reduce(t)
        return was_initialized, {k: os.environ[k] for k in keys}, t.item()

    (init0, env0, s0), (_, env1, _) = launch.launch(worker, 2, init_process_group=False)
    assert not init0 and s0 == 2.0
    assert env0["RANK"] == "0" and env1["RANK"] == "1" and env0["MASTER_PORT"] == env1["MASTER_PORT"]


def test_plan_picks_the_backend_from_the_hardware():
    p = launch.plan(2)
    if torch.cuda.device_count() >= 2:
        assert p.backend == "nccl" and p.device(1) == torch.device("cuda", 1)
    else:
        assert p.backend == "gloo" and p.device(1) == torch.device("cpu") and p.threads_per_rank >= 1
    if torch.cuda.device_count() < 4:
        with pytest.raises(ValueError, match="nccl"):
            launch.plan(4, backend="nccl")


@pytest.mark.parametrize("kwargs, match", [
    (dict(worker="not callable"), "worker"),
    (dict(n_procs=0), "n_procs"),
    (dict(n_procs=2.0), "n_procs"),
    (dict(args=[1]), "args"),
    (dict(timeout_s=0), "timeout_s"),
    (dict(backend="mpi"), "backend"),
])
def test_bad_arguments(kwargs, match):
    call = dict(worker=rank_sum, n_procs=2, args=(0,))
    call.update(kwargs)
    with pytest.raises(ValueError, match=match):
        launch.launch(call.pop("worker"), call.pop("n_procs"), **call)


def test_a_port_taken_before_rank_0_listens_costs_one_more_try(monkeypatch):
    """free_port() hands out a port that another program can take before rank 0 listens on it (a busy machine,
    tests in parallel): the launch forms its process group again on another port instead of failing."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    real = launch.free_port
    monkeypatch.setattr(launch, "free_port", lambda: next(ports, None) or real())
    try:
        assert launch.launch(lambda rank, world_size: rank, 2) == [0, 1]
    finally:
        taken.close()


def test_a_launch_port_is_one_that_kernels_and_default_launchers_never_take(monkeypatch, tmp_path):
    """free_port() picks below torchrun's and Accelerate's default port (29500) and below the ephemeral range, where a
    Jupyter kernel, Dask or Lightning take theirs (a bind to port 0): a kernel starting while a launch forms its group
    never loses its port to the launch. A taken port is never handed out; a notebook that seeded the random module does
    not make two launches pick the same ports; where the ephemeral range starts too low, the system picks."""
    import random
    import socket

    random.seed(0)
    first = [launch.free_port() for _ in range(20)]
    random.seed(0)
    second = [launch.free_port() for _ in range(20)]
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral = int(f.read().split()[0])
    assert all(launch.PORTS[0] <= port < min(launch.PORTS[1], ephemeral) for port in first + second)
    assert first != second

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        choices = iter([port, port, free])
        monkeypatch.setattr(launch.random, "SystemRandom", lambda: type("Fixed", (), {
            "randrange": staticmethod(lambda low, high: next(choices))})())
        assert launch.free_port() == free
    monkeypatch.undo()

    low = tmp_path / "ip_local_port_range"
    low.write_text("20400\t60999\n")
    monkeypatch.setattr(launch, "EPHEMERAL_RANGE", str(low))
    assert all(launch.free_port() >= ephemeral for _ in range(5)), "the system's choice, from its own range"


# What a rank printed when rank 0's store reset its connection while the group formed (a loaded machine, make test)
RESET_IN_RENDEZVOUS = """Traceback (most recent call last):
  File "/work/main/helpers/launch.py", line 303, in _run_rank
    dist.init_process_group(p.backend, rank=rank, world_size=p.n_procs, timeout=timedelta(seconds=timeout_s))
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1769, in init_process_group
    default_pg, _ = _new_process_group_helper(
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1996, in _new_process_group_helper
    backend_class = ProcessGroupGloo(
torch.distributed.DistNetworkError: Connection reset by peer
"""


def test_a_connection_reset_while_the_group_forms_costs_one_more_try():
    assert launch._rendezvous_failed(launch.WorkerFailed(1, RESET_IN_RENDEZVOUS))
    in_training = RESET_IN_RENDEZVOUS.replace(", in init_process_group\n", ", in train\n")
    assert not launch._rendezvous_failed(launch.WorkerFailed(1, in_training)), "after the group formed: the worker's"


def test_a_worker_that_fails_is_not_launched_twice():

    def fails(rank, world_size):
        raise ValueError("Address already in use (the worker's own words)")

    with pytest.raises(launch.WorkerFailed, match="the worker's own words"):
        launch.launch(fails, 2)
    assert not launch._rendezvous_failed(launch.WorkerFailed(0, "ValueError: Address already in use in train()"))


def test_a_lost_connection_is_reported_as_the_peer_failure_it_echoes(monkeypatch):
    """When a rank's collective times out, that rank leaves and its partner may fail first with "Connection closed
    by peer": the launch reports the timeout (the cause), not the echo.
    (The launcher waits for the cause a moment; on a loaded machine the 0.2 s between the two failures here can
    stretch past that moment, so the test gives it longer. The wait ends as soon as the cause arrives.)"""
    monkeypatch.setattr(launch, "ROOT_CAUSE_WAIT_S", 60.0)

    def worker(rank, world_size):
        import time

        import torch.distributed as dist

        dist.barrier()  # both ranks past forming the group (on a loaded machine rank 1 was still forming it: 2026-12-06)
        if rank == 0:
            raise RuntimeError("[gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:41116")
        time.sleep(0.2)
        raise RuntimeError("Timed out waiting 4000ms for recv operation to complete")

    with pytest.raises(launch.WorkerFailed, match="Timed out") as failed:
        launch.launch(worker, 2)
    assert failed.value.rank == 1 and "lost its connection to rank 1" in str(failed.value)


def test_a_rank_that_hangs_on_its_way_out_has_already_delivered_its_result(tmp_path, monkeypatch):
    """A rank can hang after its work is done: destroy_process_group holding the GIL while a gloo thread waits for
    it, a stray thread. Its result must reach the launcher all the same, and the launch must not wait for it.
    The rank is killed, and its stderr file goes all the same."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def worker(rank, world_size):
        import sys

        import torch.distributed as dist

        def hang(*args, **kwargs):
            sys.setswitchinterval(1e6)  # no other thread of this process runs again
            while True:
                pass

        dist.all_reduce(torch.ones(1))
        if rank == 1:
            dist.destroy_process_group = hang
        return rank * 10

    start = time.monotonic()
    assert launch.launch(worker, 2, timeout_s=30) == [0, 10]
    assert time.monotonic() - start < 25  # not the 30 s timeout
    assert list(tmp_path.iterdir()) == []


def test_a_failing_rank_reports_what_it_wrote_to_stderr():
    def worker(rank, world_size):
        import sys

        print(f"rank {rank} warns about something", file=sys.stderr)
        raise ValueError(f"rank {rank} gives up")

    with pytest.raises(launch.WorkerFailed) as failed:
        launch.launch(worker, 2)
    rank = failed.value.rank
    assert f"rank {rank} gives up" in failed.value.details
    assert f"--- this rank's stderr ---\nrank {rank} warns about something" in failed.value.details


def test_a_destroyed_process_group_outlives_the_ddp_model_that_uses_it():
    """Workers end with destroy_process_group() while their DDP model is alive (lesson 2 teaches it). Freeing the
    model then freed the gloo group inside the Reducer's destructor, which joins gloo's threads holding the GIL
    while one of them waits for the GIL: a rank hung for good now and then. The launcher keeps destroyed groups
    referenced until the rank exits, also for a worker that made its own group (torchrun style)."""

    def worker(rank, world_size):
        import gc

        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo")
        model = DistributedDataParallel(torch.nn.Linear(4, 2))
        model(torch.ones(3, 4)).sum().backward()
        group = dist.group.WORLD
        dist.destroy_process_group()
        del model
        gc.collect()
        return any(kept is group for kept in launch._DESTROYED_GROUPS), dist.is_initialized()

    assert launch.launch(worker, 2, init_process_group=False) == [(True, False), (True, False)]


def test_what_the_ranks_print_is_shown_line_by_line_with_their_rank(capsys):
    """As torchrun's --tee shows it: "[rank1]: ...", in the notebook rather than in the terminal that started
    Jupyter; gloo's connection notices left out."""

    def worker(rank, world_size):
        print(f"epoch 1 on rank {rank}")
        print(f"no newline at the end on rank {rank}", end="")
        dist.barrier()
        return rank

    assert launch.launch(worker, 2) == [0, 1]
    out = capsys.readouterr().out
    for rank in (0, 1):
        assert f"[rank{rank}]: epoch 1 on rank {rank}\n" in out
        assert f"[rank{rank}]: no newline at the end on rank {rank}\n" in out
    assert "[Gloo]" not in out


def test_a_failing_rank_shows_what_it_printed_before_it_failed(capsys):
    def worker(rank, world_size):
        print(f"rank {rank} got this far")
        if rank == 1:
            raise ValueError("and no further")
        return rank

    with pytest.raises(launch.WorkerFailed, match="and no further"):
        launch.launch(worker, 2)
    assert "[rank1]: rank 1 got this far" in capsys.readouterr().out


# What nccl's watchdog writes on stderr, from C++, before it aborts a rank whose collective timed out
# (TORCH_NCCL_ASYNC_ERROR_HANDLING=3, the default): the rank's only words, no Python traceback.
WATCHDOG_LINE = ("[PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
                 "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=4000) ran for 4004 milliseconds before timing out.")


def killed_on_rank_one(rank, world_size, how):
    """Rank 1 writes its last words on stderr (from C, as nccl's watchdog does), then its process is killed by a
    signal: "abort" as the watchdog does, "segfault" for real, "kill" as the OOM killer does."""
    import ctypes
    import resource
    import signal

    if rank == 1:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
        os.write(2, f"{WATCHDOG_LINE if how == 'abort' else 'last words before a ' + how}\n".encode())
        if how == "abort":
            os.abort()
        elif how == "segfault":
            ctypes.string_at(0)
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_a_rank_aborted_by_the_nccl_watchdog_is_reported_with_its_signal_and_its_stderr():
    with pytest.raises(launch.WorkerFailed) as info:
        launch.launch(killed_on_rank_one, 2, args=("abort",), timeout_s=30)
    failed = info.value
    assert failed.rank == 1 and failed.signal == "SIGABRT" and failed.exitcode == -6
    assert WATCHDOG_LINE in failed.stderr and WATCHDOG_LINE in failed.details and "SIGABRT" in str(failed)
    assert "timing out" in str(failed)


@pytest.mark.parametrize("how, name", [("segfault", "SIGSEGV"), ("kill", "SIGKILL")])
def test_a_rank_killed_by_a_signal_is_reported_with_its_signal_and_its_stderr(how, name):
    with pytest.raises(launch.WorkerFailed) as info:
        launch.launch(killed_on_rank_one, 2, args=(how,), timeout_s=30)
    failed = info.value
    assert failed.rank == 1 and failed.signal == name and f"killed by {name}" in str(failed)
    assert f"last words before a {how}" in failed.stderr and f"last words before a {how}" in str(failed)


def test_the_signal_is_named_from_the_exit_code():
    assert [launch.signal_name(code) for code in (-6, -11, -9, 0, 3, None)] == [
        "SIGABRT", "SIGSEGV", "SIGKILL", None, None, None]
    failed = launch.WorkerFailed(0, "ValueError: no", stderr="")
    assert failed.signal is None and failed.exitcode is None and failed.stderr == ""


def failing_while_the_other_waits(rank, world_size):
    """Rank 1 fails once rank 0 has written on stderr; rank 0 then waits in a collective that will never complete.
    (The first barrier orders the two: without it, rank 1 could fail before rank 0 has started.)"""
    if rank == 0:
        os.write(2, b"rank 0: still waiting in its all-reduce\n")
    dist.barrier()
    if rank == 1:
        raise ValueError("rank 1 gives up")
    dist.barrier()


def test_a_launch_error_carries_the_stderr_of_every_rank_without_a_result():
    with pytest.raises(launch.WorkerFailed) as info:
        launch.launch(failing_while_the_other_waits, 2, timeout_s=30)
    failed = info.value
    assert failed.rank == 1 and "rank 1 gives up" in str(failed)
    assert set(failed.unfinished) == {0} and "still waiting in its all-reduce" in failed.unfinished[0]
    assert "rank 0's stderr (no result yet)" in str(failed) and "still waiting in its all-reduce" in failed.details


def stuck_after_saying_so(rank, world_size):
    os.write(2, f"rank {rank} is stuck here\n".encode())
    time.sleep(3600)


def test_the_deadline_names_every_rank_without_a_result_with_the_end_of_its_stderr(monkeypatch):
    monkeypatch.setattr(launch, "DEADLINE_MARGIN_S", 4, raising=False)  # (before: timeout_s + 30, hard-coded)
    start = time.monotonic()
    with pytest.raises(launch.WorkerFailed, match="no result from ranks 0, 1 before the launch's deadline") as info:
        launch.launch(stuck_after_saying_so, 2, timeout_s=1)
    assert time.monotonic() - start < 20
    failed = info.value
    assert "rank 0 is stuck here" in failed.stderr and "rank 1 is stuck here" in failed.unfinished[1]
    assert "rank 1 is stuck here" in failed.details
