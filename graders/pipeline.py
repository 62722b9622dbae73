"""The grading pipeline: release the student notebooks, autograde submissions, write feedback and grades.

    python -m graders.pipeline release [--root DIR]
    python -m graders.pipeline grade   [--root DIR] [--cell-timeout S] [--submission-timeout S]

`--root` is the course root (default: this repository). Each submission is autograded in its own
nbgrader process, so one that crashes or hangs costs that submission alone and the batch goes on.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG = Path(__file__).resolve().parent / "nbgrader_config"  # nbgrader appends ".py"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


@dataclass
class Result:
    student: str
    lesson: str
    status: str  # "graded", or why there is no grade


def lessons(root: Path) -> list[str]:
    """Assignment folders under solutions/: solutions/<lesson>/<lesson>.ipynb."""
    return sorted(d.name for d in (root / "solutions").iterdir() if (d / f"{d.name}.ipynb").is_file())


def nbgrader(root: Path, *args: str, timeout: float | None = None, cell_timeout: int | None = None):
    exe = Path(sys.executable).with_name("nbgrader")
    env = dict(os.environ)
    env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"  # nbgrader runs `alembic` from PATH
    if cell_timeout is not None:
        env["GRADER_CELL_TIMEOUT"] = str(cell_timeout)
    cmd = [str(exe), *args, f"--JupyterApp.config_file={CONFIG}", f"--CourseDirectory.root={root}"]
    try:
        return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        return subprocess.CompletedProcess(cmd, returncode=-1, stdout="", stderr=f"timed out after {err.timeout} s")


def _check(proc, what: str) -> None:
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def release(root: Path = REPO) -> list[Path]:
    """Regenerate notebooks/ from solutions/ (byte-reproducible)."""
    written = []
    for lesson in lessons(root):
        _check(nbgrader(root, "generate_assignment", lesson, "--force", "--no-db"), f"release of {lesson}")
        written.append(root / "notebooks" / lesson / f"{lesson}.ipynb")
    return written


def grade(root: Path = REPO, cell_timeout: int = 300, submission_timeout: int = 1800) -> list[Result]:
    """Autograde everything under submitted/<student>/<lesson>/, write feedback/ and grades.csv."""
    course_lessons = lessons(root)
    for lesson in course_lessons:  # records each lesson's grade cells in the gradebook
        _check(nbgrader(root, "generate_assignment", lesson, "--force"), f"generate_assignment {lesson}")
    results = []
    submitted = root / "submitted"
    students = sorted(d.name for d in submitted.iterdir() if d.is_dir()) if submitted.is_dir() else []
    for student in students:
        if not STUDENT_ID.match(student):
            results.append(Result(student, "", "skipped: not a valid student id"))
            continue
        for lesson in course_lessons:
            if (submitted / student / lesson).is_dir():
                results.append(_grade_one(root, student, lesson, cell_timeout, submission_timeout))
    write_grades_csv(root, results)
    return results


def _grade_one(root: Path, student: str, lesson: str, cell_timeout: int, submission_timeout: int) -> Result:
    proc = nbgrader(root, "autograde", lesson, f"--student={student}", "--create", "--force",
                    timeout=submission_timeout, cell_timeout=cell_timeout)
    graded = root / "autograded" / student / lesson / f"{lesson}.ipynb"
    if proc.returncode != 0 or not graded.is_file():
        return Result(student, lesson, "not graded: " + _reason(proc))
    feedback = nbgrader(root, "generate_feedback", lesson, f"--student={student}", "--force", timeout=600)
    status = "graded" if feedback.returncode == 0 else "graded (feedback failed)"
    return Result(student, lesson, status)


def _reason(proc) -> str:
    text = proc.stdout + proc.stderr
    if "timed out" in text:
        return "the submission ran past its time limit"
    if "DeadKernelError" in text or "Kernel died" in text:
        return "the kernel died"
    lines = [l for l in text.splitlines() if "ERROR" in l]
    return lines[-1][:200] if lines else f"nbgrader exited with {proc.returncode}"


def scores(root: Path, student: str, lesson: str) -> dict[str, float] | None:
    """Points per graded cell of one submission, from the gradebook (None if it was not graded)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        try:
            notebook = gb.find_submission_notebook(lesson, lesson, student)
        except MissingEntry:
            return None
        return {g.name: float(g.score) for g in notebook.grades}


def max_scores(root: Path, lesson: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        notebook = gb.find_notebook(lesson, lesson)
        return {cell.name: float(cell.max_score) for cell in notebook.grade_cells}


def write_grades_csv(root: Path, results: list[Result]) -> Path:
    path = root / "grades.csv"
    lesson_cells = {lesson: max_scores(root, lesson) for lesson in lessons(root)}
    cells = [f"{lesson}:{cell}" for lesson, by_cell in lesson_cells.items() for cell in by_cell]
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["student", "lesson", "status", "score", "max_score", *cells])
        for r in results:
            maximum = lesson_cells.get(r.lesson, {})
            got = scores(root, r.student, r.lesson) if r.status.startswith("graded") else None
            per_cell = {f"{r.lesson}:{k}": v for k, v in (got or dict.fromkeys(maximum, 0.0)).items()}
            out.writerow([r.student, r.lesson, r.status, sum(per_cell.values()), sum(maximum.values()),
                          *[per_cell.get(c, "") for c in cells]])
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["release", "grade"])
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--cell-timeout", type=int, default=300)
    parser.add_argument("--submission-timeout", type=int, default=1800)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.command == "release":
        for path in release(root):
            print("released", path.relative_to(root))
        return 0
    results = grade(root, args.cell_timeout, args.submission_timeout)
    for r in results:
        print(f"{r.student:<20} {r.lesson:<24} {r.status}")
    print(f"grades: {root / 'grades.csv'}  feedback: {root / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
