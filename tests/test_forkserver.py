"""The grader's fork servers (graders/forkserver.py): nbgrader and the judge, imported once per grading slot."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from graders import forkserver, runs, submission, worker

REPO = Path(__file__).resolve().parent.parent


def _hanging_config(tmp_path) -> str:
    config = tmp_path / "hang_config.py"
    config.write_text(f"import pathlib, os, time\npathlib.Path({str(tmp_path / 'pid')!r}).write_text(str(os.getpid()))\n"
                      "time.sleep(120)\n")
    return f"--JupyterApp.config_file={config}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One nbgrader server for the tests of what it serves (it imports nbgrader once: seconds), as a grading slot
    keeps one for all its submissions; each test's jobs must leave it serving the next."""
    served = forkserver.Server("nbgrader", str(tmp_path_factory.mktemp("server") / "server.log"))
    yield served
    served.close()


def test_a_served_nbgrader_run_gives_what_its_own_process_gives(tmp_path, server):
    env = {**os.environ, "NBGRADER_TEST_MARK": "from the job's environment"}
    config = tmp_path / "nbgrader_config.py"  # prints what the job sees, then nbgrader prints its help
    config.write_text("import os\nprint('cwd', os.getcwd(), os.environ.get('NBGRADER_TEST_MARK'))\n")
    args = ["list", "--help", f"--JupyterApp.config_file={config}"]
    served = [runs.run_served(server, args, tmp_path, env, timeout=60) for _ in range(2)]
    alone = runs.run_watched([str(Path(sys.executable).with_name("nbgrader")), *args], tmp_path, env, timeout=60)
    assert alone.returncode == 0 and "List assignments" in alone.stdout
    for run in served:
        assert (run.returncode, run.stdout, run.stderr) == (alone.returncode, alone.stdout, alone.stderr)


def test_a_served_job_collects_garbage_but_never_walks_what_its_server_imported(tmp_path, server):
    """The server imports with the collector off and freezes its heap before its first fork."""
    config = tmp_path / "nbgrader_config.py"
    config.write_text("import gc\nprint('gc', gc.isenabled(), gc.get_freeze_count())\n")
    run = runs.run_served(server, ["list", f"--JupyterApp.config_file={config}", f"--CourseDirectory.root={tmp_path}"],
                          tmp_path, dict(os.environ), timeout=60)
    found = re.search(r"gc (\w+) (\d+)", run.stdout)
    assert found and found[1] == "True" and int(found[2]) > 50_000, run.stdout + run.stderr


def test_a_served_job_that_fails_reports_its_status_and_stderr(tmp_path, server):
    args = ["autograde", "no-such-lesson", f"--CourseDirectory.root={tmp_path}"]
    run = runs.run_served(server, args, tmp_path, dict(os.environ), timeout=60)
    alone = runs.run_watched([str(Path(sys.executable).with_name("nbgrader")), *args], tmp_path, dict(os.environ),
                                 timeout=60)
    assert run.returncode == alone.returncode != 0
    assert run.stderr == alone.stderr


def test_the_watchdog_stops_a_served_job_that_stalls_or_runs_too_long(tmp_path, server):
    progress = tmp_path / "progress"
    progress.write_text("3")
    start = time.monotonic()
    stalled = runs.run_served(server, ["list", _hanging_config(tmp_path)], tmp_path, dict(os.environ),
                              timeout=60, progress=str(progress), stalled_after=1.5)
    assert time.monotonic() - start < 40  # not the 60 s limit
    assert worker.reason(stalled) == submission.KERNEL_HUNG
    assert not psutil.pid_exists(int((tmp_path / "pid").read_text())), "the stalled job was killed"
    late = runs.run_served(server, ["list", _hanging_config(tmp_path)], tmp_path, dict(os.environ), timeout=1)
    assert worker.reason(late) == submission.TIMED_OUT
    again = runs.run_served(server, ["list", "--help"], tmp_path, dict(os.environ), timeout=60)
    assert again.returncode == 0, "the server serves on after a job was killed"


def test_a_dead_client_takes_its_server_and_the_running_job_along(tmp_path):
    """A Dask worker killed mid-submission must leave no nbgrader (nor kernel) running."""
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from graders import forkserver
        server = forkserver.Server("nbgrader", {str(tmp_path / 'server.log')!r})
        print(server.run({{"args": ["list", {_hanging_config(tmp_path)!r}], "cwd": {str(tmp_path)!r},
                          "env": dict(os.environ), "stdout": {str(tmp_path / 'out')!r},
                          "stderr": {str(tmp_path / 'err')!r}}}, timeout=300))
    """)])
    pid_file = tmp_path / "pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    job = psutil.Process(int(pid_file.read_text()))
    server = job.parent()
    client.send_signal(signal.SIGKILL)
    client.wait()
    gone, alive = psutil.wait_procs([job, server], timeout=10)
    assert not alive, f"still running after their client was killed: {alive}"


def test_when_the_server_cannot_run_a_job_nbgrader_runs_in_a_process_of_its_own(tmp_path, monkeypatch, server):
    monkeypatch.setattr(server, "run", lambda *a, **k: forkserver.Ended(None, "the nbgrader server exited", server_failed=True))
    run = runs.nbgrader(tmp_path, "list", "--help", timeout=60, server=server)
    assert run.returncode == 0 and "List assignments" in run.stdout


def test_a_server_of_an_unknown_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="kind"):
        forkserver.Server("python", str(tmp_path / "log"))


def test_a_job_runs_under_the_memory_limit_its_request_sets(tmp_path, server):
    """The judge and a feedback page run under an address-space limit (their work grows with what a submission
    sent): a job asking for more fails, and the server serves on."""
    config = tmp_path / "big_config.py"
    config.write_text("hog = bytearray(3 * 2**30)\nprint('allocated')\n")
    args = ["list", f"--JupyterApp.config_file={config}"]
    limited = runs.run_served(server, args, tmp_path, dict(os.environ), timeout=120, memory_bytes=2 * 2**30)
    assert limited.returncode != 0 and "MemoryError" in limited.stdout + limited.stderr
    free = runs.run_served(server, args, tmp_path, dict(os.environ), timeout=120)
    assert "allocated" in free.stdout, "without a limit the same job runs"


def test_the_servers_log_tail_is_read_from_its_end(tmp_path, monkeypatch):
    """A long grading run's server log is not read whole to show its last lines (nor is a broken character fatal)."""
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * (64 << 20) + "\nlast words: é\n".encode())
    server = forkserver.Server("judge", str(log))
    reads = []
    real_open = open

    def counting_open(*args, **kwargs):
        f = real_open(*args, **kwargs)
        real_read = f.read
        f.read = lambda *a: reads.append(len(data := real_read(*a))) or data
        return f

    monkeypatch.setattr("builtins.open", counting_open)
    assert server.stderr_tail(20).endswith("last words: é\n")
    assert sum(reads) <= 4 * 20
