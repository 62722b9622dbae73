"""Grading end to end: a class of submissions, good, blank, wrong, broken and crashing, in one batch."""

import csv
import html
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from corpus import LESSON, POINTS as LESSON1_POINTS, _cell
from graders import pipeline, sandbox

REPO = Path(__file__).resolve().parent.parent
# Above the slowest cell of any lesson with two jobs sharing two cores (lesson 4's XLA cells: ~15 s alone),
# or a correct solution would lose points to the timeout; the infinite loop pays it once.
CELL_TIMEOUT = 120
POINTS = {
    LESSON: LESSON1_POINTS,
    "02-ddp": {"shard_tests": 2, "loader_tests": 2, "average_tests": 2, "accumulate_tests": 3,
               "checkpoint_tests": 2, "scaling_tests": 2, "worker_tests": 3, "quiz_tests": 2},
    "03-amp": {"fp16_tests": 2, "predict_dtypes_tests": 2, "scaler_tests": 2, "activation_ratio_tests": 2,
               "amp_step_tests": 3, "quiz_tests": 2},
    "04-accelerate-tpu": {"convert_tests": 3, "gather_tests": 2, "trap_tests": 2, "compiles_tests": 2, "bucket_tests": 2,
                          "spmd_tests": 2, "tpu_batch_tests": 2, "quiz_tests": 2},
}


def _solution(lesson=LESSON):
    return nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)


def _wrong_quiz(nb):
    cell = _cell(nb, "quiz")
    cell.source += '\nquiz["q2"] = {"a": "b", "b": "a", "fp16": "bf16", "bf16": "fp16"}[quiz["q2"]]\n'


def _syntax_error(nb):
    _cell(nb, "device_samples").source = "def device_samples(batch_size, n_devices, device:\n    return []\n"


def _infinite_loop(nb):
    cell = _cell(nb, "split_sizes")
    cell.source = "while True:\n    pass\n" + cell.source


def _deleted_test_cell(nb):
    nb.cells.remove(_cell(nb, "quiz_tests"))


def _kernel_crash(nb):
    cell = _cell(nb, "device_samples")
    cell.source = "import os\nos._exit(1)\n" + cell.source


def _warning_answers_amp(nb):
    """Correct answers that print warnings on stderr: numpy's overflow warning, a deprecated autocast spelling."""
    from answers import ANSWERS

    _cell(nb, "fp16").source = ANSWERS["03-amp"]["fp16"]["right"]["numpy cast (warns on overflow)"]
    _cell(nb, "amp_step").source = ANSWERS["03-amp"]["amp_step"]["right"]["the deprecated CPU spelling (warns)"]


def _warning_answer_dp(nb):
    cell = _cell(nb, "split_sizes")
    cell.source = "import warnings\n" + cell.source.replace(
        "    rows = -(-batch_size // n_devices)", '    warnings.warn("a student\'s own warning")\n    rows = -(-batch_size // n_devices)', 1)


