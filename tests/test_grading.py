"""Grading end to end: a class of submissions, good, blank, wrong, broken and crashing, in one batch
(tests/classroom.py's class, graded once for the session on a Dask LocalCluster with a worker killed)."""

import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from corpus import CLASS, LESSON, LESSON_POINTS as POINTS, _cell, explanation_cells_that_failed, ran
from graders import course, grades, intake, pipeline, record, runs, sandbox, slots, submission, worker

REPO = Path(__file__).resolve().parent.parent
# Lesson-1 cases of the corpus (tests/corpus.py) that this file checks too, when the sandbox lets the corpus run.
CORPUS_CASES = ("syntax_error", "infinite_loop", "tampered_notebook", "forged_status")
needs_corpus = pytest.mark.skipif(sandbox.available() is not None, reason="the corpus is graded only in the sandbox")


def _solution(lesson=LESSON):
    return nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)


def _points(row, lesson=LESSON):
    return {k: float(row[f"{lesson}:{k}"]) for k in POINTS[lesson]}


def test_every_submission_has_a_row(graded_class):
    rows = graded_class.rows
    expected = {(student, lesson) for student, lessons in CLASS.items() for lesson in lessons}
    assert expected <= set(rows)
    with open(graded_class.root / "grades.csv") as f:
        keys = [(row["student"], row["lesson"]) for row in csv.DictReader(f)]
    assert len(keys) == len(set(keys)) == len(graded_class.results), "one row per submission, none twice"
    for (student, lesson), row in rows.items():
        assert float(row["max_score"]) == sum(POINTS[lesson].values())


def test_no_honest_submission_is_flagged(graded_class):
    """Solutions, blank and wrong answers, crashes, hangs and warnings of every lesson: none changed its kernel."""
    honest = [(s, l) for s, lessons in CLASS.items() for l in lessons] + [(name, LESSON) for name in CORPUS_CASES]
    assert {key: graded_class.rows[key]["flags"] for key in honest if key in graded_class.rows
            and graded_class.rows[key]["flags"]} == {}


@pytest.mark.parametrize("lesson", POINTS)
def test_solution_scores_full_marks(graded_class, lesson):
    rows = graded_class.rows
    assert _points(rows["full", lesson], lesson) == POINTS[lesson]
    assert float(rows["full", lesson]["score"]) == sum(POINTS[lesson].values())


@pytest.mark.parametrize("lesson", POINTS)
def test_untouched_student_notebook_scores_zero(graded_class, lesson):
    assert graded_class.results["blank", lesson].status == "graded"
    assert float(graded_class.rows["blank", lesson]["score"]) == 0


@pytest.mark.parametrize("lesson", POINTS)
def test_only_cells_that_passed_their_visible_tests_run_their_hidden_tests(graded_class, lesson):
    """graders/hidden_runs.py runs a cell's hidden tests only if its visible tests passed in the student's kernel (a cell
    that failed them scores nothing whatever they say): every graded cell of the class holds one run record, which says
    the run left it out exactly when the cell shows an error. The blank notebook's cells all failed: no hidden run."""
    from graders import judge

    left_out = {}
    for student in CLASS:
        nb = nbformat.read(graded_class.root / "autograded" / student / lesson / f"{lesson}.ipynb", as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("grade"):
                continue
            (text,) = [o.data[judge.RECORD_MIME] for o in cell.outputs if judge.RECORD_MIME in o.get("data", {})]
            errored = any(o.output_type == "error" for o in cell.outputs)
            assert (json.loads(text)["failure"] == judge.VISIBLE_FAILED) is errored, (student, cell.metadata.nbgrader)
            left_out.setdefault(student, []).append(errored)
    assert all(left_out["blank"]) and not any(left_out["full"]), left_out


@pytest.mark.parametrize("lesson", POINTS)
def test_an_unsolved_lesson_fails_only_in_its_exercise_and_check_cells(graded_class, lesson):
    """The blank notebook, run top to bottom: every explanation cell runs without its exercises solved, so Run All
    (which goes on past the released exercise and check cells, tagged raises-exception) shows the whole lesson."""
    nb = nbformat.read(graded_class.root / "autograded" / "blank" / lesson / f"{lesson}.ipynb", as_version=4)
    failed = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
              and any(out.output_type == "error" for out in cell.outputs)]
    assert failed, "an unsolved notebook should fail its checks"
    other = [i for i in failed if not (nb.cells[i].metadata.get("nbgrader", {}).get("solution")
                                       or nb.cells[i].metadata.get("nbgrader", {}).get("grade"))]
    assert not other, f"cells that fail without being exercises or checks: {other}"


