"""A worker's part: run one submission with nbgrader in a private course folder (its code in the sandbox), skip a
cell that killed or hung the kernel and run again, judge the graded notebook in a process that never ran student
code (graders/judge.py), and send back an Outcome. `run_here` is this machine's pool of workers; graders/cluster.py
runs the same `execute` on the workers of a Dask cluster.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from graders import cell_groups, cell_limit, demonstrations, forkserver, limits, sandbox
from graders.course import REPO, course_digest
from graders.runs import STALLED, nbgrader
from graders.slots import Slots, shared_machine_environ
from graders.submission import KERNEL_DIED, KERNEL_HUNG, NO_REFERENCE, TIMED_OUT, TOO_SLOW, Outcome, Task

MAX_CRASHES = 5
LOG_CHARS = 20_000  # of what nbgrader (or the judge) said, kept for a submission it could not grade


STALL_GRACE = 30  # seconds past a cell's wall-clock backstop (graders/cell_limit.py) after which it is a hung kernel


GRADER_MEMORY_BYTES = int(os.environ.get("GRADER_OWN_MEMORY_BYTES", str(16 * 2**30)))  # autograde's, the judge's, a feedback page's


def run_here(tasks: list[Task], template: bytes, jobs: int, sandboxed: bool, log=None):
    """This machine's pool: `jobs` submissions at a time, results as they finish."""
    from concurrent.futures import as_completed

    with Slots(jobs, sandboxed) as slots, ThreadPoolExecutor(max(1, jobs)) as pool:
        if log and sandboxed:
            log(slots.describe())
        futures = {pool.submit(execute, task, template, slots): task for task in tasks}
        for future in as_completed(futures):
            yield futures[future], future.result()


def execute(task: Task, template: bytes, slots: Slots) -> Outcome:
    """A worker's part: run one submission with nbgrader (its code in the sandbox) in a private course folder
    with a private copy of the gradebook, judge it, and send the graded notebook and the verdict back."""
    start = time.monotonic()
    worker = f"{os.uname().nodename}:{os.getpid()}"
    if task.digest != course_digest():
        return Outcome(f"not graded: worker {worker} has other course files than the coordinator "
                       "(update its checkout of the course)", worker=worker)
    if task.sandboxed and not slots.sandboxed:
        why = sandbox.available() or "its grading slots are unsandboxed"
        return Outcome(f"not graded: worker {worker} cannot sandbox student code: {why}", worker=worker)
    uid, job_env = slots.take()
    try:
        with tempfile.TemporaryDirectory(prefix="course-", dir=slots.scratch) as private:
            os.chmod(private, 0o700)
            course = Path(private)
            (course / "solutions" / task.lesson).mkdir(parents=True)
            (course / "solutions" / task.lesson / f"{task.lesson}.ipynb").write_bytes(task.solution)
            (course / "gradebook.db").write_bytes(template)
            folder = course / "submitted" / task.student / task.lesson
            for name, content in task.files.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(content)
            outcome = execute_in(course, task, slots, uid, job_env)
    except Exception as error:  # noqa: BLE001 - one submission never stops the batch
        outcome = Outcome(f"not graded: the grader failed on it ({type(error).__name__})")
    finally:
        slots.give_back(uid)
    outcome.seconds, outcome.worker = time.monotonic() - start, worker
    return outcome


