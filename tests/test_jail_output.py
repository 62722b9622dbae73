"""Every byte a kernel outputs is bounded where the grader keeps it: a cell's and a notebook's outputs, errors
included, counted as the bytes nbformat writes (graders/execute.py); a grading run's stdout and stderr
(graders/runs.py); the graded notebook the worker reads back (graders/worker.py). The jail's own stdout and stderr
(graders/sandbox.py) are tested with a real kernel in tests/test_jail.py."""

import os
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from graders import execute, runs, worker
from graders.forkserver import Ended

CELL, NOTEBOOK, PRINTED = 200_000, 1_000_000, 50_000
SHORT_ERROR = 3_000  # what an error past the caps may take, with its note
KEPT = 2**20  # what the grader may keep of a run's stdout, and of its stderr
GRADED = 2 * (16 + 32) * 2**20  # the largest graded notebook: twice a submission's and its outputs' caps


@pytest.fixture
def executor(monkeypatch):
    monkeypatch.setattr(execute, "MAX_CELL_BYTES", CELL)
    monkeypatch.setattr(execute, "MAX_NOTEBOOK_BYTES", NOTEBOOK)
    monkeypatch.setattr(execute, "MAX_OUTPUT_BYTES", PRINTED)
    made = execute.CrashSafeExecute()
    made.nb = new_notebook(cells=[new_code_cell("pass") for _ in range(30)])
    made.reset_execution_trackers()
    made.clear_before_next_output = False  # (nbclient sets it as a cell starts)
    return made


def _message(kind: str, **content) -> dict:
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": "cell"}, "content": content}


def _error(evalue: str = "v" * 30_000, ename: str = "ValueError") -> dict:
    return _message("error", ename=ename, evalue=evalue, traceback=["\x1b[0;31m" + "frame " * 3_000] * 60)


def _written_bytes(cells) -> int:
    """What nbformat writes for these cells' outputs (an empty notebook's bytes aside)."""
    empty = len(nbformat.writes(new_notebook(cells=[new_code_cell("pass") for _ in cells])).encode())
    return len(nbformat.writes(new_notebook(cells=cells)).encode()) - empty


def test_errors_count_against_a_cells_cap_and_the_last_one_stays(executor):
    """A cell that publishes error after error (get_ipython().showtraceback() in a loop) made a 38-76 MiB notebook."""
    cell = executor.nb.cells[0]
    for _ in range(200):
        executor.output(cell.outputs, _error(), None, 0)
    executor.output(cell.outputs, _error("the test's own", "AssertionError"), None, 0)
    assert _written_bytes([cell]) <= CELL + SHORT_ERROR
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert (errors[-1].ename, errors[-1].evalue) == ("AssertionError", "the test's own"), "the cell still failed"
    assert sum(1 for o in errors if len(o.traceback) == 1) == 1, "one short error past the caps, not one per error"


def test_errors_count_against_the_notebooks_cap(executor):
    cells = executor.nb.cells
    for index, cell in enumerate(cells):
        for _ in range(20):
            executor.output(cell.outputs, _error(), None, index)
    assert all(cell.outputs[-1].output_type == "error" for cell in cells)
    assert _written_bytes(cells) <= NOTEBOOK + len(cells) * SHORT_ERROR


def test_an_error_after_a_cleared_one_is_kept(executor):
    """The cell's error past the caps is replaced by the next one; cleared, the next one is a new output."""
    cell = executor.nb.cells[0]
    for _ in range(20):
        executor.output(cell.outputs, _error(), None, 0)
    executor.clear_output(cell.outputs, _message("clear_output", wait=False), 0)
    executor.output(cell.outputs, _error("after the clearing", "AssertionError"), None, 0)
    assert [(o.ename, o.evalue) for o in cell.outputs] == [("AssertionError", "after the clearing")]


@pytest.mark.parametrize("text", ["\x1b" * 40_000, "\n" * 40_000, "\x00\x07" * 20_000])
def test_caps_count_the_bytes_nbformat_writes(executor, text):
    """40,000 characters are under the 50,000 a cell may print, but JSON writes a control character as six bytes
    and nbformat each line as a string of its own: 240,000 and 480,000 bytes."""
    cell = executor.nb.cells[0]
    executor.output(cell.outputs, _message("stream", name="stdout", text=text), None, 0)
    executor.output(cell.outputs, _message("display_data", data={"text/plain": text}, metadata={}), None, 0)
    assert _written_bytes([cell]) <= PRINTED + 1_000


WRITE_A_LOT = ("import sys\n"
               "for stream in (sys.stdout.buffer, sys.stderr.buffer):\n"
               "    stream.write(b'BEGIN' + b'x' * (20 * 2**20) + b'END')\n")


def test_a_runs_stdout_and_stderr_are_kept_bounded():
    """nbgrader's log carries what a kernel wrote: the grader keeps its start and its end, not 20 MiB of each."""
    ran = runs.run_watched([sys.executable, "-c", WRITE_A_LOT], os.getcwd(), dict(os.environ), timeout=60)
    for text in (ran.stdout, ran.stderr.removesuffix("\n")):
        assert len(text) <= KEPT, len(text)
        assert text.startswith("BEGINxxx") and text.endswith("xxxEND")


class _WritingServer:
    """A fork server's stand-in whose job wrote 1 GiB (a sparse file) on each of its stdout and stderr."""

    def run(self, request, timeout, stop_when=None):
        for name in ("stdout", "stderr"):
            with open(request[name], "wb") as f:
                f.write(b"BEGIN")
                f.seek(2**30)
                f.write(b"END")
        return Ended(0)


def test_a_served_runs_files_are_read_bounded(tmp_path):
    ran = runs.run_served(_WritingServer(), ["autograde"], tmp_path, {}, timeout=60)
    for text in (ran.stdout, ran.stderr):
        assert len(text) <= KEPT, len(text)
        assert text.startswith("BEGIN\x00") and text.endswith("\x00END")


def test_the_graded_notebook_is_read_no_further_than_its_cap(tmp_path):
    small, large = tmp_path / "small.ipynb", tmp_path / "large.ipynb"
    small.write_text('{"cells": []}')
    with open(large, "wb") as f:  # sparse: no disk used
        f.truncate(GRADED + 1)
    assert worker.read_notebook_text(small) == '{"cells": []}'
    assert worker.read_notebook_text(large) is None


def test_bounds_refuse_a_meaningless_limit(tmp_path):
    import io

    from graders import sandbox, warm_kernel

    with pytest.raises(ValueError, match="limit"):
        runs.read_bounded(io.BytesIO(b"x"), limit=1)
    with pytest.raises(ValueError, match="limit"):
        worker.read_notebook_text(tmp_path, limit=-1)
    with pytest.raises(ValueError, match="limit"):
        sandbox.forward(0, io.BytesIO(), -1)
    with pytest.raises(ValueError, match="stdio"):
        warm_kernel.start_kernel(str(tmp_path / "nothing.sock"), {}, (0, 1))
