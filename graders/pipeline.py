"""The grading pipeline: release the student notebooks, autograde submissions, write feedback and grades.

    python -m graders.pipeline release [--root DIR]
    python -m graders.pipeline gradebook [--root DIR]   (the lessons in gradebook.db, for the formgrader)
    python -m graders.pipeline grade   [--root DIR] [--jobs N] [--scheduler ADDRESS] [--cell-timeout S] [--unsandboxed]
                                       [--run-demonstrations]

`--root` is the course root (default: this repository). Each submission is autograded by a worker in its
own nbgrader process, in a private copy of the course folder and gradebook, its code in the bubblewrap
sandbox of graders/sandbox.py. A kernel crash costs the cell that caused it (the submission is graded
again with that cell skipped); a hang costs the cell that hangs; nothing stops the batch. The lesson's
demonstrations (cells its source tags so, graders/demonstrations.py) are left out where a submission kept them
unchanged and nothing after them needs them, unless `--run-demonstrations`. The workers are
`--jobs N` threads of this process, or the workers of a Dask cluster (`--scheduler`, graders/cluster.py).
This process, the coordinator, is the only one that writes the gradebook, autograded/, feedback/ and
grades.csv: the workers send back data (the graded notebook and the judge's verdict).

The hidden tests' verdicts come from graders/judge.py, a process that never runs student code, on the
data the student's kernel collected: a cell scores its points only if the kernel ran it without error
and the judge passed it. A submission whose kernel was tampered with (graders/execute.py's canaries,
the judge's findings) is flagged in grades.csv with the reasons.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from graders import sandbox
from graders.course import REPO, lessons
from graders.grades import report, write_grades_csv
from graders.intake import submissions, submitters
from graders.record import Recorder
from graders.release import release
from graders.slots import UID_BLOCK
from graders.submission import Result
from graders.worker import run_here

class SandboxUnavailable(RuntimeError):
    pass


class UnknownChoice(ValueError):
    """A student or lesson to grade that the course does not have."""


def grade(root: Path = REPO, cell_timeout: int = 300, submission_timeout: int = 3600, jobs: int = 1,
          sandboxed: bool = True, scheduler=None, log=None, lesson_timeouts: dict[str, int] | None = None,
          insecure_tcp: bool = False, certs: Path | None = None, run_demonstrations=False, students=None,
          only_lessons=None) -> list[Result]:
    """Autograde everything under submitted/<student>/<lesson>/, write feedback/, grades.csv and a report plot.
    `students`, `only_lessons`: grade these students' submissions, of these lessons, only (default: all); grades.csv
    keeps the rows of the others.
    `lesson_timeouts` gives some lessons a cell timeout of their own (seconds), instead of `cell_timeout`.
    `run_demonstrations`: True runs the lessons' demonstrations too, a collection of student ids in theirs only.

    Workers execute and judge the submissions: `jobs` threads of this process, or the workers of the Dask
    cluster at `scheduler` (graders/cluster.py). This process is the only one that writes the gradebook,
    autograded/, feedback/ and grades.csv, one submission at a time as the results come back."""
    if sandboxed and scheduler is None and (why := sandbox.available()):
        raise SandboxUnavailable(f"cannot sandbox student code: {why}. Fix that, or grade with --unsandboxed "
                                 "(make grade UNSANDBOXED=1) to run submissions with your own rights.")
    if jobs > UID_BLOCK:
        raise ValueError(f"jobs must be at most {UID_BLOCK}, got {jobs}")
    course_lessons = _chosen("only_lessons", only_lessons, lessons(root))
    students = None if students is None else _chosen("students", students, submitters(root))
    recorder = Recorder(root)
    try:
        return _grade_with(recorder, root, course_lessons, cell_timeout, submission_timeout, jobs, sandboxed,
                           scheduler, log, lesson_timeouts, insecure_tcp, certs, run_demonstrations, students)
    finally:
        recorder.close()


def _chosen(name: str, chosen, available: list[str]) -> list[str]:
    """`available`, or the part of it `chosen` names (a ValueError naming `name` for any it lacks)."""
    if chosen is None:
        return available
    if isinstance(chosen, str) or not all(isinstance(c, str) for c in chosen):
        raise UnknownChoice(f"{name} must be a list of names, got {chosen!r}")
    unknown = sorted(set(chosen) - set(available))
    if unknown or not chosen:
        raise UnknownChoice(f"{name} names {unknown or 'nothing'}; there are: {available}")
    return [a for a in available if a in set(chosen)]


def _grade_with(recorder, root, course_lessons, cell_timeout, submission_timeout, jobs, sandboxed, scheduler, log,
                lesson_timeouts, insecure_tcp, certs, run_demonstrations, students) -> list[Result]:
    for lesson in course_lessons:  # records each lesson's grade cells in the gradebook
        recorder.generate_assignment(lesson)
    unknown = set(lesson_timeouts or {}) - set(lessons(root))
    if unknown:
        raise ValueError(f"lesson_timeouts names lessons the course does not have: {sorted(unknown)}")
    timeouts = {lesson: (lesson_timeouts or {}).get(lesson, cell_timeout) for lesson in course_lessons}
    results, tasks = submissions(root, course_lessons, timeouts, submission_timeout, sandboxed, run_demonstrations,
                                 students)
    template = recorder.template()
    if scheduler is None:
        outcomes = run_here(tasks, template, jobs, sandboxed, log)
    else:
        from graders import cluster

        outcomes = cluster.run(scheduler, tasks, template, log, insecure_tcp=insecure_tcp, certs=certs)
    for number, (task, outcome) in enumerate(outcomes, 1):
        result = recorder.record(task, outcome)
        results.append(result)
        if log:
            log(f"[{number}/{len(tasks)}] {result.student:<20} {result.lesson:<24} {result.status}"
                + (f"  ({outcome.worker})" if outcome.worker else "")
                + (f"  (why: reports/not-graded/{task.student}/{task.lesson}.log)" if outcome.log and
                   not result.status.startswith("graded") else ""))
    order = {(t.student, t.lesson): i for i, t in enumerate(tasks)}
    results.sort(key=lambda r: order.get((r.student, r.lesson), -1))
    write_grades_csv(root, results)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["release", "grade", "gradebook"])
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at the same time")
    parser.add_argument("--cell-timeout", type=int, default=300)
    parser.add_argument("--submission-timeout", type=int, default=3600)
    parser.add_argument("--unsandboxed", action="store_true", help="run student code without the sandbox (unsafe)")
    parser.add_argument("--student", action="append", dest="students", metavar="ID",
                        help="grade this student's submissions only (again for more students; default: everybody's)")
    parser.add_argument("--lesson", action="append", dest="lessons", metavar="LESSON",
                        help="grade this lesson only (again for more lessons; default: every lesson)")
    parser.add_argument("--run-demonstrations", action="store_true",
                        help="run the lessons' demonstration cells too (by default they are left out where a "
                             "submission kept them unchanged: they change no grade)")
    parser.add_argument("--scheduler", default=os.environ.get("SCHEDULER") or None,
                        help="grade on a Dask cluster: tls://host:8786 (mutual TLS, --certs), or local:N for N local "
                             "worker processes (default: --jobs threads of this process)")
    parser.add_argument("--certs", type=Path, default=None,
                        help="the Dask cluster's certificates, from `make certs` (default: certs/ of this checkout)")
    parser.add_argument("--insecure-tcp", action="store_true",
                        help="allow a plain tcp:// scheduler: whoever reaches it runs code on the workers (unsafe)")
    args = parser.parse_args(argv)
    if args.command == "grade" and args.scheduler:  # refused now, not after preparing the lessons
        from graders import cluster

        try:
            cluster.check_scheduler(args.scheduler, args.insecure_tcp, args.certs)
        except ValueError as error:
            parser.error(str(error))
    root = args.root.resolve()
    if args.command == "release":
        for path in release(root):
            print("released", path.relative_to(root))
        return 0
    if args.command == "gradebook":  # the lessons in gradebook.db, for the formgrader (make instructor)
        recorder = Recorder(root)
        try:
            for lesson in lessons(root):
                recorder.generate_assignment(lesson)
        finally:
            recorder.close()
        return 0
    try:
        results = grade(root, args.cell_timeout, args.submission_timeout, args.jobs, sandboxed=not args.unsandboxed,
                        scheduler=args.scheduler, log=lambda line: print(line, flush=True),
                        insecure_tcp=args.insecure_tcp, certs=args.certs, run_demonstrations=args.run_demonstrations,
                        students=args.students, only_lessons=args.lessons)
    except (SandboxUnavailable, UnknownChoice) as error:
        print(error, file=sys.stderr)
        return 2
    if args.unsandboxed:
        print("WARNING: graded without the sandbox: student code ran with your rights.", file=sys.stderr)
    print(f"grades: {root / 'grades.csv'}  feedback: {root / 'feedback'}  report: {report(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
