"""What the gradebook says, for people: points per exercise (`scores`, `max_scores`), grades.csv (one row per
submission, every field in the grader's own words or numbers, none a spreadsheet would run as a formula) and
reports/points-lost.png.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import os
from pathlib import Path

from graders.course import REPO, lessons
from graders.submission import Result

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
    """grades.csv: this run's results, and the rows of an earlier grades.csv for the submissions this run did not
    grade (grading one student or one lesson keeps the others'). Scores always come from the gradebook; the columns
    are the exercises of the lessons that have rows."""
    path = root / "grades.csv"
    with _locked(root):
        graded = {(r.student, r.lesson) for r in results}
        rows = [r for r in _earlier_results(path) if (r.student, r.lesson) not in graded] + list(results)
        rows.sort(key=lambda r: (r.student, r.lesson))
        shown = {r.lesson for r in rows}
        lesson_cells = {lesson: max_scores(root, lesson) for lesson in lessons(root) if lesson in shown}
        cells = [f"{lesson}:{cell}" for lesson, by_cell in lesson_cells.items() for cell in by_cell]
        partial = path.with_name(".grades.csv.writing")
        with open(partial, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow([*COLUMNS, *cells])
            for r in rows:
                maximum = lesson_cells.get(r.lesson, {})
                got = scores(root, r.student, r.lesson) if r.status.startswith("graded") else None
                per_cell = {f"{r.lesson}:{k}": v for k, v in (got or dict.fromkeys(maximum, 0.0)).items()}
                out.writerow([_inert(v) for v in (r.student, r.lesson, r.status, "; ".join(r.flags), sum(per_cell.values()),
                                                  sum(maximum.values()), round(r.seconds, 1), *[per_cell.get(c, "") for c in cells])])
        os.replace(partial, path)
    return path


COLUMNS = ("student", "lesson", "status", "flags", "score", "max_score", "seconds")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet would run as a formula


def _earlier_results(path: Path) -> list[Result]:
    """The submissions an earlier grades.csv lists, as Results (its scores are read again from the gradebook)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [Result(_plain(r["student"]), _plain(r["lesson"]), _plain(r["status"]), float(r["seconds"] or 0),
                   tuple(flag for flag in _plain(r["flags"]).split("; ") if flag))
            for r in rows if all(r.get(column) is not None for column in COLUMNS)]


def _plain(value: str) -> str:
    """A field as the grader wrote it, without the quote `_inert` put before it."""
    return value[1:] if value.startswith("'") and value[1:].startswith(FORMULA_STARTS) else value


@contextlib.contextmanager
def _locked(root: Path):
    """One writer of grades.csv at a time (two `make grade`s, the formgrader's button)."""
    with open(root / ".grades.csv.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _inert(value):
    """A CSV field a spreadsheet shows as text: one starting like a formula (=, +, -, @) gets a quote first."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def report(root: Path = REPO) -> Path:
    """reports/points-lost.png: per exercise, how many students lost points there."""
    import matplotlib.pyplot as plt

    fig = points_lost_figure(root)
    out = root / "reports" / "points-lost.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def points_lost_figure(root: Path):
    """The figure of `report`: a bar per exercise, the number of students (whole ones) who lost points there."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    with open(root / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    by_lesson: dict[str, dict[str, int]] = {}
    for lesson in lessons(root):
        lesson_rows = [r for r in rows if r["lesson"] == lesson]
        by_lesson[lesson] = {cell.removesuffix("_tests"): sum(float(r[f"{lesson}:{cell}"] or 0) < top for r in lesson_rows)
                             for cell, top in max_scores(root, lesson).items()} if lesson_rows else {}
    shown = {k: v for k, v in by_lesson.items() if v}
    fig, axes = plt.subplots(len(shown) or 1, 1, figsize=(8, 2.2 * max(1, len(shown))), squeeze=False)
    for ax, (lesson, lost) in zip(axes[:, 0], shown.items()):
        ax.barh(list(lost), list(lost.values()), color="C3")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole students (one alone drew ticks at 0.2, 0.4, ...)
        ax.set_title(f"{lesson}: students who lost points, per exercise", fontsize=9)
        ax.invert_yaxis()
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    return fig
