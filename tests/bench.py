"""Benchmark (`make bench`): each lesson's execution time, and grading a synthetic class, lesson by lesson.

    python tests/bench.py [--students N] [--lessons all|01-dataparallel,...] [--jobs 1 2 ...] [--workers 1 2 4]
                          [--no-execute] [--run-demonstrations]

Prints measured figures; nothing here asserts a speed. The class hands in solutions (every third student a blank
notebook) so that grading does the full work; grading leaves the lessons' demonstrations out, as `make grade` does,
unless --run-demonstrations. `--jobs` grades with this process's threads; `--workers N` on a Dask LocalCluster of
N worker processes (one submission at a time each).

Per lesson: a submission's grading time on its worker (median and 95th percentile: execution in the sandbox and
the judge), its CPU-seconds (the worker's: nbgrader, the kernel and what it starts, the judge; and the
coordinator's: recording and the feedback page), and the coordinator's seconds per submission, which bound the
rate of any number of workers (it records one submission at a time; medians: its first submission also starts
its feedback server). Then a projection for 1,000 students: the class's CPU on 16 and 64 cores like these, or the
coordinator's own time if that is longer. A lesson's grading setup (the gradebook, the lessons' cells) is left out;
the worker's CPU is a mean, of which its servers' start and the judge's first references are a few submissions' share,
and it is sampled (TreeCPU: a little low).
"""

import argparse
import math
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from graders import course, pipeline, record, sandbox  # noqa: E402
from helpers import hardware  # noqa: E402

STUDENTS, CORES = 1000, (16, 64)


