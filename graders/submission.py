"""A submission as data, the way it travels between the grader's steps: the Task a worker grades (its files, the
lesson's source), the Outcome a worker sends back, and the Result the coordinator records, with the statuses
the grader itself gives when a run does not end in a grade.
"""

from __future__ import annotations

from dataclasses import dataclass

KERNEL_DIED = "the kernel died"


KERNEL_HUNG = "a cell hung and the kernel stopped answering"


TIMED_OUT = "the submission ran past its time limit"


# A cell reached its wall-clock backstop before it had used its CPU-time limit (graders/cell_limit.py): the machine was
# too busy to run it (or the cell waited on something). No verdict on the submission: grading it again may give one.
TOO_SLOW = ("a cell ran past its wall-clock limit before it had used its CPU time (the machine was too busy, or the "
            "cell waited on something): grade it again")


# The judge could not compute a reference (its own launch or XLA run failed, or ran out of its time): no verdict.
NO_REFERENCE = "the judge could not compute one of its references (its own run failed): grade it again"


@dataclass
class Result:
    student: str
    lesson: str
    status: str  # "graded" (with notes), or why there is no grade
    seconds: float = 0.0
    flags: tuple[str, ...] = ()  # how the submission changed its kernel, if it did


@dataclass
class Task:
    """One submission to grade, as data: what a worker (this machine's pool or a Dask worker) needs."""
    student: str
    lesson: str
    files: dict[str, bytes]  # the submission folder: path relative to it -> content (regular files only)
    digest: str  # the version of the grader and helpers (graders/, helpers/) the coordinator grades with
    sandboxed: bool
    cell_timeout: int
    submission_timeout: int
    solution: bytes  # the coordinator's source notebook of the lesson: the judge's hidden tests and references
    run_demonstrations: bool = False  # run the instructor's demonstrations too (graders/demonstrations.py)


@dataclass
class Outcome:
    """What a worker sends back: never a write to the gradebook, grades.csv or feedback (the coordinator's)."""
    status: str  # "graded" (with notes), or why there is no grade
    seconds: float = 0.0
    notebook: str | None = None  # the graded notebook, as nbgrader wrote it outside the jail
    verdict: dict | None = None  # the judge's, on that notebook
    flags: tuple[str, ...] = ()
    worker: str = ""
    log: str = ""  # no grade: the end of what nbgrader or the judge said, for reports/not-graded/ (graders/record.py)