@pytest.mark.parametrize("lesson", POINTS)
def test_one_wrong_answer_loses_exactly_its_points(graded_class, lesson):
    assert _points(graded_class.rows["turkish", lesson], lesson) == {**POINTS[lesson], "quiz_tests": 0}


@pytest.mark.parametrize("lesson", [LESSON, "03-amp"])
def test_a_warning_on_stderr_costs_nothing(graded_class, lesson):
    """nbgrader alone scores a test cell 0 when anything reached stderr: a correct answer that warned lost its points.
    (The class's wrong quiz of these lessons, its Turkish submission, warns in other cells: those keep every point.)"""
    assert graded_class.results["turkish", lesson].status == "graded"
    assert _points(graded_class.rows["turkish", lesson], lesson) == {**POINTS[lesson], "quiz_tests": 0}
    graded_notebook = (graded_class.root / "autograded" / "turkish" / lesson / f"{lesson}.ipynb").read_text()
    assert "warnings do not change the grade" in graded_notebook, "the warning stays visible to the instructor"


@needs_corpus
def test_syntax_error_costs_only_that_exercise(graded_class):
    assert _points(graded_class.rows["syntax_error", LESSON]) == {**POINTS[LESSON], "device_samples_tests": 0}


@needs_corpus
def test_infinite_loop_times_out_that_cell_only(graded_class):
    assert _points(graded_class.rows["infinite_loop", LESSON]) == {**POINTS[LESSON], "split_sizes_tests": 0}


@needs_corpus
def test_deleted_test_cell_is_restored_and_run(graded_class):
    assert _points(graded_class.rows["tampered_notebook", LESSON]) == POINTS[LESSON]
    restored = nbformat.read(graded_class.root / "autograded" / "tampered_notebook" / LESSON / f"{LESSON}.ipynb", as_version=4)
    assert _cell(restored, "quiz_tests")


@needs_corpus
def test_kernel_crash_costs_only_the_cell_that_caused_it(graded_class):
    assert graded_class.results["forged_status", LESSON].status.startswith("graded (cell")
    assert _points(graded_class.rows["forged_status", LESSON]) == {**POINTS[LESSON], "device_samples_tests": 0}
    assert graded_class.results["full", LESSON].status == "graded"


@pytest.mark.parametrize("lesson", POINTS)
def test_feedback_hides_the_hidden_tests(graded_class, lesson):
    root = graded_class.root
    cells = [c.source for c in _solution(lesson).cells]
    regions = [s.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0] for s in cells if "BEGIN HIDDEN" in s]
    public = {line.strip() for s in cells for line in s.split("### BEGIN HIDDEN TESTS")[0].splitlines()}
    hidden = [line.strip() for r in regions for line in r.splitlines() if len(line.strip()) > 15 and line.strip() not in public]
    visible = next(line.strip() for s in cells if "BEGIN HIDDEN" in s for line in s.splitlines() if line.startswith("assert"))
    assert hidden
    from i18n.catalog import words

    for student, lang in (("full", "en"), ("blank", "en"), ("turkish", "tr")):
        page = (root / "feedback" / student / lesson / f"{lesson}.html").read_text()
        text = html.unescape(re.sub(r"<[^>]+>", "", page))  # the code as a reader sees it
        lines = {line.strip() for line in text.splitlines()}
        # the blank notebook's cells all failed their visible checks: their hidden tests did not run, and it says so
        ran, not_run = ("not_run", "notice") if student == "blank" else ("notice", "not_run")
        assert words(lang)[ran] in text and words(lang)[not_run] not in text, (student, lang)
        assert lang != "en" or visible in lines, "visible tests stay visible"  # (in Turkish, with Turkish messages)
        for line in hidden:
            assert line not in lines, line
    wrong = html.unescape((root / "feedback" / "turkish" / lesson / f"{lesson}.html").read_text())
    # each section names its exercise as the lesson does, and its points (the wrong quiz fails, the rest passes)
    from graders import redact

    said, quiz = words("tr"), redact.lesson_words(lesson, "tr")["names"]["quiz_tests"]
    failed = said["failed"].format(label=said["points"].format(exercise=quiz, points=2), why="")
    assert failed in wrong and "✓ " in wrong, failed
    assert said["passed"].format(label="").split(":", 1)[1] in wrong


