"""Benchmark (`make bench`): each lesson's execution time, and the grading time per notebook.

Prints measured figures; nothing here asserts a speed. Run on the machine you want figures for.
"""

import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from graders import pipeline  # noqa: E402
from helpers import hardware  # noqa: E402


def execute_seconds(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def grading_seconds(lessons: list[str], copies: int = 2) -> dict[str, float]:
    """Seconds per graded submission, per lesson: `copies` students hand in the solution."""
    per_lesson = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "solutions", root / "solutions")
        for lesson in lessons:
            shutil.rmtree(root / "submitted", ignore_errors=True)
            for i in range(copies):
                folder = root / "submitted" / f"student{i}" / lesson
                folder.mkdir(parents=True)
                shutil.copy(REPO / "solutions" / lesson / f"{lesson}.ipynb", folder)
            start = time.perf_counter()
            results = pipeline.grade(root)
            assert all(r.status == "graded" for r in results), results
            per_lesson[lesson] = (time.perf_counter() - start) / copies
    return per_lesson


def main() -> None:
    print(hardware.detect().summary(), "\n")
    lessons = pipeline.lessons(REPO)
    grading = grading_seconds(lessons)
    print(f"{'lesson':<24}{'execute (s)':>12}{'grade per submission (s)':>27}")
    for lesson in lessons:
        seconds = execute_seconds(REPO / "solutions" / lesson / f"{lesson}.ipynb")
        print(f"{lesson:<24}{seconds:>12.1f}{grading[lesson]:>27.1f}")


if __name__ == "__main__":
    main()