def execute_in(course: Path, task: Task, slots: Slots, uid: int, job_env: dict) -> Outcome:
    student, lesson = task.student, task.lesson
    skipped: dict[int, str] = {}  # cell index -> what it did to the kernel
    start = time.monotonic()
    with sandbox.ipc_folder(slots.ipc_prefix) as ipc, tempfile.NamedTemporaryFile() as progress, \
            tempfile.TemporaryDirectory(prefix="judge-") as private:
        os.chmod(ipc, 0o700)
        canaries, verdicts = os.path.join(private, "canaries.json"), os.path.join(private, "verdicts.json")
        failure = os.path.join(private, "failure.txt")  # what stopped nbgrader, in graders/execute.py's words
        env = {"GRADER_CELL_TIMEOUT": str(task.cell_timeout), "GRADER_PROGRESS_FILE": progress.name,
               "GRADER_CANARY_FILE": canaries, "GRADER_OUTCOME_FILE": failure, "GRADER_PIPELINE": "1",
               **shared_machine_environ(), **job_env}
        if not task.run_demonstrations:  # those the submission kept unchanged are left out
            env[demonstrations.SOURCE] = str(course / "solutions" / lesson / f"{lesson}.ipynb")
        if slots.spec_dir:
            env.update(GRADER_SANDBOX="1", GRADER_IPC_PREFIX=os.path.join(ipc, "k"), JUPYTER_PATH=slots.spec_dir,
                       GRADER_SANDBOX_UID=str(uid), GRADER_READONLY=str(REPO / "helpers"),
                       GRADER_KERNEL_SERVER=slots.kernels.socket_path())
        deadline = start + task.submission_timeout  # one cap for all the retries together
        while True:
            env["GRADER_SKIP_CELLS"] = ",".join(map(str, skipped))
            left = deadline - time.monotonic()
            if left <= 0:
                return Outcome("not graded: " + TIMED_OUT)
            if skipped:  # what the last try left dying (a fork bomb's hundreds) counts against no one
                limits.empty(limits.job_paths(job_env))
            Path(progress.name).touch()  # the watchdog counts from now
            Path(failure).unlink(missing_ok=True)
            proc = nbgrader(course, "autograde", lesson, f"--student={student}", "--create", "--force",
                            timeout=left, env=env, stalled_after=cell_limit.wall_seconds(task.cell_timeout) + STALL_GRACE,
                            server=slots.nbgraders[uid], memory_bytes=GRADER_MEMORY_BYTES)  # decodes the kernel's messages
            graded = course / "autograded" / student / lesson / f"{lesson}.ipynb"
            if proc.returncode == 0 and graded.is_file():
                break
            why = reason(proc, failure)
            cell = _read_int(progress.name)
            skippable = why in SKIPPABLE and cell is not None
            if not skippable or cell in skipped or len(skipped) >= MAX_CRASHES:
                return Outcome("not graded: " + why + (f" (cell {cell})" if why == TOO_SLOW and cell is not None else ""),
                               log=proc.stderr[-LOG_CHARS:])
            skipped[cell] = why
        solution = course / "solutions" / lesson / f"{lesson}.ipynb"
        verdict = _judge(slots.judges[uid], solution, graded, verdicts, slots.memo, max(60.0, deadline - time.monotonic()))
        if "error" in verdict:  # (a reference it could not compute: helpers.grading.ReferenceFailed, no verdict)
            return Outcome("not graded: " + (NO_REFERENCE if "ReferenceFailed" in verdict["error"] else
                                             "the judge failed on it (reports/not-graded/ has its error)"),
                           log=str(verdict["error"])[-LOG_CHARS:])
        flags = tuple(dict.fromkeys(verdict["flags"] + (_read_json(canaries) or [])))
        notebook = read_notebook_text(graded)
        if notebook is None:
            return Outcome(f"not graded: the graded notebook is larger than {max_graded_bytes() >> 20} MiB")
    status = "graded"
    if skipped:
        status += " (" + "; ".join(f"cell {cell} skipped: {why}" for cell, why in skipped.items()) + ")"
    return Outcome(status, notebook=notebook, verdict=verdict, flags=flags)


def read_notebook_text(path: Path, limit: int | None = None) -> str | None:
    """The graded notebook's text; None when it is larger than `limit` bytes (max_graded_bytes()), never read past."""
    limit = max_graded_bytes() if limit is None else limit
    if limit < 0:
        raise ValueError(f"limit must be a number of bytes (0 or more), got {limit}")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    return None if len(data) > limit else data.decode("utf-8")


def max_graded_bytes() -> int:
    """The largest graded notebook: the submission (intake's cap) and the outputs graders/execute.py keeps, twice."""
    from graders import execute, intake  # (nbgrader's imports: only where a notebook was graded)

    return 2 * (intake.MAX_NOTEBOOK_FILE_BYTES + execute.MAX_NOTEBOOK_BYTES)


def _judge(server: forkserver.Server, solution: Path, graded: Path, out: str, memo: str | None, timeout: float) -> dict:
    """graders/judge.py's verdicts on the graded notebook (written by nbgrader, in a folder the jail never had),
    judged in a fork of the slot's judge server (Python, torch and the helpers imported once per slot)."""
    ended = server.run({"solution": str(solution), "graded": str(graded), "out": out, "memo": memo,
                        "memory_bytes": GRADER_MEMORY_BYTES}, timeout=timeout)
    problem = ended.problem
    if problem is None and ended.status != 0:
        problem = f"it exited with status {ended.status}: " + server.stderr_tail()
    return _read_json(out) or {"error": problem or "it wrote no verdicts"}


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


# What stopped nbgrader, as graders/execute.py records it (an exception class of nbclient or its own), and
# the status it gives the submission. Only the grader's own observations decide a status: a kernel can write
# anything on its stderr, which nbgrader's output carries.
FAILURES = {"DeadKernelError": KERNEL_DIED, "CellTimeoutError": KERNEL_HUNG, "ProcessLimitReached": limits.PROCESS_LIMIT,
            "LeftBehind": cell_groups.LEFT_BEHIND,
            "CellTooSlow": TOO_SLOW}  # (graders/cell_limit.py: no verdict, not even on that cell)
SKIPPABLE = (KERNEL_DIED, KERNEL_HUNG, limits.PROCESS_LIMIT, cell_groups.LEFT_BEHIND)  # a try that stopped for a cell


def reason(proc, failure_file: str | None = None) -> str:
    why = getattr(proc, "why", None)
    if why:
        return KERNEL_HUNG if why.startswith(STALLED) else TIMED_OUT
    failure = _read_text(failure_file)
    if failure in FAILURES:
        return FAILURES[failure]
    if failure and failure.isidentifier():
        return f"nbgrader stopped on {failure}"
    return f"nbgrader exited with {proc.returncode}"


def _read_text(path: str | None) -> str | None:
    try:
        with open(path) as f:
            return f.read(200).strip()
    except (OSError, TypeError):
        return None