def execute_seconds(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def cpu_seconds(who=resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class TreeCPU:
    """The CPU-seconds of this process and of every process below it, sampled while grading runs: a process's own
    time as last seen before it ended. (getrusage misses most of it: the jail's kernel and what it starts end killed
    with their namespace, so none of ours ever waits for them.) A process that lives less than INTERVAL, or the
    last INTERVAL of one, goes uncounted; the sampling's own CPU is left out."""

    INTERVAL = 0.2

    def __init__(self):
        self.seen, self.total, self._stop = {}, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)

    def __enter__(self):
        self._start, self._sampling = cpu_seconds(), 0.0
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.total = cpu_seconds() - self._start - self._sampling + sum(self.seen.values())

    def _sample_until_stopped(self) -> None:
        start, me = cpu_seconds(resource.RUSAGE_THREAD), psutil.Process()
        while not self._stop.wait(self.INTERVAL):
            self._sample(me)
        self._sample(me)
        self._sampling = cpu_seconds(resource.RUSAGE_THREAD) - start

    def _sample(self, me) -> None:
        for process in me.children(recursive=True):
            try:
                with process.oneshot():
                    times, key = process.cpu_times(), (process.pid, process.create_time())
                self.seen[key] = times.user + times.system
            except psutil.Error:  # it ended meanwhile
                pass


def all_cpu_seconds() -> float:
    """This process's CPU and that of its children that ended (the grading servers, kernels and forks they waited
    for end with the grading run)."""
    return cpu_seconds() + cpu_seconds(resource.RUSAGE_CHILDREN)


class TimedRecorder(record.Recorder):
    """The coordinator, timed: its setup (the lessons' cells in the gradebook) and, per submission, the seconds and
    CPU-seconds of recording it (its own thread, and the fork that renders the feedback page)."""

    def __init__(self, root):
        start = all_cpu_seconds()
        super().__init__(root)
        self.setup_cpu, self.record_seconds, self.record_cpu = all_cpu_seconds() - start, {}, {}

    def generate_assignment(self, lesson):
        start = all_cpu_seconds()
        super().generate_assignment(lesson)
        self.setup_cpu += all_cpu_seconds() - start

    def record(self, task, outcome):
        start, thread, feedback = time.perf_counter(), cpu_seconds(resource.RUSAGE_THREAD), self._feedback_cpu()
        result = super().record(task, outcome)
        self.record_seconds[task.student, task.lesson] = time.perf_counter() - start
        self.record_cpu[task.student, task.lesson] = (cpu_seconds(resource.RUSAGE_THREAD) - thread
                                                      + self._feedback_cpu() - feedback)
        return result

    def _feedback_cpu(self) -> float:
        proc = self._feedback_server and self._feedback_server.proc
        if proc is None:
            return 0.0
        times = psutil.Process(proc.pid).cpu_times()
        return times.user + times.system + times.children_user + times.children_system


def grade_lesson(students: int, lesson: str, run_demonstrations: bool, **where) -> dict:
    """Grade one lesson's class; its figures per submission."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "solutions", root / "solutions")
        for i in range(students):
            folder = root / "submitted" / f"student{i:03d}" / lesson
            folder.mkdir(parents=True)
            shutil.copy(REPO / ("notebooks" if i % 3 == 2 else "solutions") / lesson / f"{lesson}.ipynb", folder)
        recorders = []
        pipeline.Recorder = lambda root: recorders.append(TimedRecorder(root)) or recorders[-1]
        try:
            start = time.perf_counter()
            with TreeCPU() as used:
                results = pipeline.grade(root, sandboxed=sandbox.available() is None, run_demonstrations=run_demonstrations,
                                         lesson_timeouts={lesson: 600}, **where)
            wall, cpu = time.perf_counter() - start, used.total
        finally:
            pipeline.Recorder = record.Recorder
    assert all(r.status.startswith("graded") for r in results), [r.status for r in results]
    coordinator = recorders[0]
    n, worker_seconds = len(results), sorted(r.seconds for r in results)
    return {"n": n, "wall": wall, "median": statistics.median(worker_seconds), "p95": _p95(worker_seconds),
            "worker_cpu": (cpu - coordinator.setup_cpu - sum(coordinator.record_cpu.values())) / n,
            "coordinator_cpu": statistics.median(coordinator.record_cpu.values()),  # the first starts its server
            "coordinator_seconds": statistics.median(coordinator.record_seconds.values())}


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, math.ceil(0.95 * len(values)) - 1)]


def print_lessons(figures: dict) -> None:
    print(f"  {'lesson':<20}{'n':>3}{'s/sub median':>14}{'p95':>7}{'CPU-s/sub worker':>18}{'coordinator':>13}"
          f"{'coord. s/sub':>14}{'wall/sub':>10}")
    for lesson, f in figures.items():
        print(f"  {lesson:<20}{f['n']:>3}{f['median']:>14.1f}{f['p95']:>7.1f}{f['worker_cpu']:>18.1f}"
              f"{f['coordinator_cpu']:>13.2f}{f['coordinator_seconds']:>14.2f}{f['wall'] / f['n']:>10.1f}")


def project(figures: dict, all_lessons: list[str]) -> None:
    """1,000 students: all their CPU spread over the cores, or the coordinator recording one submission after the
    other, whichever takes longer."""
    measured = f"{len(figures)} lesson(s)" if len(figures) < len(all_lessons) else f"the {len(figures)} lessons"
    cpu = STUDENTS * sum(f["worker_cpu"] + f["coordinator_cpu"] for f in figures.values())
    coordinator = STUDENTS * sum(f["coordinator_seconds"] for f in figures.values())
    print(f"  projection, {STUDENTS:,} students x {measured} ({STUDENTS * len(figures):,} submissions): "
          f"{cpu / 3600:.1f} CPU-hours; the coordinator alone {coordinator / 3600:.2f} h")
    for cores in CORES:
        hours = max(cpu / cores, coordinator) / 3600
        bound = "the coordinator" if coordinator > cpu / cores else "CPU"
        print(f"    {cores:>3} cores: {hours:5.2f} h ({hours * 60:.0f} min, bound by {bound})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--lessons", default="01-dataparallel")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workers", type=int, nargs="*", default=[],
                        help="also grade on a Dask LocalCluster of N worker processes, for each N given")
    parser.add_argument("--no-execute", action="store_true", help="skip timing the notebooks themselves")
    parser.add_argument("--run-demonstrations", action="store_true",
                        help="grade with the lessons' demonstration cells run (make grade leaves them out)")
    args = parser.parse_args()
    all_lessons = course.lessons(REPO)
    lessons = all_lessons if args.lessons == "all" else args.lessons.split(",")
    if unknown := sorted(set(lessons) - set(all_lessons)):
        parser.error(f"--lessons names {unknown}; there are: {all_lessons}")
    print(hardware.detect().summary(), "\n")
    if not args.no_execute:
        print(f"{'lesson':<24}{'execute (s)':>12}")
        for lesson in lessons:  # the ones asked for, not every lesson
            print(f"{lesson:<24}{execute_seconds(REPO / 'solutions' / lesson / f'{lesson}.ipynb'):>12.1f}")
        print()
    how = "sandboxed" if sandbox.available() is None else "UNSANDBOXED: " + sandbox.available()
    runs = "demonstrations run" if args.run_demonstrations else "demonstrations left out"
    print(f"grading {args.students} students per lesson ({how}; {runs})")
    for kind, count in [("jobs", j) for j in args.jobs] + [("workers", w) for w in args.workers]:
        where = {"jobs": count} if kind == "jobs" else {"scheduler": f"local:{count}"}
        figures = {lesson: grade_lesson(args.students, lesson, args.run_demonstrations, **where) for lesson in lessons}
        print(f"{kind} {count}:")
        print_lessons(figures)
        project(figures, all_lessons)


if __name__ == "__main__":
    main()
