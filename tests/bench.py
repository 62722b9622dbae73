"""Benchmark (`make bench`): each lesson's execution time, and grading a synthetic class.

    python tests/bench.py [--students N] [--lessons all|01-dataparallel,...] [--jobs 1 2 ...] [--no-execute]

Prints measured figures; nothing here asserts a speed. The class hands in solutions (every third
student a blank notebook) so that grading does the full work.
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from graders import pipeline, sandbox  # noqa: E402
from helpers import hardware  # noqa: E402


def execute_seconds(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def grade_class(students: int, lessons: list[str], jobs: int) -> tuple[float, list]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "solutions", root / "solutions")
        for i in range(students):
            for lesson in lessons:
                folder = root / "submitted" / f"student{i:03d}" / lesson
                folder.mkdir(parents=True)
                source = REPO / ("notebooks" if i % 3 == 2 else "solutions") / lesson / f"{lesson}.ipynb"
                shutil.copy(source, folder)
        start = time.perf_counter()
        results = pipeline.grade(root, jobs=jobs, sandboxed=sandbox.available() is None)
        return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--lessons", default="01-dataparallel")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-execute", action="store_true", help="skip timing the notebooks themselves")
    args = parser.parse_args()
    all_lessons = pipeline.lessons(REPO)
    lessons = all_lessons if args.lessons == "all" else args.lessons.split(",")
    print(hardware.detect().summary(), "\n")
    if not args.no_execute:
        print(f"{'lesson':<24}{'execute (s)':>12}")
        for lesson in all_lessons:
            print(f"{lesson:<24}{execute_seconds(REPO / 'solutions' / lesson / f'{lesson}.ipynb'):>12.1f}")
        print()
    print(f"grading {args.students} students x {len(lessons)} lesson(s) "
          f"({'sandboxed' if sandbox.available() is None else 'UNSANDBOXED: ' + sandbox.available()})")
    print(f"{'jobs':>5}{'total (s)':>12}{'per submission (s)':>22}{'mean grading time (s)':>24}")
    for jobs in args.jobs:
        total, results = grade_class(args.students, lessons, jobs)
        n = len(results)
        assert all(r.status.startswith("graded") for r in results), [r.status for r in results]
        print(f"{jobs:>5}{total:>12.1f}{total / n:>22.1f}{sum(r.seconds for r in results) / n:>24.1f}")
        for lesson in lessons:  # a submission's grading time includes its share of the judge's first references
            times = [r.seconds for r in results if r.lesson == lesson]
            print(f"{'':>5}  {lesson:<24} mean {sum(times) / len(times):.1f} s over {len(times)} submission(s)")


if __name__ == "__main__":
    main()
