"""The coordinator's writes, one submission at a time: the graded notebook into autograded/, its scores into the
gradebook (nbgrader's own SaveAutoGrades and late penalties, then the judge's verdicts), and its feedback page,
rendered in a fork of an nbgrader server under a time and a memory limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import nbformat

from graders import forkserver, redact
from graders.course import CONFIG
from graders.runs import nbgrader
from graders.submission import Outcome, Result, Task
from graders.worker import GRADER_MEMORY_BYTES, max_graded_bytes

# The graded notebook a worker sends back: the submission and the outputs it may keep (graders/execute.py).
MAX_GRADED_CHARS = max_graded_bytes()


EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")  # what nbgrader submit/collect put beside a notebook


FEEDBACK_SECONDS = 120  # rendering one feedback page (about half a second for a lesson)


class Recorder:
    """The coordinator's writes, one submission at a time: the graded notebook into autograded/, its scores into
    the gradebook (nbgrader's own SaveAutoGrades and late penalties, then the judge's verdicts), its feedback."""

    def __init__(self, root: Path):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config.loader import PyFileConfigLoader

        self.root = root
        self.db_url = f"sqlite:///{root / 'gradebook.db'}"
        bin_dir = str(Path(sys.executable).parent)  # nbgrader runs `alembic` from PATH to create a gradebook
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        self.config = PyFileConfigLoader(CONFIG.name + ".py", path=str(CONFIG.parent)).load_config()
        self.config.CourseDirectory.root = str(root)
        # Recording a lesson's cells in the gradebook releases it too: into a scratch folder, never notebooks/
        # (`make release` alone writes those, tagged so that Run All goes on past an unsolved exercise).
        self._scratch = tempfile.mkdtemp(prefix="recorder-")
        self.config.CourseDirectory.release_directory = os.path.join(self._scratch, "released")
        self.coursedir = CourseDirectory(config=self.config)
        self.api = NbGraderAPI(coursedir=self.coursedir, config=self.config)
        self._feedback_server = None

    def generate_assignment(self, lesson: str) -> None:
        """nbgrader generate_assignment, in this process: the lesson's cells into the gradebook."""
        outcome = self.api.generate_assignment(lesson, force=True, create=True)
        if not outcome.get("success"):
            raise RuntimeError(f"generate_assignment {lesson} failed:\n{outcome.get('log', '')[-3000:]}\n{outcome.get('error', '')}")

    def template(self) -> bytes:
        """The gradebook with the lessons' cells and no students: each worker grades in a copy of it."""
        import sqlite3

        from nbgrader.api import Gradebook

        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "gradebook.db")
            with sqlite3.connect(self.root / "gradebook.db") as source, sqlite3.connect(path) as copy:
                source.backup(copy)
            with Gradebook(f"sqlite:///{path}") as gb:
                for student in [s.id for s in gb.students]:
                    gb.remove_student(student)
            with sqlite3.connect(path) as db:
                db.execute("VACUUM")
            return Path(path).read_bytes()

    def record(self, task: Task, outcome: Outcome) -> Result:
        result = Result(task.student, task.lesson, outcome.status, outcome.seconds, tuple(outcome.flags))
        with contextlib.suppress(OSError, RuntimeError):  # (a log that cannot be kept costs the grade nothing)
            self._keep_log(task, outcome.log if not outcome.status.startswith("graded") else "")
        if not outcome.status.startswith("graded"):
            return result
        if len(outcome.notebook or "") > MAX_GRADED_CHARS:
            result.status = f"not graded: the graded notebook is larger than {MAX_GRADED_CHARS >> 20} MiB"
            return result
        try:
            notebook = nbformat.reads(outcome.notebook, as_version=4)
            self._write_graded(task, outcome.notebook)
            self._save_scores(task, notebook, outcome.verdict)
        except Exception as error:  # noqa: BLE001 - a bad outcome costs its submission a status, not the batch
            result.status = f"not graded: its result could not be recorded ({type(error).__name__})"
            return result
        result.status += self._late(task)
        if not self._feedback(task, outcome.verdict, redact.edition(notebook)):
            result.status += " (feedback failed)"
        return result

    def _late(self, task: Task) -> str:
        """The note " (late by H:MM:SS)" for a submission past the lesson's due date (the gradebook's, set in the formgrader
        or with `nbgrader db assignment add LESSON --duedate=...`); nbgrader's LateSubmissionPenalty applied any
        penalty when the scores were saved."""
        import datetime

        from nbgrader.api import Gradebook

        with Gradebook(self.db_url, self.coursedir.course_id) as gb:
            late = gb.find_submission(task.lesson, task.student).total_seconds_late
        return f" (late by {datetime.timedelta(seconds=round(late))})" if late > 0 else ""

    def _keep_log(self, task: Task, log: str) -> None:
        """reports/not-graded/STUDENT/LESSON.log: why a submission has no grade, in nbgrader's or the judge's words, for
        the instructor (never the student's feedback); removed once the submission is graded."""
        path = self.root / "reports" / "not-graded" / task.student / f"{task.lesson}.log"
        if not log:
            if path.is_file() and not path.is_symlink():
                path.unlink()
            return
        _folders(path.parent, self.root / "reports")
        _write(path, log.encode("utf-8", errors="replace"), 0o600)

    def _write_graded(self, task: Task, text: str) -> None:
        folder = self.root / "autograded" / task.student / task.lesson
        _folders(folder, self.root / "autograded")
        # nbgrader's exchange files travel with the graded notebook: generate_feedback copies them into feedback/,
        # where `nbgrader release_feedback` reads them (without them it fails, and no student gets feedback)
        written = {f"{task.lesson}.ipynb": text.encode("utf-8", errors="replace")}
        written |= {name: task.files[name] for name in EXCHANGE_FILES if name in task.files}
        for name in EXCHANGE_FILES:
            if name not in written:
                (folder / name).unlink(missing_ok=True)  # an earlier submission's
        for name, data in written.items():
            _write(folder / name, data, 0o644)

    def _save_scores(self, task: Task, notebook, verdict: dict) -> None:
        from nbgrader.api import Gradebook, MissingEntry
        from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

        timestamp = self.coursedir.get_existing_timestamp(str(self.root / "submitted" / task.student / task.lesson))
        resources = {"nbgrader": {"db_url": self.db_url, "assignment": task.lesson, "notebook": task.lesson,
                                  "student": task.student}}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module="nbgrader.api")  # SQLAlchemy's autoflush notes on nbgrader's code
            with Gradebook(self.db_url, self.coursedir.course_id) as gb:
                try:
                    gb.find_student(task.student)  # a roster's names are kept
                except MissingEntry:  # the formgrader shows "None, None" for a student without names
                    gb.add_student(task.student, last_name=task.student, first_name="")
                gb.update_or_create_submission(task.lesson, task.student, **({"timestamp": timestamp} if timestamp else {}))
            for step in (SaveAutoGrades, AssignLatePenalties):
                step(config=self.config).preprocess(notebook, resources)
        failed = [cell for cell, v in (verdict or {}).get("cells", {}).items() if not v["passed"]]
        if failed:  # a judged cell keeps the points the kernel's run gave it only if the judge passed it too
            with Gradebook(self.db_url, self.coursedir.course_id) as gb:
                for cell in failed:
                    gb.find_grade(cell, task.lesson, task.lesson, task.student).auto_score = 0.0
                gb.db.commit()

    def _feedback(self, task: Task, verdict: dict, lang: str = "en") -> bool:
        """The feedback page, rendered in a fork of the recorder's nbgrader server under a time and a memory limit
        (a submission decides how much there is to render)."""
        if self._feedback_server is None:
            self._feedback_server = forkserver.Server("nbgrader", os.path.join(self._scratch, "nbgrader.log"))
        path = os.path.join(self._scratch, "verdicts.json")
        with open(path, "w") as f:
            json.dump(verdict or {}, f)
        proc = nbgrader(self.root, "generate_feedback", task.lesson, f"--student={task.student}", "--force",
                        timeout=FEEDBACK_SECONDS, env={"GRADER_VERDICTS_FILE": path}, server=self._feedback_server,
                        memory_bytes=GRADER_MEMORY_BYTES)
        page = self.root / "feedback" / task.student / task.lesson / f"{task.lesson}.html"
        if proc.returncode != 0 or not page.is_file():
            return False
        # the template's own words in lang too (the cells' verdicts are in lang already: redact.py)
        page.write_text(redact.finished(page.read_text(encoding="utf-8"), lang), encoding="utf-8")
        return True

    def close(self) -> None:
        if self._feedback_server is not None:
            self._feedback_server.close()
            self._feedback_server = None
        shutil.rmtree(self._scratch, ignore_errors=True)


def _folders(folder: Path, top: Path) -> None:
    """`folder` and the folders between it and `top`, made by root: never through a symbolic link."""
    for part in [top, *reversed([p for p in folder.parents if top in p.parents]), folder]:
        if part.is_symlink():
            raise RuntimeError(f"{part} is a symbolic link")
        part.mkdir(exist_ok=True)


def _write(path: Path, data: bytes, mode: int) -> None:
    """`path` written whole or not at all (a partial file beside it, then renamed), never through a link."""
    partial = path.with_name(f".{path.name}.recording")
    partial.unlink(missing_ok=True)
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode), "wb") as f:
        f.write(data)
    os.replace(partial, path)