def test_retries_share_one_time_limit(tmp_path, monkeypatch):
    """A submission that crashes again and again (each crash costs a regrade) must not hold its job for
    several submission time limits: the limit covers all the retries together."""
    notebook = (REPO / "solutions" / LESSON / f"{LESSON}.ipynb").read_bytes()
    task = submission.Task("crasher", LESSON, {f"{LESSON}.ipynb": notebook}, course.course_digest(), sandboxed=False,
                         cell_timeout=10, submission_timeout=1, solution=notebook)
    timeouts = []

    def crashing_nbgrader(root, *args, timeout=None, env=None, **_):
        timeouts.append(timeout)
        time.sleep(0.4)
        Path(env["GRADER_PROGRESS_FILE"]).write_text(str(len(timeouts)))  # a new cell dies every time
        Path(env["GRADER_OUTCOME_FILE"]).write_text("DeadKernelError")  # as graders/execute.py records it
        return subprocess.CompletedProcess(args, 1, "", "")

    monkeypatch.setattr(worker, "nbgrader", crashing_nbgrader)
    with slots.Slots(1, sandboxed=False) as job_slots:
        result = worker.execute(task, b"", job_slots)
    # each try is given what is left of the one limit, and the tries stop once it is spent: at most three of
    # 0.4 s fit in 1 s (MAX_CRASHES would allow six). Counted, not timed: CI's load once made 1.2 s take 3 s.
    assert result.status == "not graded: " + worker.TIMED_OUT
    assert 1 <= len(timeouts) <= 3 < worker.MAX_CRASHES + 1, timeouts
    assert timeouts[0] <= 1 and all(later < earlier - 0.3 for earlier, later in zip(timeouts, timeouts[1:])), timeouts


