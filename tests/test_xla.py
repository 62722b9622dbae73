"""Lesson 4, part B: torch_xla on virtual XLA:CPU devices, and Lightning's automatic sampler."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import ddp, fresh, lightning_demo, xla

needs_xla = pytest.mark.skipif(not xla.available(), reason="torch_xla is not installed")


@needs_xla
def test_virtual_devices():
    info = xla.run(xla.device_summary, n_devices=4)
    assert info["device_type"] in ("CPU", "TPU") and info["first"] == "xla:0"
    if info["device_type"] == "CPU":
        assert info["devices"] == 4


@needs_xla
def test_each_run_on_xla_cpu_is_a_child_of_the_fork_server_with_settings_of_its_own():
    if xla.environment()["PJRT_DEVICE"] != "CPU":
        pytest.skip("on a TPU every run starts afresh")
    first, second = xla.run(os.getppid), xla.run(os.getppid)
    assert first == second == xla.CPU_SERVER._proc.pid
    assert xla.run_many([(_grandparent(), (), {})] * 2) == [xla.CPU_SERVER._proc.pid] * 2  # forked by a leader it forked
    assert [xla.run(xla.device_summary, n_devices=n, virtual=True)["devices"] for n in (2, 4, 2)] == [2, 4, 2]


def _grandparent():
    """A job that returns its parent's parent (made here: shipped by value, as the fresh process cannot import this
    test module)."""

    def grandparent():
        import os

        import psutil

        return psutil.Process(os.getppid()).ppid()

    return grandparent


@needs_xla
def test_compiles_each_equals_one_process_per_experiment():
    experiments = [dict(batch_sizes=[8] * 4), dict(batch_sizes=[8] * 3 + [4]), dict(batch_sizes=[8] * 4, optimizer="adam")]
    alone = xla.run_many((xla.count_compiles, (), kw) for kw in experiments)
    together = xla.run(xla.count_compiles_each, experiments)
    assert [r["compiles"] for r in together] == [r["compiles"] for r in alone] == [1, 2, 2]
    assert [r["executions"] for r in together] == [r["executions"] for r in alone]
    for bad in ([dict(batch_sizes=[8], features=4)], dict(batch_sizes=[8]), ["batch_sizes"]):
        with pytest.raises(ValueError, match="experiments"):
            xla.count_compiles_each(bad)


@needs_xla
def test_compilation_counts_follow_the_shapes():
    jobs = [
        ([8] * 6, {}), ([8] * 5 + [4], {}), ([8] * 6, {"optimizer": "adam"}), ([8] * 6, {"item_every_step": True}),
        ([8] * 6, {"sync_every_step": False}), ([8, 8, 4, 2, 4], {}), ([4, 8, 8], {"optimizer": "adam"}),
    ]
    results = [xla.run(xla.count_compiles, sizes, **kw) for sizes, kw in jobs]  # each in a process of its own
    assert [r["compiles"] for r in results] == [1, 2, 2, 2, 1, 3, 2]
    assert [r["executions"] for r in results][:5] == [6, 6, 6, 12, 1]


@needs_xla
def test_buckets_cap_the_compilations_without_changing_the_maths():
    lengths = [3, 7, 5, 2, 9, 4, 6]
    raw = xla.run(xla.count_compiles, [2] * 7, lengths, item_every_step=True)
    padded = xla.run(xla.count_compiles, [2] * 7, lengths, item_every_step=True, pad_to=lambda n: 4 if n <= 4 else 16)
    assert raw["compiles"] >= len(set(lengths)) and padded["compiles"] <= 2 * 2  # two buckets, .item() graphs included
    assert padded["losses"] == pytest.approx(raw["losses"], rel=1e-5)


@needs_xla
def test_spmd_data_parallel_equals_one_device():
    r = xla.run(xla.spmd_data_parallel)
    assert r["devices"] == 8 and r["sharding"].startswith("{devices=[8,1]") and r["max_abs_diff"] < 1e-5


@needs_xla
def test_errors_in_the_xla_process_come_back():
    def boom():
        raise ArithmeticError("inside XLA")

    with pytest.raises(RuntimeError, match="ArithmeticError: inside XLA"):
        xla.run(boom)


@needs_xla
def test_a_failing_job_stops_the_others_at_once():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="ValueError"):
        xla.run_many([(time.sleep, (120,), {}), (int, ("not a number",), {})])
    assert time.monotonic() - start < 60  # not the 120 s the other job would take


@needs_xla
def test_interrupting_run_many_kills_its_processes():
    """Jupyter's stop button (or nbgrader's cell timeout) sends SIGINT to the kernel: the call must end
    at once, or the kernel stays busy and every later cell times out behind it."""
    script = textwrap.dedent("""
        import os, signal, threading, time
        from helpers import xla
        threading.Timer(5, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            xla.run_many([(time.sleep, (120,), {})] * 2)
        except KeyboardInterrupt:
            print(f"interrupted after {time.monotonic() - start:.1f} s")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert "interrupted after" in proc.stdout, proc.stderr
    assert float(proc.stdout.split()[-2]) < 60


@needs_xla
def test_bad_arguments_of_the_xla_runner():
    with pytest.raises(ValueError, match="fn"):
        xla.run("not callable")
    with pytest.raises(RuntimeError, match="ValueError: optimizer"):
        xla.run(xla.count_compiles, [8], optimizer="lamb")


def _spinning():
    """A job that computes until it is stopped (shipped by value: the fresh process cannot import this module)."""

    def spin(*_):
        while True:
            pass

    return spin


@needs_xla
def test_timeout_and_its_validation():
    with pytest.raises(TimeoutError, match="timeout_s=3 CPU-seconds"):
        xla.run(_spinning(), timeout_s=3)
    for bad in (0, -1, "5", True):
        with pytest.raises(ValueError, match="timeout_s"):
            xla.run(time.sleep, 1, timeout_s=bad)


@needs_xla
def test_lightning_refuses_a_missing_tpu_with_its_own_error():
    r = xla.run(xla.lightning_tpu_trainer)
    if xla.environment()["PJRT_DEVICE"] == "TPU":
        assert r["ok"] and r["devices"] == 8, r
    else:
        assert r["error"].startswith("MisconfigurationException") and "XLAAccelerator" in r["error"]


def test_missing_torch_xla_gets_a_clear_message(monkeypatch):
    monkeypatch.setattr(xla, "available", lambda: False)
    with pytest.raises(xla.XLAUnavailable, match="Linux x86-64"):
        xla.run(xla.device_summary)
    with pytest.raises(xla.XLAUnavailable, match="INSTALL_TORCH_XLA"):
        xla.run_many([(xla.device_summary, (), {})])
    # Colab's CPU/T4 and Kaggle's GPU runtimes lack torch_xla but can install it: the message names the setup
    # cell's switch (which exists there), and still says where torch_xla cannot run at all
    assert "set INSTALL_TORCH_XLA = True in the lesson's setup cell" in " ".join(xla.MISSING.split())
    assert "macOS or Windows" in xla.MISSING and "needs Linux, Colab, Kaggle" not in xla.MISSING


def test_environment_and_bad_arguments():
    env = xla.environment(8)
    assert env in ({"PJRT_DEVICE": "TPU"}, {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "8"})
    with pytest.raises(ValueError, match="n_devices"):
        xla.environment(0)


def test_lightning_inserts_a_distributed_sampler():
    seen = lightning_demo.samplers_seen(n_samples=10, batch_size=2)
    assert [s["rank"] for s in seen] == [0, 1]
    for s in seen:
        assert s["sampler"] == "DistributedSampler" and s["num_replicas"] == 2 and s["sampler_rank"] == s["rank"]
        assert s["indices"] == ddp.shard_indices(10, 2, s["rank"], shuffle=s["shuffle"])


def test_lesson_4s_imports_leave_lightning_to_the_trainers_process():
    """Lightning is imported only in the process where a Trainer runs: lesson 4's import cell (every kernel that
    grades it) does without its seconds; its model class is still `helpers.lightning_demo.Regression` for pickle."""
    code = ("import pickle, sys\nfrom helpers import accel, commands, compare, ddp, grading, lightning_demo, plotting, xla\n"
            "print('lightning' in sys.modules)\nRegression = pickle.loads(pickle.dumps(lightning_demo.Regression))\n"
            "import lightning\nprint(Regression is lightning_demo.Regression, issubclass(Regression, lightning.LightningModule))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True", "True"]
    with pytest.raises(AttributeError):
        lightning_demo.Trainer  # noqa: B018 - only Regression is made on demand


def test_lightning_demo_rejects_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        lightning_demo.samplers_seen(n_samples=10, batch_size=0)
    with pytest.raises(ValueError, match="kwargs"):
        lightning_demo.trainer_on_tpu({"accelerator": "tpu", "devices": 8, "max_epochs": 1})


def test_trainer_on_tpu_is_lightnings_own_reading_of_the_arguments():
    """Lesson 4's quiz judges Trainer arguments by the run Lightning's own connector builds from them on a TPU v5e-8,
    simulated here (no TPU, no torch_xla): every spelling Lightning reads the same way gives the same run."""
    from lightning.fabric.accelerators.xla import XLAAccelerator

    probes, env = (XLAAccelerator.is_available, XLAAccelerator.auto_device_count), dict(os.environ)
    run = lightning_demo.trainer_on_tpu
    same = run({"accelerator": "tpu", "devices": 8})
    assert (same["accelerator"], same["strategy"], same["precision"], same["num_nodes"]) == ("XLAAccelerator", "XLAStrategy", "32-true", 1)
    assert same["devices"] == [f"xla:{i}" for i in range(8)]
    for spelling in ({"accelerator": "tpu", "devices": "auto"}, {"accelerator": "tpu", "devices": 8, "strategy": "XLA"},
                     {"accelerator": "auto", "devices": " 8", "precision": 32, "num_nodes": 1}):
        assert run(spelling) == same, spelling
    assert run({"accelerator": "tpu", "devices": 8, "strategy": "xla_debug"})["settings"]["debug"] is True
    assert run({"accelerator": "tpu", "devices": 8, "precision": "bf16-true"})["precision"] == "bf16-true"
    assert run({"accelerator": "tpu", "devices": 1})["devices"] == ["xla:0"]
    assert run({"accelerator": "tpu", "devices": 2}, tpu_devices=2)["devices"] == ["xla:0", "xla:1"]
    assert "invalid accelerator name" in run({"accelerator": "TPU", "devices": 8})["error"]  # not lowercased
    assert "not supported in XLA" in run({"accelerator": "tpu", "devices": 8, "precision": "bf16"})["error"]
    assert "can not run on your system" in run({"accelerator": "cuda", "devices": 8})["error"]  # a TPU VM has no GPU
    assert (XLAAccelerator.is_available, XLAAccelerator.auto_device_count) == probes and dict(os.environ) == env


@pytest.mark.parametrize("meshes, shard", [([], None), ([((2, 2), ("data",))], None), ([((0, 4), ("data", "model"))], None),
                                           ("data", None), ([((2, 2), ("data", "model"))], "mark_sharding")])
def test_shardings_rejects_bad_arguments(meshes, shard):
    with pytest.raises(ValueError, match="meshes|shard"):
        xla.shardings(meshes, shard)


# ---- the fork server behind xla.run ------------------------------------------------------------


@pytest.fixture
def server():
    s = fresh.ForkServer(["json"])
    yield s
    s.stop()


def test_the_fork_server_forks_a_child_per_job_with_its_environment(server):
    pids = [fresh.run(os.getpid, server=server) for _ in range(2)]
    assert len(set(pids)) == 2 and server._proc.pid not in pids
    assert fresh.run(os.getppid, server=server) == server._proc.pid
    setting = lambda: os.environ.get("COURSE_TEST")  # noqa: E731 (shipped by value: the child's own os.environ)
    assert fresh.run(setting, env={"COURSE_TEST": "yes"}, server=server) == "yes"
    assert fresh.run(setting, server=server) is None  # one job's settings stay in its child

    def leave_a_mark():
        import json
        json.course_mark = True
        return True

    assert fresh.run(leave_a_mark, server=server)
    assert not fresh.run(lambda: hasattr(__import__("json"), "course_mark"), server=server)


def test_the_fork_servers_jobs_collect_garbage_but_never_walk_its_imports():
    server = fresh.ForkServer(["torch"])
    try:
        enabled, frozen = fresh.run(lambda: (__import__("gc").isenabled(), __import__("gc").get_freeze_count()),
                                    server=server)
    finally:
        server.stop()
    assert enabled and frozen > 50_000, (enabled, frozen)


def test_the_fork_server_gives_back_errors_logs_and_exit_codes(server):
    def warn():
        print("to the log", file=sys.stderr)
        return 1

    assert fresh.run(warn, server=server, with_log=True) == (1, "to the log\n")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fresh.run(lambda: 1 / 0, server=server)
    with pytest.raises(RuntimeError, match="exited with code 3"):
        fresh.run(os._exit, 3, server=server)


def test_a_timeout_stops_the_fork_server_and_the_next_job_starts_another(server):
    fresh.run(int, server=server)
    first = server._proc.pid
    with pytest.raises(TimeoutError, match="timeout_s=2"):
        fresh.run(_spinning(), timeout_s=2, server=server)
    assert server._proc is None
    assert fresh.run(os.getppid, server=server) != first


def test_a_job_that_waits_past_its_time_limit_is_not_stopped(server):
    """Issue 39: a right answer graded while the machine was busy lost its points to a limit counted in wall-clock
    seconds. A job's limit counts its CPU-seconds: a job that only takes long (here it waits, as a job starved by a
    busy machine does) is never stopped for that, in a fresh process, a server's child or side by side."""
    assert fresh.run(time.sleep, 3, timeout_s=1, server=server) is None
    assert fresh.run_many([(time.sleep, (3,), {}), (abs, (-1,), {})], timeout_s=1, server=server) == [None, 1]
    assert fresh.run(time.sleep, 3, timeout_s=1) is None


def _slow_module(folder, name, code):
    (folder / f"{name}.py").write_text(code)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}


