"""Benchmark (`make bench`): each lesson's execution time, and grading a synthetic class.

    python tests/bench.py [--students N] [--lessons all|01-dataparallel,...] [--jobs 1 2 ...] [--workers 1 2 4]
                          [--no-execute]

Prints measured figures; nothing here asserts a speed. The class hands in solutions (every third
student a blank notebook) so that grading does the full work. `--jobs` grades with this process's
threads; `--workers N` on a Dask LocalCluster of N worker processes (one submission at a time each),
and projects the rate to a 1,000-student class.
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
from graders import course, pipeline, sandbox  # noqa: E402
from helpers import hardware  # noqa: E402


def execute_seconds(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def grade_class(students: int, lessons: list[str], jobs: int = 1, scheduler: str | None = None) -> tuple[float, list]:
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
        results = pipeline.grade(root, jobs=jobs, sandboxed=sandbox.available() is None, scheduler=scheduler)
        return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--lessons", default="01-dataparallel")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workers", type=int, nargs="*", default=[],
                        help="also grade on a Dask LocalCluster of N worker processes, for each N given")
    parser.add_argument("--no-execute", action="store_true", help="skip timing the notebooks themselves")
    args = parser.parse_args()
    all_lessons = course.lessons(REPO)
    lessons = all_lessons if args.lessons == "all" else args.lessons.split(",")
    print(hardware.detect().summary(), "\n")
    if not args.no_execute:
        print(f"{'lesson':<24}{'execute (s)':>12}")
        for lesson in all_lessons:
            print(f"{lesson:<24}{execute_seconds(REPO / 'solutions' / lesson / f'{lesson}.ipynb'):>12.1f}")
        print()
    print(f"grading {args.students} students x {len(lessons)} lesson(s) "
          f"({'sandboxed' if sandbox.available() is None else 'UNSANDBOXED: ' + sandbox.available()})")
    print(f"{'':>12}{'total (s)':>12}{'per submission (s)':>22}{'submissions/min':>18}{'mean grading time (s)':>24}")
    rates = {}
    for kind, count in [("jobs", j) for j in args.jobs] + [("workers", w) for w in args.workers]:
        total, results = grade_class(args.students, lessons, **({"jobs": count} if kind == "jobs" else {"scheduler": f"local:{count}"}))
        n = len(results)
        assert all(r.status.startswith("graded") for r in results), [r.status for r in results]
        rates[kind, count] = n / total * 60
        print(f"{kind:>8}{count:>4}{total:>12.1f}{total / n:>22.1f}{rates[kind, count]:>18.1f}{sum(r.seconds for r in results) / n:>24.1f}")
        for lesson in lessons:  # a submission's grading time includes its share of the judge's first references
            times = [r.seconds for r in results if r.lesson == lesson]
            print(f"{'':>12}  {lesson:<24} mean {sum(times) / len(times):.1f} s over {len(times)} submission(s)")
    if args.workers:
        project(rates, sorted(args.workers), len(lessons))


def project(rates: dict, workers: list[int], n_lessons: int) -> None:
    """The measured rate per worker, scaled to a 1,000-student class on more workers like these (one core each)."""
    per_worker = rates["workers", workers[0]] / workers[0]
    submissions = 1000 * n_lessons
    print(f"\nprojection: 1,000 students x {n_lessons} lesson(s) = {submissions} submissions of this mix; "
          f"one worker here grades {per_worker:.2f}/min")
    for n in workers[1:]:
        print(f"  measured: {n} workers here {rates['workers', n]:.2f}/min, {rates['workers', n] / per_worker / n:.0%} of linear")
    for n in (2, 16, 64, 256):
        minutes = submissions / (per_worker * n)
        print(f"  {n:>4} workers (one per core of machines like this one, linear): {minutes / 60:5.1f} h ({minutes:.0f} min)")


if __name__ == "__main__":
    main()