def test_a_kernel_that_dies_unnoticed_costs_its_cell_not_the_submission(tmp_path):
    """When a kernel dies or hangs in a way nbclient does not notice (its cell never ends), the watchdog stops
    the run once no cell has finished for a while: the cell is skipped, instead of the submission running out
    its whole time limit and being reported as too slow."""
    # what a stall is here: a process that writes its progress every half second must never look stalled, even
    # when its interpreter takes seconds to start on a loaded machine (1.5 s once did not do under a load of 80)
    STALL_S = 5.0
    progress = tmp_path / "progress"
    progress.write_text("3")
    start = time.monotonic()
    stuck = runs.run_watched([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, None, timeout=50,
                                 progress=str(progress), stalled_after=STALL_S)
    assert time.monotonic() - start < 30
    assert worker.reason(stuck) == submission.KERNEL_HUNG
    progress.touch()  # as the pipeline does before each run
    working = runs.run_watched([sys.executable, "-c", f"import pathlib, time\nfor i in range(8):\n"
                                    f"    pathlib.Path({str(progress)!r}).write_text(str(i)); time.sleep(0.5)\nprint('done')"],
                                   tmp_path, None, timeout=50, progress=str(progress), stalled_after=STALL_S)
    assert working.returncode == 0 and working.stdout.strip() == "done", "cells that keep finishing are never stopped"
    late = runs.run_watched([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, None, timeout=1)
    assert worker.reason(late) == submission.TIMED_OUT


def test_concurrent_grading_runs_get_different_sandbox_uids():
    first, lock1 = slots.uid_block()
    second, lock2 = slots.uid_block()
    try:
        assert first != second, "two runs at once would share uids (and one's fork bomb the other's process limit)"
    finally:
        lock1.close()
        lock2.close()
    again, lock3 = slots.uid_block()
    lock3.close()
    assert again == first, "a finished run gives its uids back"


KILLED_GRADER = """
import json, os, time
from graders import sandbox, slots
job_slots = slots.Slots(1, sandboxed=False)
with sandbox.ipc_folder(job_slots.ipc_prefix) as ipc:
    print(json.dumps([job_slots.block, job_slots.scratch, ipc, os.path.ismount(ipc)]), flush=True)
    time.sleep(600)
"""


def test_what_a_killed_grading_process_left_is_swept_by_the_next_holder_of_its_uids():
    child = subprocess.Popen([sys.executable, "-c", KILLED_GRADER], cwd=course.REPO, stdout=subprocess.PIPE, text=True)
    block, scratch, ipc, mounted = json.loads(child.stdout.readline())
    child.kill()  # SIGKILL: neither Slots.close() nor ipc_folder's clean-up runs
    child.wait()
    assert os.path.isdir(scratch) and os.path.isdir(ipc) and os.path.ismount(ipc) == mounted
    held = []  # the blocks below the dead process's, so that the next Slots takes its block
    try:
        while (taken := slots.uid_block())[0] != block:
            held.append(taken[1])
        taken[1].close()
        with slots.Slots(1, sandboxed=False) as job_slots:
            assert job_slots.block == block
            assert not os.path.exists(scratch) and not os.path.exists(ipc) and not os.path.ismount(ipc)
    finally:
        for lock in held:
            lock.close()


def test_a_shared_judge_memo_must_be_a_folder_only_this_user_may_open(tmp_path):
    """A judge trusts the references it reads in its memo: one shared by other grading processes (a local cluster's
    workers) must be a 0700 folder of this user's, and outlives the slots that used it."""
    shared = tmp_path / "memo"
    shared.mkdir(mode=0o700)
    with slots.Slots(1, sandboxed=False, memo=str(shared)) as job_slots:
        assert job_slots.memo == str(shared)
    assert shared.is_dir()
    open_to_the_group = tmp_path / "group"
    open_to_the_group.mkdir()
    open_to_the_group.chmod(0o770)
    (tmp_path / "link").symlink_to(shared)
    (tmp_path / "file").write_text("")
    bad = [tmp_path / "missing", open_to_the_group, tmp_path / "link", tmp_path / "file"]
    if os.geteuid() == 0:  # a folder of another user's
        bad.append(tmp_path / "others")
        bad[-1].mkdir(mode=0o700)
        os.chown(bad[-1], 65534, 65534)
    for folder in bad:
        with pytest.raises(ValueError, match="memo"):
            slots.Slots(1, sandboxed=False, memo=str(folder))


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


def test_a_status_comes_from_what_the_grader_saw_never_from_what_a_kernel_wrote(tmp_path):
    """nbgrader's output carries the kernel's stderr: words in it decide nothing."""
    forged = subprocess.CompletedProcess([], 1, "timed out after 3 s\nDeadKernelError: Kernel died\n",
                                         "the submission ran past its time limit\nthe grading run stalled\nValueError: =1+1\n")
    assert worker.reason(forged) == "nbgrader exited with 1"
    failure = tmp_path / "failure.txt"
    for written, status in (("DeadKernelError", submission.KERNEL_DIED), ("CellTimeoutError", submission.KERNEL_HUNG),
                            ("RuntimeError", "nbgrader stopped on RuntimeError"), ("=cmd|x", "nbgrader exited with 1")):
        failure.write_text(written)
        assert worker.reason(forged, str(failure)) == status


def test_no_field_of_grades_csv_starts_a_spreadsheet_formula():
    assert [grades._inert(v) for v in ("=HYPERLINK(1)", "+1", "-1", "@SUM(1)", "graded", 3.0)] == \
        ["'=HYPERLINK(1)", "'+1", "'-1", "'@SUM(1)", "graded", 3.0]


def test_intake_refuses_a_notebook_past_its_limits(tmp_path, monkeypatch):
    """The coordinator reads and renders what a submission sends: its size and cell count are bounded first."""
    lesson = "01-dataparallel"
    shutil.copytree(REPO / "solutions" / lesson, tmp_path / "solutions" / lesson)
    folder = tmp_path / "submitted" / "s" / lesson
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"note {i}") for i in range(1200)])
    (folder / f"{lesson}.ipynb").write_text(json.dumps(nb))
    assert intake.prepare(tmp_path, "s", lesson).startswith("not graded: the notebook has more than")
    monkeypatch.setattr(intake, "MAX_NOTEBOOK_FILE_BYTES", 1000)
    assert intake.prepare(tmp_path, "s", lesson).startswith("not graded: the notebook is larger than")


