"""A student's self-check: their own notebook graded exactly as the course's grader grades it (graders/pipeline.py:
a fresh kernel, in the sandbox where this machine has one, the hidden tests, the judge, the feedback page).

    python -m graders.selfcheck NOTEBOOK [--unsandboxed] [--out FOLDER]      (make check NOTEBOOK=...)

The notebook is read as saved: its lesson is the one whose graded cells it has. Grading happens in a scratch copy
of the course; nothing of the checkout changes but FOLDER (default reports/self-check/), which gets the feedback page.
Without a sandbox (not root, or no bubblewrap) the notebook runs with the student's own rights, as it does when they
run it themselves; the points are the same.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from graders import pipeline, sandbox
from graders.course import REPO, lessons
from graders.grades import max_scores, scores

STUDENT = "self-check"


@dataclass
class Report:
    lesson: str
    status: str
    flags: tuple[str, ...]
    points: dict[str, tuple[float, float]]  # exercise (grade id) -> (scored, out of)
    feedback: Path | None
    sandboxed: bool

    @property
    def total(self) -> tuple[float, float]:
        return sum(p for p, _ in self.points.values()), sum(m for _, m in self.points.values())


def lesson_of(notebook: Path, root: Path = REPO) -> str:
    """The lesson whose graded cells (nbgrader grade ids) the notebook shares most of."""
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception as error:  # noqa: BLE001 - not JSON, not a notebook, not UTF-8
        raise ValueError(f"notebook {str(notebook)!r} cannot be read as a notebook ({type(error).__name__})") from None
    ids = _grade_ids(nb)
    shared = {lesson: len(ids & _grade_ids(nbformat.read(root / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)))
              for lesson in lessons(root)}
    best = max(shared, key=shared.get)
    if not shared[best]:
        raise ValueError(f"notebook {str(notebook)!r} has none of the graded cells of the course's lessons {sorted(shared)}")
    return best


def _grade_ids(nb) -> set[str]:
    return {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if isinstance(c.metadata.get("nbgrader"), dict) and c.metadata["nbgrader"].get("grade_id")}


def check(notebook: Path, sandboxed: bool | None = None, out: Path | None = None, log=None) -> Report:
    """Grade `notebook` as the course's grader would. `sandboxed`: None uses the sandbox where this machine has one."""
    notebook = Path(notebook)
    if not notebook.is_file():
        raise ValueError(f"notebook must be a notebook file, got {str(notebook)!r}")
    lesson = lesson_of(notebook)
    if sandboxed is None:
        sandboxed = sandbox.available() is None
    out = Path(out) if out is not None else REPO / "reports" / "self-check"
    with tempfile.TemporaryDirectory(prefix="self-check-") as scratch:
        root = Path(scratch)
        shutil.copytree(REPO / "solutions" / lesson, root / "solutions" / lesson)
        submitted = root / "submitted" / STUDENT / lesson
        submitted.mkdir(parents=True)
        shutil.copyfile(notebook, submitted / f"{lesson}.ipynb")
        [result] = pipeline.grade(root, sandboxed=sandboxed, students=[STUDENT], only_lessons=[lesson], log=log)
        got = scores(root, STUDENT, lesson) or {}
        points = {cell: (got.get(cell, 0.0), top) for cell, top in max_scores(root, lesson).items()}
        page = root / "feedback" / STUDENT / lesson / f"{lesson}.html"
        feedback = None
        if page.is_file():
            out.mkdir(parents=True, exist_ok=True)
            feedback = out / f"{lesson}.html"
            shutil.copyfile(page, feedback)
    return Report(lesson, result.status, result.flags, points, feedback, sandboxed)


def describe(report: Report) -> str:
    lines = [f"{report.lesson}: {report.status}" + ("" if report.sandboxed else " (run without the sandbox: with your own rights)")]
    for cell, (scored, top) in report.points.items():
        mark = "ok  " if scored == top else "FAIL"
        lines.append(f"  {mark} {cell.removesuffix('_tests'):<28} {scored:g} / {top:g}")
    scored, top = report.total
    lines.append(f"  total {scored:g} / {top:g}")
    if report.flags:
        lines.append("  flagged for a person to look at: " + "; ".join(report.flags))
    if report.feedback:
        lines.append(f"feedback page (what each failed test says): {report.feedback}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--unsandboxed", action="store_true", help="run the notebook without the sandbox")
    parser.add_argument("--out", type=Path, default=None, help="where the feedback page goes (default reports/self-check/)")
    args = parser.parse_args(argv)
    try:
        report = check(args.notebook, sandboxed=False if args.unsandboxed else None, out=args.out)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    print(describe(report))
    return 0 if report.status.startswith("graded") else 1


if __name__ == "__main__":
    sys.exit(main())