# student -> {lesson: edit of the solution (None: the solution as is, "blank": the released notebook)}
SUBMISSIONS = {
    "full": {lesson: None for lesson in POINTS},
    "blank": {lesson: "blank" for lesson in POINTS},
    "wrong_quiz": {lesson: _wrong_quiz for lesson in POINTS},
    "syntax_error": {LESSON: _syntax_error},
    "infinite_loop": {LESSON: _infinite_loop},
    "deleted_test_cell": {LESSON: _deleted_test_cell},
    "kernel_crash": {LESSON: _kernel_crash},
    "warnings": {LESSON: _warning_answer_dp, "03-amp": _warning_answers_amp},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(REPO / "solutions", root / "solutions")
    for student, lessons in SUBMISSIONS.items():
        for lesson, edit in lessons.items():
            folder = root / "submitted" / student / lesson
            folder.mkdir(parents=True)
            if edit == "blank":
                shutil.copy(REPO / "notebooks" / lesson / f"{lesson}.ipynb", folder)
                continue
            nb = _solution(lesson)
            if edit:
                edit(nb)
            nbformat.write(nb, folder / f"{lesson}.ipynb")
    results = pipeline.grade(root, cell_timeout=CELL_TIMEOUT, submission_timeout=900, jobs=2, sandboxed=sandbox.available() is None)
    with open(root / "grades.csv") as f:
        rows = {(row["student"], row["lesson"]): row for row in csv.DictReader(f)}
    return root, {(r.student, r.lesson): r for r in results}, rows


def _points(row, lesson=LESSON):
    return {k: float(row[f"{lesson}:{k}"]) for k in POINTS[lesson]}


def test_every_submission_has_a_row(graded):
    _, results, rows = graded
    assert set(rows) == {(student, lesson) for student, lessons in SUBMISSIONS.items() for lesson in lessons}
    for (student, lesson), row in rows.items():
        assert float(row["max_score"]) == sum(POINTS[lesson].values())


def test_no_honest_submission_is_flagged(graded):
    """Solutions, blank and wrong answers, crashes, hangs and warnings of every lesson: none changed its kernel."""
    _, _, rows = graded
    assert {key: row["flags"] for key, row in rows.items() if row["flags"]} == {}


@pytest.mark.parametrize("lesson", POINTS)
def test_solution_scores_full_marks(graded, lesson):
    _, _, rows = graded
    assert _points(rows["full", lesson], lesson) == POINTS[lesson]
    assert float(rows["full", lesson]["score"]) == sum(POINTS[lesson].values())


@pytest.mark.parametrize("lesson", POINTS)
def test_untouched_student_notebook_scores_zero(graded, lesson):
    _, results, rows = graded
    assert results["blank", lesson].status == "graded" and float(rows["blank", lesson]["score"]) == 0


@pytest.mark.parametrize("lesson", POINTS)
def test_one_wrong_answer_loses_exactly_its_points(graded, lesson):
    _, _, rows = graded
    assert _points(rows["wrong_quiz", lesson], lesson) == {**POINTS[lesson], "quiz_tests": 0}


@pytest.mark.parametrize("lesson", [LESSON, "03-amp"])
def test_a_warning_on_stderr_costs_nothing(graded, lesson):
    """nbgrader alone scores a test cell 0 when anything reached stderr: a correct answer that warned lost its points."""
    _, results, rows = graded
    assert results["warnings", lesson].status == "graded"
    assert _points(rows["warnings", lesson], lesson) == POINTS[lesson]
    graded_notebook = (graded[0] / "autograded" / "warnings" / lesson / f"{lesson}.ipynb").read_text()
    assert "warnings do not change the grade" in graded_notebook, "the warning stays visible to the instructor"


def test_syntax_error_costs_only_that_exercise(graded):
    _, _, rows = graded
    assert _points(rows["syntax_error", LESSON]) == {**POINTS[LESSON], "device_samples_tests": 0}


def test_infinite_loop_times_out_that_cell_only(graded):
    _, _, rows = graded
    assert _points(rows["infinite_loop", LESSON]) == {**POINTS[LESSON], "split_sizes_tests": 0}


def test_deleted_test_cell_is_restored_and_run(graded):
    root, _, rows = graded
    assert _points(rows["deleted_test_cell", LESSON]) == POINTS[LESSON]
    restored = nbformat.read(root / "autograded" / "deleted_test_cell" / LESSON / f"{LESSON}.ipynb", as_version=4)
    assert _cell(restored, "quiz_tests")


def test_kernel_crash_costs_only_the_cell_that_caused_it(graded):
    _, results, rows = graded
    assert results["kernel_crash", LESSON].status.startswith("graded (cell")
    assert _points(rows["kernel_crash", LESSON]) == {**POINTS[LESSON], "device_samples_tests": 0}
    assert results["full", LESSON].status == "graded"


@pytest.mark.parametrize("lesson", POINTS)
def test_feedback_hides_the_hidden_tests(graded, lesson):
    root, _, _ = graded
    cells = [c.source for c in _solution(lesson).cells]
    regions = [s.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0] for s in cells if "BEGIN HIDDEN" in s]
    public = {line.strip() for s in cells for line in s.split("### BEGIN HIDDEN TESTS")[0].splitlines()}
    hidden = [line.strip() for r in regions for line in r.splitlines() if len(line.strip()) > 15 and line.strip() not in public]
    visible = next(line.strip() for s in cells if "BEGIN HIDDEN" in s for line in s.splitlines() if line.startswith("assert"))
    assert hidden
    for student in ("full", "blank", "wrong_quiz"):
        page = (root / "feedback" / student / lesson / f"{lesson}.html").read_text()
        text = html.unescape(re.sub(r"<[^>]+>", "", page))  # the code as a reader sees it
        lines = {line.strip() for line in text.splitlines()}
        assert "Hidden tests ran here" in text
        assert visible in lines, "visible tests stay visible"
        for line in hidden:
            assert line not in lines, line