def test_a_server_whose_imports_are_slow_starts_and_one_whose_imports_compute_too_long_does_not(tmp_path, monkeypatch):
    """lesson 4's first XLA run waits for its server's import of torch_xla (seconds alone, tens of seconds on a loaded
    machine): that is no failure. Only imports that compute past SERVER_START_CPU_S are."""
    monkeypatch.setattr(fresh, "SERVER_START_CPU_S", 1, raising=False)
    monkeypatch.setattr(fresh, "SERVER_START_TIMEOUT_S", 1, raising=False)  # (its name when it counted the clock)
    env = _slow_module(tmp_path, "course_slow_import", "import time\ntime.sleep(4)\n")
    slow = fresh.ForkServer(["course_slow_import"], env=env)
    try:
        assert fresh.run(abs, -3, server=slow) == 3
    finally:
        slow.stop()
    env = _slow_module(tmp_path, "course_busy_import", "import time\nwhile time.process_time() < 30:\n    pass\n")
    busy = fresh.ForkServer(["course_busy_import"], env=env)
    try:
        with pytest.raises(RuntimeError, match="within 1 CPU-seconds"):
            fresh.run(abs, -3, server=busy)
    finally:
        busy.stop()


def _side_by_side():
    """A job that waits until all `n` jobs have started (each leaves a file in `folder`): they run at the same time."""

    def job(folder, n, me):
        import os
        import time

        open(os.path.join(folder, str(me)), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(folder)) < n:
            if time.monotonic() > deadline:
                raise TimeoutError("the jobs did not run side by side")
            time.sleep(0.05)
        return os.getpid(), os.getppid(), os.getpgid(0), os.environ.get("COURSE_TEST")

    return job


