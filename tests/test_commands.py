"""helpers.commands: launchers run from a cell leave nothing behind, whatever happens to the cell."""

import signal
import sys
import textwrap
import threading
import time

import psutil
import pytest

from helpers import commands

# A launcher in miniature: it starts two workers and waits for them, like torchrun.
LAUNCHER = textwrap.dedent("""
    import subprocess, sys, time
    workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) for _ in range(2)]
    print(" ".join(str(w.pid) for w in workers), flush=True)
    for w in workers:
        w.wait()
""")


def _children_of_this_process():
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def test_a_command_runs_and_its_output_comes_back():
    out = commands.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (out.returncode, out.stdout, out.stderr) == (3, "out\n", "err\n")


def test_commands_run_at_once_and_come_back_in_order(tmp_path):
    """Each command waits until all three have started (a barrier of files): run one after the other, the first
    would give up waiting. No wall-clock bound, which a loaded machine breaks."""
    barrier = (
        "import pathlib, sys, time\n"
        "folder, me = pathlib.Path(sys.argv[1]), sys.argv[2]\n"
        "(folder / me).touch()\n"
        "deadline = time.monotonic() + 60\n"
        "while len(list(folder.iterdir())) < 3 and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print(me if len(list(folder.iterdir())) == 3 else 'alone')\n")
    outs = commands.run_all([[sys.executable, "-c", barrier, str(tmp_path), str(i)] for i in range(3)], timeout_s=120)
    assert [o.stdout.strip() for o in outs] == ["0", "1", "2"], "the commands ran one after the other"


def test_torchrun_is_reachable_from_the_interpreter_alone():
    out = commands.run([*commands.TORCHRUN, "--help"], timeout_s=60)
    assert out.returncode == 0 and "--nproc-per-node" in out.stdout.replace("_", "-")


def test_a_command_past_its_time_is_stopped_with_its_workers():
    before = {p.pid for p in _children_of_this_process()}
    with pytest.raises(TimeoutError, match="timeout_s=2"):
        commands.run([sys.executable, "-c", LAUNCHER], timeout_s=2)
    left = [p for p in _children_of_this_process() if p.pid not in before]
    assert not left, f"still running: {left}"
    assert not [p for p in psutil.Process().children() if p.status() == psutil.STATUS_ZOMBIE], "a defunct process"


def test_an_interrupted_cell_stops_the_launcher_and_its_workers():
    """Jupyter's stop button raises KeyboardInterrupt in the kernel's main thread."""
    workers = []

    def interrupt_once_the_workers_run():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(workers) < 2:
            workers[:] = [p for p in _children_of_this_process() if "time.sleep(300)" in " ".join(p.cmdline())]
            time.sleep(0.1)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt_once_the_workers_run, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        commands.run_all([[sys.executable, "-c", LAUNCHER], [sys.executable, "-c", LAUNCHER]], timeout_s=60)
    assert len(workers) >= 2
    gone, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, f"workers left running: {alive}"
    assert not [p for p in psutil.Process().children() if p.status() == psutil.STATUS_ZOMBIE], "a defunct process"


@pytest.mark.parametrize("call, match", [
    (lambda: commands.run_all([]), "commands"),
    (lambda: commands.run_all(["python"]), "commands"),
    (lambda: commands.run("torchrun --standalone script.py"), "command must be a list"),
    (lambda: commands.run(["true"], timeout_s=0), "timeout_s"),
    (lambda: commands.run(["true"], env={"A": 1}), "env"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