def test_retries_share_one_time_limit(tmp_path, monkeypatch):
    """A submission that crashes again and again (each crash costs a regrade) must not hold its job for
    several submission time limits: the limit covers all the retries together."""
    import subprocess
    import time

    notebook = (REPO / "solutions" / LESSON / f"{LESSON}.ipynb").read_bytes()
    task = pipeline.Task("crasher", LESSON, {f"{LESSON}.ipynb": notebook}, pipeline.course_digest(), sandboxed=False,
                         cell_timeout=10, submission_timeout=1)
    timeouts = []

    def crashing_nbgrader(root, *args, timeout=None, env=None, **_):
        timeouts.append(timeout)
        time.sleep(0.4)
        Path(env["GRADER_PROGRESS_FILE"]).write_text(str(len(timeouts)))  # a new cell dies every time
        return subprocess.CompletedProcess(args, 1, "", "DeadKernelError: Kernel died")

    monkeypatch.setattr(pipeline, "nbgrader", crashing_nbgrader)
    start = time.monotonic()
    with pipeline.Slots(1, sandboxed=False) as slots:
        result = pipeline.execute(task, b"", slots)
    assert time.monotonic() - start < 2, "the retries ran past the submission's time limit"
    assert result.status.startswith("not graded") and len(timeouts) <= 3
    assert all(later < earlier for earlier, later in zip(timeouts, timeouts[1:]))


def test_a_kernel_that_dies_unnoticed_costs_its_cell_not_the_submission(tmp_path):
    """When a kernel dies or hangs in a way nbclient does not notice (its cell never ends), the watchdog stops
    the run once no cell has finished for a while: the cell is skipped, instead of the submission running out
    its whole time limit and being reported as too slow."""
    import sys
    import time

    progress = tmp_path / "progress"
    progress.write_text("3")
    start = time.monotonic()
    stuck = pipeline.run_watched([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, None, timeout=50,
                                 progress=str(progress), stalled_after=1.5)
    assert time.monotonic() - start < 20
    assert pipeline._reason(stuck) == pipeline.KERNEL_HUNG
    progress.touch()  # as the pipeline does before each run
    working = pipeline.run_watched([sys.executable, "-c", f"import pathlib, time\nfor i in range(8):\n"
                                    f"    pathlib.Path({str(progress)!r}).write_text(str(i)); time.sleep(0.5)\nprint('done')"],
                                   tmp_path, None, timeout=50, progress=str(progress), stalled_after=1.5)
    assert working.returncode == 0 and working.stdout.strip() == "done", "cells that keep finishing are never stopped"
    late = pipeline.run_watched([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, None, timeout=1)
    assert pipeline._reason(late) == pipeline.TIMED_OUT


def test_concurrent_grading_runs_get_different_sandbox_uids():
    first, lock1 = pipeline._uid_block()
    second, lock2 = pipeline._uid_block()
    try:
        assert first != second, "two runs at once would share uids (and one's fork bomb the other's process limit)"
    finally:
        lock1.close()
        lock2.close()
    again, lock3 = pipeline._uid_block()
    lock3.close()
    assert again == first, "a finished run gives its uids back"


def test_output_is_capped_in_bytes_but_errors_always_kept(monkeypatch):
    """A 100 MB line passed nbgrader's line limit; a cap must never drop the error that fails a test."""
    from graders import execute

    monkeypatch.setattr(execute, "MAX_OUTPUT_BYTES", 1000)
    runner = execute.CrashSafeExecute()
    runner.reset_execution_trackers()  # what nbclient does before a notebook, and before a cell
    runner.clear_before_next_output = False
    outs = []

    def message(msg_type, **content):
        return {"msg_type": msg_type, "content": content, "header": {"msg_type": msg_type},
                "parent_header": {"msg_id": "m"}, "metadata": {}}

    for _ in range(5):
        runner.output(outs, message("stream", name="stdout", text="x" * 400), None, 7)
    runner.output(outs, message("error", ename="AssertionError", evalue="wrong", traceback=["AssertionError: wrong"]), None, 7)
    texts = [o.get("text", "") for o in outs if o.output_type == "stream"]
    assert sum(len(t) for t in texts if t.startswith("x")) <= 1000 and any("dropped" in t for t in texts)
    assert outs[-1].output_type == "error", "the failing test's error must stay"
    runner.output(outs, message("stream", name="stdout", text="fits"), None, 8)  # another cell has its own budget
    assert outs[-1].text == "fits"