def _fails_once_there():
    """A job that fails once the file at `path` has something in it."""

    def job(path):
        import os
        import time

        while not (os.path.exists(path) and open(path).read()):
            time.sleep(0.05)
        raise ValueError("the other job has started its worker")

    return job


def test_run_many_forks_its_jobs_from_the_server_side_by_side(server, tmp_path):
    """Each job a child of a leader in a session of its own, forked by the server: all three at once."""
    results = fresh.run_many([(_side_by_side(), (str(tmp_path), 3, i), {}) for i in range(3)], env={"COURSE_TEST": "x"},
                             workers=3, server=server, timeout_s=120)
    pids, leaders, groups, settings = map(list, zip(*results))
    assert len(set(pids)) == 3 and server._proc.pid not in pids and settings == ["x"] * 3
    assert leaders == groups and len(set(groups)) == 3 and server._proc.pid not in groups
    assert all(_dead(leader) for leader in leaders)  # each leader ended with its job
    assert fresh.run(os.getppid, server=server) == server._proc.pid  # the server serves on


def test_a_failing_side_by_side_job_stops_the_others_and_leaves_the_server(server, tmp_path):
    fresh.run(int, server=server)
    first = server._proc.pid
    start = time.monotonic()
    pid_file = tmp_path / "worker.pid"
    with pytest.raises(RuntimeError, match="ValueError"):
        fresh.run_many([(_worker_starting_job(), (str(pid_file), 120), {}), (_fails_once_there(), (str(pid_file),), {})],
                       server=server)
    assert time.monotonic() - start < 60  # not the 120 s the other job would take
    assert _dead(int((tmp_path / "worker.pid").read_text()))  # the other job's own worker too
    with pytest.raises(TimeoutError, match="timeout_s=2"):
        fresh.run_many([(_spinning(), (), {})], timeout_s=2, server=server)
    assert server._proc.pid == first and fresh.run_many([(abs, (-2,), {})], server=server) == [2]