def test_grading_leaves_the_student_notebooks_as_make_release_wrote_them(tmp_path):
    """Recording a lesson's cells in the gradebook releases it: into a scratch folder, never over notebooks/
    (whose exercise cells carry the raises-exception tag that lets Run All go on)."""
    lesson = "01-dataparallel"
    shutil.copytree(REPO / "solutions" / lesson, tmp_path / "solutions" / lesson)
    shutil.copytree(REPO / "notebooks" / lesson, tmp_path / "notebooks" / lesson)
    before = (tmp_path / "notebooks" / lesson / f"{lesson}.ipynb").read_bytes()
    recorder = record.Recorder(tmp_path)
    try:
        recorder.generate_assignment(lesson)
    finally:
        recorder.close()
    assert (tmp_path / "notebooks" / lesson / f"{lesson}.ipynb").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "notebooks").iterdir()) == [lesson]


def test_nbgraders_own_autograde_api_is_refused_before_it_removes_a_grade(tmp_path):
    """nbgrader's API (NbGraderAPI.autograde with the course's config: what the formgrader's button calls where
    graders/formgrader.py does not route it through the pipeline) would run student code without the sandbox and the
    judge: it is refused, with a message naming `make grade`, and the graded notebook it would replace is still there.
    `make instructor` records the lessons in the gradebook first, so that the formgrader works on a fresh clone."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    lesson = "01-dataparallel"
    shutil.copytree(REPO / "solutions" / lesson, tmp_path / "solutions" / lesson)
    assert pipeline.main(["gradebook", "--root", str(tmp_path)]) == 0
    folder = tmp_path / "submitted" / "s1" / lesson
    folder.mkdir(parents=True)
    shutil.copy(REPO / "solutions" / lesson / f"{lesson}.ipynb", folder)
    config = PyFileConfigLoader(course.CONFIG.name + ".py", path=str(course.CONFIG.parent)).load_config()
    config.CourseDirectory.root = str(tmp_path)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    assert api.get_assignment(lesson)["name"] == lesson, "the formgrader finds the lesson in the gradebook"
    graded = tmp_path / "autograded" / "s1" / lesson / f"{lesson}.ipynb"
    graded.parent.mkdir(parents=True)
    shutil.copy(folder / f"{lesson}.ipynb", graded)
    os.utime(graded, (1, 1))  # older than the submission: nbgrader would replace it even without --force
    outcome = api.autograde(lesson, "s1")
    assert not outcome["success"] and "make grade" in outcome.get("log", "") + outcome.get("error", "")
    assert graded.exists(), "the grade recorded before is kept"
    assert not (tmp_path / "notebooks").exists(), "recording the lessons released nothing into notebooks/"


def test_a_feedback_section_names_its_exercise_and_points_and_never_a_hidden_value(tmp_path, monkeypatch):
    from graders import redact

    cell = nbformat.v4.new_code_cell("assert x", metadata={"nbgrader": {"grade": True, "grade_id": "shard_tests", "points": 2}})
    verdicts = tmp_path / "verdicts.json"
    monkeypatch.setenv("GRADER_VERDICTS_FILE", str(verdicts))
    for message, shown in (("the ranks drifted apart: is every gradient averaged over all ranks?", True),
                           ("my_shard(10, 3, 1, drop_last=False) is not what DistributedSampler yields", False),
                           ("expected 'b'", False)):
        verdicts.write_text(json.dumps({"cells": {"shard_tests": {"passed": False, "message": message}}}))
        line = redact.verdict_line(cell)
        assert line.startswith("✗ shard (2 points): A test in this cell failed") and (message in line) is shown, line
    verdicts.write_text(json.dumps({"cells": {"shard_tests": {"passed": True, "message": ""}}}))
    assert redact.verdict_line(cell).startswith("✓ shard (2 points): The tests in this cell passed.")


def test_a_graded_kernel_shows_no_students_notice(graded_class):
    """helpers/refusal.py's notice (an answer reached a reference) is for a student's own kernel: a graded kernel is
    told it is the grader's (graders/slots.py), and its submission's feedback says why a refused answer failed."""
    from helpers import _messages, refusal

    notices = [refusal.NOTICE, _messages.CATALOGS["tr"][refusal.NOTICE]]
    shown = [text.split("{name}")[1][:40] for text in notices]
    runs = sorted(graded_class.root.glob("autograded/*/*/*.ipynb"))
    assert len(runs) > 40 and all(len(text) == 40 for text in shown)
    assert not [path for path in runs if any(text in path.read_text() for text in shown)]


@pytest.mark.parametrize("lesson", POINTS)
def test_demonstrations_ran_in_the_released_notebook_and_were_left_out_of_the_solution(graded_class, lesson):
    """The released notebook graded with every cell run (blank) and the Turkish solution too: no explanation cell
    failed, demonstrations included (they run only here in make test: nbval leaves them out, tests/conftest.py). The
    solution graded as grading does by default (full): they were left out, and no explanation cell failed without
    them. (A solution graded with them run scores the same: the Turkish one, lesson 1's in the corpus.)"""
    root = graded_class.root
    assert all(ran(root, "blank", lesson).values()) and all(ran(root, "turkish", lesson).values())
    assert not any(ran(root, "full", lesson).values())
    for student in ("blank", "full", "turkish"):
        assert not explanation_cells_that_failed(root, student, lesson), (student, lesson)


@pytest.mark.parametrize("lesson", POINTS)
def test_the_turkish_edition_is_graded_like_the_english_with_feedback_in_turkish(graded_class, lesson):
    """The Turkish solution (notebooks/tr's text, the same code: tests/test_edition.py) scores what the English
    one scores, cell by cell, but for its wrong quiz (the class's wrong answer), and its feedback page speaks Turkish,
    frame and verdicts."""
    rows = graded_class.rows
    assert graded_class.results["turkish", lesson].status == "graded"
    assert _points(rows["turkish", lesson], lesson) == {**_points(rows["full", lesson], lesson), "quiz_tests": 0}
    page = (graded_class.root / "feedback" / "turkish" / lesson / f"{lesson}.html").read_text()
    assert "Bu hücredeki testler geçti" in page and "Gizli testler burada çalıştı" in page and "Puan: " in page
    assert "The tests in this cell passed" not in page and "Score: " not in page
    from bs4 import BeautifulSoup
    from graders import redact
    from test_feedback_language import _english_sentences

    soup = BeautifulSoup(page, "html.parser")
    for element in [*soup(["style", "script"]), *soup.select(".input_area, .jp-InputArea-editor")]:
        element.decompose()
    text = " ".join(soup.get_text(" ").split())
    for grade_id, name in redact.lesson_words(lesson, "tr")["names"].items():  # "Alıştırma 3 — ...", not dp_gradients
        assert f"{'✗' if grade_id == 'quiz_tests' else '✓'} {name} (" in text, (grade_id, name)  # (its wrong quiz)
    assert not sorted(s for s in _english_sentences(lesson, "tr") if s in text), "English on the Turkish page"
    english = (graded_class.root / "feedback" / "full" / lesson / f"{lesson}.html").read_text()
    assert "The tests in this cell passed" in english and "Bu hücredeki" not in english


def test_grading_one_student_keeps_the_others_rows_and_says_when_a_submission_is_late(tmp_path):
    """`make grade STUDENT=... LESSON=...` grades those only; grades.csv keeps every other row, with the columns of the
    lessons it lists; a submission past the lesson's due date says by how much; unknown names are refused."""
    from nbgrader.api import Gradebook

    shutil.copytree(REPO / "solutions" / LESSON, tmp_path / "solutions" / LESSON)
    shutil.copytree(REPO / "solutions" / "02-ddp", tmp_path / "solutions" / "02-ddp")
    for student in ("s1", "s2"):
        (tmp_path / "submitted" / student / LESSON).mkdir(parents=True)
    (tmp_path / "submitted" / "s2" / LESSON / f"{LESSON}.ipynb").write_text("not a notebook")
    first = pipeline.grade(tmp_path, sandboxed=False, students=["s2"])
    assert [(r.student, r.status) for r in first] == [("s2", "not graded: the notebook cannot be read (JSONDecodeError)")]

    shutil.copy(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", tmp_path / "submitted" / "s1" / LESSON)
    (tmp_path / "submitted" / "s1" / LESSON / "timestamp.txt").write_text("2026-01-02 00:00:00 UTC")
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(LESSON, duedate="2026-01-01 00:00:00 UTC")
    [late] = pipeline.grade(tmp_path, sandboxed=False, students=["s1"], only_lessons=[LESSON])
    assert late.status == "graded (late by 1 day, 0:00:00)", late.status

    with open(tmp_path / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["student"], r["status"]) for r in rows] == [("s1", late.status), ("s2", first[0].status)]
    assert all(c.startswith(f"{LESSON}:") for c in rows[0] if ":" in c), "only the graded lesson's exercises"
    assert float(rows[0]["score"]) == sum(POINTS[LESSON].values()) and float(rows[1]["score"]) == 0
    ticks = grades.points_lost_figure(tmp_path).axes[0].get_xticks()  # one student lost points: no half students
    assert len(ticks) and all(float(t).is_integer() for t in ticks), ticks

    with pytest.raises(ValueError, match="students names \\['s3'\\]"):
        pipeline.grade(tmp_path, sandboxed=False, students=["s3"])
    with pytest.raises(ValueError, match="only_lessons names \\['05-nothing'\\]"):
        pipeline.grade(tmp_path, sandboxed=False, only_lessons=["05-nothing"])
    assert pipeline.main(["grade", "--root", str(tmp_path), "--student=s3", "--unsandboxed"]) == 2


def test_a_new_gradebook_is_stamped_as_alembic_heads_says_without_running_it(tmp_path, monkeypatch):
    """graders/gradebook.py: the newest of nbgrader's migrations, read from its files, is what `alembic heads` says; with
    it installed (the course's config does so) a new gradebook gets that version with no `alembic` anywhere on PATH,
    and a folder of migrations that branches is refused rather than guessed."""
    import sqlite3

    from nbgrader.api import Gradebook
    from nbgrader.dbutil import _temp_alembic_ini

    from graders import gradebook

    with _temp_alembic_ini(f"sqlite:///{tmp_path / 'unused.db'}") as ini:
        heads = subprocess.run([str(Path(sys.executable).parent / "alembic"), "-c", ini, "heads"], capture_output=True,
                               text=True, check=True).stdout
    assert gradebook.newest_migration() == heads.split()[0]
    monkeypatch.setenv("PATH", "/nonexistent")
    gradebook.install()
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}"):
        pass
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(heads.split()[0],)]
    versions = tmp_path / "versions"
    versions.mkdir()
    for name, follows in (("a", "None"), ("b", "'a'"), ("c", "'a'")):
        (versions / f"{name}.py").write_text(f"revision = '{name}'\ndown_revision = {follows}\n")
    with pytest.raises(ValueError, match="versions"):
        gradebook.newest_migration(versions)


