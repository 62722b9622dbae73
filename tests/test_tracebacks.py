"""What a student sees when a check fails: the traceback of an unsolved exercise, run in a real Jupyter kernel, ends
at the student's code; the helpers that ran it in other processes (helpers/launch.py, helpers/fresh.py) are hidden."""

import re
from pathlib import Path

import nbformat
import pytest

from graders.words import ENGLISH
from helpers import fresh, launch

REPO = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
HELPERS = ("helpers/launch.py", "helpers/fresh.py", "helpers/accel.py")


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _traceback_of_unsolved_check(lesson: str, exercise: str) -> str:
    """Run the released lesson's prelude, the exercise's stub and its check in a kernel: the check's traceback, as
    shown."""
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    prelude = [c for c in nb.cells if "prelude" in c.metadata.get("tags", [])]
    nb.cells = prelude + [c for c in nb.cells if _grade_id(c) in (exercise, f"{exercise}_tests")]
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(REPO)}}).execute()
    errors = [o for o in nb.cells[-1].outputs if o.output_type == "error"]
    assert errors, "the unsolved check should fail"
    return ANSI.sub("", "\n".join(errors[0].traceback))


@pytest.mark.parametrize("lesson, exercise, function", [
    ("04-accelerate-tpu", "convert", "my_accelerate_worker"),  # in 2 processes, through accel.launch
    ("02-ddp", "average", "average_gradients"),  # in 2 processes, through launch.launch and a lesson's worker
])
def test_an_unsolved_multi_process_check_shows_the_students_code_and_little_else(lesson, exercise, function):
    """Two frames: the check's cell (with the lines IPython shows around the call) and the student's stub; then the
    exception. (It was 33 to 38 lines, through launch.py's and accel.py's frames, with the rank's traceback in the
    message.)"""
    shown = _traceback_of_unsolved_check(lesson, exercise)
    lines = shown.strip().splitlines()
    frames = [line for line in lines if re.match(r"(Cell In\[\d+\], line \d+|File )", line)]
    assert len(frames) == 2 and frames[1].endswith(f", line 3, in {function}()"), shown
    assert not [name for name in HELPERS if name in shown], shown
    assert f"----> 3     raise NotImplementedError({ENGLISH['unsolved']!r})" in shown, shown
    assert lines[-1].startswith("WorkerFailed: rank ") and lines[-1].endswith(
        f" failed: NotImplementedError: {ENGLISH['unsolved']}"), shown  # the stub says what to do
    assert len(lines) <= 17 and len(shown.split("[... skipping hidden")[1].strip().splitlines()) <= 8, shown


# ---- the same, outside a notebook ------------------------------------------------------------------------------------


def _unsolved(rank, world_size):
    raise NotImplementedError("not yet")


def test_a_failed_rank_is_raised_from_the_workers_own_frames():
    with pytest.raises(launch.WorkerFailed) as failed:
        launch.launch(_unsolved, 2)
    error = failed.value
    assert str(error) == f"rank {error.rank} failed: NotImplementedError: not yet"
    assert [name for _, _, name, _ in error.where] == ["_unsolved"]
    last = failed.traceback[-1]
    assert last.name == "_unsolved" and Path(last.path) == Path(__file__)
    # the rank's own traceback, less the launcher's frames
    assert "_run_rank" not in error.details and "launch.py" not in error.details
    assert ", in _unsolved\n" in error.details and "NotImplementedError: not yet" in error.details


def test_a_failed_fresh_process_is_raised_from_the_jobs_own_frames():
    def job():
        return 1 / 0

    with pytest.raises(RuntimeError) as failed:
        fresh.run(job)
    assert str(failed.value) == "in the fresh process: ZeroDivisionError: division by zero"
    assert failed.traceback[-1].name == "job" and Path(failed.traceback[-1].path) == Path(__file__)


def test_a_failure_in_library_code_keeps_its_frames_but_not_the_launchers():
    def worker(rank, world_size):
        import torch.distributed as dist

        return dist.all_reduce(42)  # not a tensor: torch raises inside itself

    with pytest.raises(launch.WorkerFailed) as failed:
        launch.launch(worker, 2)
    error = failed.value
    assert [name for _, _, name, _ in error.where] == ["worker"]
    assert "distributed_c10d.py" in error.details and "_run_rank" not in error.details
    assert str(error).count("\n") < 3, str(error)