def test_a_fork_server_that_cannot_import_says_so():
    s = fresh.ForkServer(["no_such_module_of_the_course"])
    with pytest.raises(RuntimeError, match="could not start(.|\n)*no_such_module_of_the_course"):
        fresh.run(int, server=s)


def test_fork_server_bad_arguments():
    with pytest.raises(ValueError, match="modules"):
        fresh.ForkServer("torch_xla")
    for bad in ("torch_xla", ["json", ""], [None]):
        with pytest.raises(ValueError, match="modules"):
            fresh.import_for_forks(bad)
    with pytest.raises(ValueError, match="env"):
        fresh.ForkServer(["json"], env={"A": 1})
    with pytest.raises(ValueError, match="server"):
        fresh.run(int, server="a server")


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the server watches its caller through a pidfd (Linux)")
@pytest.mark.parametrize("how", ["interrupt", "kill"])
def test_an_interrupted_or_killed_caller_takes_the_server_and_its_child_along(tmp_path, how):
    """Jupyter's stop button interrupts the kernel; a restart kills it. Either way the job's child must
    not run on: the server lives in a session of its own, out of reach of the kernel's process group."""
    script = textwrap.dedent(f"""
        import os, signal, threading, time
        from helpers import fresh

        def job(path):
            import os, time
            with open(path, "w") as f:
                f.write(f"{{os.getpid()}} {{os.getppid()}}")
            time.sleep(120)

        if {how!r} == "interrupt":
            threading.Timer(3, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            fresh.run(job, {str(tmp_path / "pids")!r}, server=fresh.ForkServer(["json"]))
        except KeyboardInterrupt:
            print("interrupted")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = tmp_path / "pids"
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child, server = map(int, pids.read_text().split())
    if how == "kill":
        proc.kill()
    assert proc.wait(timeout=30) is not None
    if how == "interrupt":
        assert "interrupted" in proc.stdout.read()
    deadline = time.monotonic() + 10
    while (_running(child) or _running(server)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(child) and not _running(server)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between the open and the read
        return False


# ---- a fresh process's own workers (Lightning, xmp.spawn) ------------------------------------


def _worker_starting_job():
    """A job that starts a worker of its own, as Lightning and xmp.spawn do (it inherits the job's stdout and
    stderr), notes the worker's pid in `pid_file`, then runs `job_s` seconds. (Made here, so that it is
    shipped by value: the fresh process cannot import this test module.)"""

    def job(pid_file, job_s, busy=False):
        import subprocess
        import sys
        import time

        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(pid_file, "w") as f:
            f.write(str(worker.pid))
        end = time.monotonic() + job_s
        while time.monotonic() < end:  # computing (busy), or waiting
            if not busy:
                time.sleep(0.05)
        return "done"

    return job


def _dead(pid: int, within_s: float = 5.0) -> bool:
    """Whether process `pid` is gone (or a zombie) within `within_s` seconds."""
    import psutil

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_a_timeout_stops_the_workers_a_job_started_as_well(tmp_path):
    """A job's own workers hold its stderr: killing the job alone left the call waiting for them (timeout_s=3
    returned after 20 s), and the workers ran on. On a TPU an orphaned worker keeps the chip."""
    pid_file = tmp_path / "worker.pid"
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="timeout_s=3"):
        fresh.run(_worker_starting_job(), str(pid_file), 600, True, timeout_s=3)  # 3 of its CPU-seconds
    assert time.monotonic() - start < 60  # the stray worker sleeps 60 s; a fresh start under load takes seconds
    assert _dead(int(pid_file.read_text()))


def test_a_job_that_ends_takes_the_workers_it_left_behind_along(tmp_path):
    """Its result comes back at once, not when a stray worker (still holding the job's stderr) ends."""
    pid_file = tmp_path / "worker.pid"
    start = time.monotonic()
    assert fresh.run(_worker_starting_job(), str(pid_file), 0, timeout_s=30) == "done"
    assert time.monotonic() - start < 30  # the stray worker sleeps 60 s; a fresh start under load takes seconds
    assert _dead(int(pid_file.read_text()))


def test_a_killed_caller_takes_the_job_and_its_workers_along(tmp_path):
    """The job runs in a process group of its own (so that a timeout reaches its workers), out of reach of the
    kernel's: when the kernel is killed (a restart), the job must notice, and take its workers along."""
    pid_file = tmp_path / "worker.pid"
    script = textwrap.dedent(f"""
        from helpers import fresh
        from tests.test_xla import _worker_starting_job
        fresh.run(_worker_starting_job(), {str(pid_file)!r}, 60, timeout_s=120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=str(os.path.dirname(os.path.dirname(__file__))))
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=30)
    assert _dead(int(pid_file.read_text()))


# ---- Lightning on several XLA devices (Kaggle's TPU v5e-8) ---------------------------------------


def _lightning_xla_loader():
    """In a process on 2 XLA:CPU devices: Lightning's own XLAStrategy.process_dataloader (what its Trainer does to
    the training loader on several TPU devices) on the DataLoader it would hand it on rank 1, then the demo's
    reading of the sampler. (Made here, so that it is shipped by value.)"""

    def job():
        from lightning.pytorch.strategies import XLAStrategy
        from torch.utils.data import DataLoader, DistributedSampler

        from helpers import data, lightning_demo

        strategy = XLAStrategy()
        strategy._launched = True  # as in each process Lightning's launcher (xmp.spawn) starts, one per device
        dataset = data.indexed(10)
        loader = DataLoader(dataset, batch_size=2, sampler=DistributedSampler(dataset, num_replicas=2, rank=1,
                                                                              shuffle=False))
        wrapped = strategy.process_dataloader(loader)
        (first,) = next(iter(wrapped))
        return {"loader": type(wrapped).__name__, "has_sampler": hasattr(wrapped, "sampler"),
                "first_batch": first.cpu().flatten().tolist(), "batch_device": str(first.device),
                "seen": lightning_demo.sampler_report(wrapped, 1)}

    return job


@needs_xla
def test_the_demo_reads_the_sampler_through_lightnings_xla_loader():
    """With more than one XLA device Lightning wraps the training loader in torch_xla's MpDeviceLoader, which has
    no `sampler`: the demo read `.sampler` and every rank of Kaggle's TPU v5e-8 raised AttributeError."""
    r = xla.run(_lightning_xla_loader(), n_devices=2, virtual=True, timeout_s=240)
    assert r["loader"] == "MpDeviceLoader" and not r["has_sampler"]
    assert r["batch_device"].startswith("xla") and r["first_batch"] == [1, 3]
    seen = r["seen"]
    assert seen["sampler"] == "DistributedSampler" and seen["num_replicas"] == 2 and seen["sampler_rank"] == 1
    assert seen["indices"] == ddp.shard_indices(10, 2, 1, shuffle=False) == [1, 3, 5, 7, 9]


def test_the_demo_reads_the_sampler_of_a_plain_loader_and_refuses_anything_else():
    from torch.utils.data import DataLoader, SequentialSampler

    from helpers import data

    loader = DataLoader(data.indexed(4), batch_size=2)
    assert isinstance(lightning_demo.sampler_of(loader), SequentialSampler)
    assert lightning_demo.sampler_report(loader, 0)["indices"] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="loader"):
        lightning_demo.sampler_of([1, 2])