def test_a_submission_the_grader_could_not_grade_leaves_the_instructor_its_reason(tmp_path, monkeypatch):
    """A run nbgrader could not finish (here a kernel that cannot start: a grader's failure, never the student's) gives
    no grade, and reports/not-graded/STUDENT/LESSON.log keeps why in nbgrader's own words, for the instructor, which
    the run's progress line names; a grade of that submission removes it."""
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": ["/nonexistent/python", "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"], "display_name": "broken"}))
    course = tmp_path / "course"
    shutil.copytree(REPO / "solutions" / LESSON, course / "solutions" / LESSON)
    (course / "submitted" / "s1" / LESSON).mkdir(parents=True)
    shutil.copy(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", course / "submitted" / "s1" / LESSON)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    lines = []
    [result] = pipeline.grade(course, cell_timeout=30, submission_timeout=300, sandboxed=False, log=lines.append)
    assert result.status == "not graded: nbgrader stopped on FileNotFoundError", result.status
    log = course / "reports" / "not-graded" / "s1" / f"{LESSON}.log"
    assert "/nonexistent/python" in log.read_text() and f"(why: {log.relative_to(course)})" in lines[-1], lines
    assert not list(course.glob("feedback/**/*.log")), "the reason is the instructor's, not the student's feedback"
    task = submission.Task("s1", LESSON, {}, "", False, 30, 300, b"")
    record.Recorder(course).record(task, submission.Outcome("graded"))  # (its writes fail: a graded outcome still clears)
    assert not log.exists()