# ---- lesson 4, B6: bf16 mixed precision on XLA -------------------------------------------------


def test_autocast_bf16_refuses_bad_arguments():
    for kwargs, name in [({"steps": 0}, "steps"), ({"batch": 1.5}, "batch"), ({"lr": 0}, "lr"), ({"lr": "0.1"}, "lr"),
                         ({"seed": -1}, "seed"), ({"steps": True}, "steps")]:
        with pytest.raises(ValueError, match=name):
            xla.autocast_bf16(**kwargs)  # refused before torch_xla is imported: safe in this process


@needs_xla
def test_bf16_autocast_on_xla_casts_matmuls_keeps_losses_fp32_and_trains_like_fp32():
    from importlib.metadata import version

    r = xla.run(xla.autocast_bf16, steps=4)
    dtypes = r["dtypes"]
    assert r["device_type"] in ("CPU", "TPU")
    assert dtypes["linear"] == dtypes["matmul"] == dtypes["conv2d"] == "bfloat16"
    assert dtypes["mse_loss(linear)"] == dtypes["cross_entropy(linear)"] == r["loss_dtype"] == "float32"
    if version("torch_xla").startswith("2.9."):  # what B6's text says of torch_xla 2.9
        assert dtypes["softmax(linear)"] == "float32"
        assert dtypes["layer_norm(linear)"] == dtypes["sum(linear)"] == dtypes["exp(linear)"] == "bfloat16"
        assert r["fp32_matmul_precision"] == "default"
    fp32, bf16 = r["losses"]["fp32"], r["losses"]["bf16"]
    assert len(fp32) == len(bf16) == 4 and fp32 != bf16, "the bf16 run really computed in bf16"
    assert 0 < r["max_rel_diff"] < 0.05


@needs_xla
def test_the_fp32_matmul_precision_is_read_on_every_supported_torch_xla():
    """torch_xla 2.6 (the oldest supported) cannot read the precision back (no torch_xla.backends): B6's cell failed
    there with ModuleNotFoundError. It is torch_xla's starting value, "default", on every version."""
    def _precision_without_torch_xla_backends():
        import sys

        sys.modules["torch_xla.backends"] = None  # as on torch_xla 2.6: importing it fails
        return xla.mat_mul_precision()

    assert xla.run(_precision_without_torch_xla_backends) == "default"
    assert xla.run(xla.mat_mul_precision) == "default"


def _lesson_4_cell(repo, needle):
    import nbformat

    nb = nbformat.read(repo / "solutions" / "04-accelerate-tpu" / "04-accelerate-tpu.ipynb", as_version=4)
    return next(c for c in nb.cells if c.cell_type == "code" and needle in c.source)


def test_lesson_4s_bf16_cell_is_in_part_b_and_says_so_when_torch_xla_is_missing(repo, capsys):
    import nbformat

    nb = nbformat.read(repo / "solutions" / "04-accelerate-tpu" / "04-accelerate-tpu.ipynb", as_version=4)
    cell = _lesson_4_cell(repo, "xla.autocast_bf16")
    part_b = next(i for i, c in enumerate(nb.cells) if c.source.startswith("# Part B"))
    assert nb.cells.index(cell) > part_b and not cell.metadata.get("nbgrader"), "an explanation cell of part B"
    exec(cell.source, {"XLA": False, "xla": xla})
    assert "skipped: torch_xla is not installed" in capsys.readouterr().out
