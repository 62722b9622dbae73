"""The grading pipeline: release the student notebooks, autograde submissions, write feedback and grades.

    python -m graders.pipeline release [--root DIR]
    python -m graders.pipeline gradebook [--root DIR]   (the lessons in gradebook.db, for the formgrader)
    python -m graders.pipeline grade   [--root DIR] [--jobs N] [--scheduler ADDRESS] [--cell-timeout S] [--unsandboxed]

`--root` is the course root (default: this repository). Each submission is autograded by a worker in its
own nbgrader process, in a private copy of the course folder and gradebook, its code in the bubblewrap
sandbox of graders/sandbox.py. A kernel crash costs the cell that caused it (the submission is graded
again with that cell skipped); a hang costs the cell that hangs; nothing stops the batch. The workers are
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
import csv
import os
import json
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

from graders import execute as execute_caps
from graders import forkserver, limits, sandbox
from graders.release import is_exercise_cell  # noqa: F401 - the website's rule too (graders/site.py)

REPO = Path(__file__).resolve().parent.parent
CONFIG = Path(__file__).resolve().parent / "nbgrader_config"  # nbgrader appends ".py"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
MAX_CRASHES = 5
SANDBOX_UID_BASE = 61000  # unprivileged uids with no account: one per parallel grading job
UID_BLOCK = 64  # uids of one grading run: concurrent runs (two `make grade`s) take different blocks
UID_BLOCKS = 64
KERNEL_DIED = "the kernel died"
KERNEL_HUNG = "a cell hung and the kernel stopped answering"
TIMED_OUT = "the submission ran past its time limit"
STALLED = "the grading run stalled"
STALL_GRACE = 30  # seconds past the cell timeout after which a cell that has not ended is a dead or hung kernel


@dataclass
class Result:
    student: str
    lesson: str
    status: str  # "graded" (with notes), or why there is no grade
    seconds: float = 0.0
    flags: tuple[str, ...] = ()  # how the submission changed its kernel, if it did


def lessons(root: Path) -> list[str]:
    """Assignment folders under solutions/: solutions/<lesson>/<lesson>.ipynb."""
    return sorted(d.name for d in (root / "solutions").iterdir() if (d / f"{d.name}.ipynb").is_file())


def nbgrader(root: Path, *args: str, timeout: float | None = None, env: dict | None = None,
             stalled_after: float | None = None, server: forkserver.Server | None = None,
             memory_bytes: int | None = None):
    """`nbgrader ARGS` for the course at `root`: a new process, or a fork of `server` (nbgrader imported once);
    `memory_bytes` caps its address space."""
    exe = Path(sys.executable).with_name("nbgrader")
    full_env = {**os.environ, **(env or {})}
    full_env["PATH"] = f"{exe.parent}{os.pathsep}{full_env.get('PATH', '')}"  # nbgrader runs `alembic` from PATH
    args = [*args, f"--JupyterApp.config_file={CONFIG}", f"--CourseDirectory.root={root}"]
    progress = full_env.get("GRADER_PROGRESS_FILE")
    if server is not None:
        served = run_served(server, args, root, full_env, timeout, progress, stalled_after, memory_bytes)
        if served is not None:
            return served
    cmd = [str(exe), *args]
    if memory_bytes and shutil.which("prlimit"):
        cmd = ["prlimit", f"--as={memory_bytes}", "--", *cmd]
    return run_watched(cmd, root, full_env, timeout, progress, stalled_after)


def run_watched(cmd, cwd, env, timeout, progress: str | None = None, stalled_after: float | None = None):
    """subprocess.run, with a watchdog: when the progress file (rewritten before each cell) has not changed
    for `stalled_after` seconds, the kernel died or hung without nbclient noticing (its cell timeout did not
    end the cell): the run is stopped and reported as STALLED, so that the pipeline skips that cell instead
    of letting the submission run out its whole time limit."""
    deadline = None if timeout is None else time.monotonic() + timeout
    if shutil.which("setpriv"):  # dies with the thread that started it: a killed Dask worker leaves no grading behind
        cmd = ["setpriv", "--pdeathsig", "KILL", "--", *cmd]
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        outputs = {}
        readers = [threading.Thread(target=lambda name, stream: outputs.__setitem__(name, stream.read()),
                                    args=(name, stream), daemon=True) for name, stream in (("out", proc.stdout), ("err", proc.stderr))]
        for reader in readers:
            reader.start()
        why = None
        while proc.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                why = f"timed out after {timeout} s"
            else:
                why = _stalled(progress, stalled_after)
            if why:
                _kill_group(proc)
                break
            time.sleep(0.2)
        proc.wait()
        for reader in readers:
            reader.join(timeout=10)
    stderr = outputs.get("err", "") + (f"\n{why}" if why else "")
    return _completed(cmd, -1 if why else proc.returncode, outputs.get("out", ""), stderr, why)


def run_served(server: forkserver.Server, args, cwd, env, timeout, progress: str | None = None,
               stalled_after: float | None = None, memory_bytes: int | None = None):
    """run_watched's twin for a job of a fork server: the same watchdog, the same result; None when the server
    itself failed (the caller then starts a process of its own)."""
    with tempfile.TemporaryDirectory(prefix="nbgrader-") as out:
        paths = {"stdout": os.path.join(out, "stdout"), "stderr": os.path.join(out, "stderr")}
        request = {"args": list(args), "cwd": str(cwd), "env": dict(env), "memory_bytes": memory_bytes, **paths}
        ended = server.run(request, timeout=1e9 if timeout is None else timeout,
                           stop_when=lambda: _stalled(progress, stalled_after))
        if ended.server_failed:
            return None
        stdout, stderr = (Path(paths[name]).read_text(errors="replace") if os.path.exists(paths[name]) else ""
                          for name in ("stdout", "stderr"))
    why = ended.problem
    return _completed(args, -1 if why else ended.status, stdout, stderr + (f"\n{why}" if why else ""), why)


def _completed(args, status: int, stdout: str, stderr: str, why: str | None) -> subprocess.CompletedProcess:
    """The run's result; `why` is the watchdog's own reason for stopping it (None if it ended by itself)."""
    done = subprocess.CompletedProcess(args, status, stdout, stderr)
    done.why = why
    return done


def _stalled(progress: str | None, stalled_after: float | None) -> str | None:
    if stalled_after and progress and time.time() - _mtime(progress) > stalled_after:
        return f"{STALLED}: no cell finished for {stalled_after:.0f} s"
    return None


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # nbgrader and the kernel launcher it started
    except OSError:
        proc.kill()


def _check(proc, what: str) -> None:
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def release(root: Path = REPO) -> list[Path]:
    """Regenerate notebooks/ from solutions/ (byte-reproducible)."""
    written = []
    with tempfile.TemporaryDirectory(prefix="release-") as scratch:
        server = forkserver.Server("nbgrader", os.path.join(scratch, "nbgrader.log"))  # nbgrader imported once
        try:
            for lesson in lessons(root):
                _check(nbgrader(root, "generate_assignment", lesson, "--force", "--no-db", server=server),
                       f"release of {lesson}")
                written.append(root / "notebooks" / lesson / f"{lesson}.ipynb")
        finally:
            server.close()
    return written


class SandboxUnavailable(RuntimeError):
    pass


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


@dataclass
class Outcome:
    """What a worker sends back: never a write to the gradebook, grades.csv or feedback (the coordinator's)."""
    status: str  # "graded" (with notes), or why there is no grade
    seconds: float = 0.0
    notebook: str | None = None  # the graded notebook, as nbgrader wrote it outside the jail
    verdict: dict | None = None  # the judge's, on that notebook
    flags: tuple[str, ...] = ()
    worker: str = ""


def grade(root: Path = REPO, cell_timeout: int = 300, submission_timeout: int = 3600, jobs: int = 1,
          sandboxed: bool = True, scheduler=None, log=None, lesson_timeouts: dict[str, int] | None = None,
          insecure_tcp: bool = False, certs: Path | None = None) -> list[Result]:
    """Autograde everything under submitted/<student>/<lesson>/, write feedback/, grades.csv and a report plot.
    `lesson_timeouts` gives some lessons a cell timeout of their own (seconds), instead of `cell_timeout`.

    Workers execute and judge the submissions: `jobs` threads of this process, or the workers of the Dask
    cluster at `scheduler` (graders/cluster.py). This process is the only one that writes the gradebook,
    autograded/, feedback/ and grades.csv, one submission at a time as the results come back."""
    if sandboxed and scheduler is None and (why := sandbox.available()):
        raise SandboxUnavailable(f"cannot sandbox student code: {why}. Fix that, or grade with --unsandboxed "
                                 "(make grade UNSANDBOXED=1) to run submissions with your own rights.")
    if jobs > UID_BLOCK:
        raise ValueError(f"jobs must be at most {UID_BLOCK}, got {jobs}")
    course_lessons = lessons(root)
    recorder = Recorder(root)
    try:
        return _grade_with(recorder, root, course_lessons, cell_timeout, submission_timeout, jobs, sandboxed,
                           scheduler, log, lesson_timeouts, insecure_tcp, certs)
    finally:
        recorder.close()


def _grade_with(recorder, root, course_lessons, cell_timeout, submission_timeout, jobs, sandboxed, scheduler, log,
                lesson_timeouts, insecure_tcp, certs) -> list[Result]:
    for lesson in course_lessons:  # records each lesson's grade cells in the gradebook
        recorder.generate_assignment(lesson)
    unknown = set(lesson_timeouts or {}) - set(course_lessons)
    if unknown:
        raise ValueError(f"lesson_timeouts names lessons the course does not have: {sorted(unknown)}")
    timeouts = {lesson: (lesson_timeouts or {}).get(lesson, cell_timeout) for lesson in course_lessons}
    results, tasks = _tasks(root, course_lessons, timeouts, submission_timeout, sandboxed)
    template = recorder.template()
    if scheduler is None:
        outcomes = _run_here(tasks, template, jobs, sandboxed, log)
    else:
        from graders import cluster

        outcomes = cluster.run(scheduler, tasks, template, log, insecure_tcp=insecure_tcp, certs=certs)
    for number, (task, outcome) in enumerate(outcomes, 1):
        result = recorder.record(task, outcome)
        results.append(result)
        if log:
            log(f"[{number}/{len(tasks)}] {result.student:<20} {result.lesson:<24} {result.status}"
                + (f"  ({outcome.worker})" if outcome.worker else ""))
    order = {(t.student, t.lesson): i for i, t in enumerate(tasks)}
    results.sort(key=lambda r: order.get((r.student, r.lesson), -1))
    write_grades_csv(root, results)
    return results


def _tasks(root: Path, course_lessons: list[str], timeouts: dict[str, int], submission_timeout: int, sandboxed: bool):
    """The submissions to grade, and a Result for each that cannot be."""
    submitted = root / "submitted"
    students = sorted(d.name for d in submitted.iterdir() if d.is_dir()) if submitted.is_dir() else []
    digest = course_digest()
    sources = {lesson: (root / "solutions" / lesson / f"{lesson}.ipynb").read_bytes() for lesson in course_lessons}
    results, tasks = [], []
    for student in students:
        if not STUDENT_ID.match(student):
            results.append(Result(student, "", "skipped: not a valid student id"))
            continue
        for lesson in course_lessons:
            folder = submitted / student / lesson
            if (submitted / student).is_symlink() or folder.is_symlink():
                results.append(Result(student, lesson, "not graded: the submission is a symbolic link"))
            elif folder.is_dir():
                files = _prepare(root, student, lesson) or _files(folder)
                if isinstance(files, str):
                    results.append(Result(student, lesson, files))
                else:
                    tasks.append(Task(student, lesson, files, digest, sandboxed, timeouts[lesson], submission_timeout,
                                      sources[lesson]))
    return results, tasks


MAX_SUBMISSION_BYTES = 64 * 2**20
# A notebook the coordinator reads and renders: its size and cell count bound that work (a lesson has ~70
# cells and ~60 kB; 60,000 cells once cost minutes to read and render).
MAX_NOTEBOOK_FILE_BYTES = int(os.environ.get("GRADER_MAX_NOTEBOOK_FILE_BYTES", str(16 * 2**20)))
MAX_CELLS = int(os.environ.get("GRADER_MAX_CELLS", "1000"))
# The graded notebook a worker sends back: the submission and the outputs it may keep (graders/execute.py).
MAX_GRADED_CHARS = 2 * (MAX_NOTEBOOK_FILE_BYTES + execute_caps.MAX_NOTEBOOK_BYTES)
FEEDBACK_SECONDS = 120  # rendering one feedback page (about half a second for a lesson)
GRADER_MEMORY_BYTES = int(os.environ.get("GRADER_OWN_MEMORY_BYTES", str(16 * 2**30)))  # the judge's, a feedback page's


def _files(folder: Path) -> dict[str, bytes] | str:
    """The submission's regular files (what nbgrader would copy), never what a link points at; or why not."""
    files, size = {}, 0
    for parent, dirs, names in os.walk(folder):  # does not descend into linked folders
        for name in names:
            path = Path(parent) / name
            if path.is_symlink() or not path.is_file() or name.endswith((".submitted", ".restoring")):
                continue
            size += path.stat().st_size
            if size > MAX_SUBMISSION_BYTES:
                return f"not graded: the submission folder holds more than {MAX_SUBMISSION_BYTES >> 20} MiB"
            files[str(path.relative_to(folder))] = path.read_bytes()
    return files


def course_digest(repo: Path = REPO) -> str:
    """What a worker must share with the coordinator to grade the same way: the helpers students call and
    the grader (the lesson's source notebook travels with each task)."""
    import hashlib

    digest = hashlib.sha256()
    for pattern in ("helpers/**/*.py", "graders/**/*.py"):
        for path in sorted(repo.glob(pattern)):
            digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _run_here(tasks: list[Task], template: bytes, jobs: int, sandboxed: bool, log=None):
    """This machine's pool: `jobs` submissions at a time, results as they finish."""
    from concurrent.futures import as_completed

    with Slots(jobs, sandboxed) as slots, ThreadPoolExecutor(max(1, jobs)) as pool:
        if log and sandboxed:
            log(slots.describe())
        futures = {pool.submit(execute, task, template, slots): task for task in tasks}
        for future in as_completed(futures):
            yield futures[future], future.result()


class Slots:
    """The sandbox uids (a block no other grading process on this machine holds) and their cgroups, and the
    scratch space of one grading process: one slot per submission graded at the same time."""

    def __init__(self, jobs: int, sandboxed: bool):
        if not 1 <= jobs <= UID_BLOCK:
            raise ValueError(f"jobs must be between 1 and {UID_BLOCK}, got {jobs}")
        self.sandboxed = sandboxed
        self.block, self._lock = _uid_block()
        self.scratch = tempfile.mkdtemp(prefix="grader-")
        self.spec_dir = sandbox.kernelspec(self.scratch) if sandboxed else None
        self.memo = os.path.join(self.scratch, "judge-memo")  # the judge's references, shared by the submissions
        os.makedirs(self.memo, mode=0o700)
        self.free, self.groups = queue.Queue(), {}
        for slot in range(jobs):
            uid = SANDBOX_UID_BASE + self.block * UID_BLOCK + slot
            self.groups[uid] = limits.JobGroups(f"course-grader-{uid}", limits.default_memory_bytes(jobs),
                                                int(os.environ.get("GRADER_MAX_PROCESSES", "512"))).create() if sandboxed else None
            self.free.put(uid)
        # nbgrader and the judge never run student code: each slot forks them from servers that imported them once
        self.judges = {uid: forkserver.Server("judge", os.path.join(self.scratch, f"judge-{uid}.log")) for uid in self.groups}
        self.nbgraders = {uid: forkserver.Server("nbgrader", os.path.join(self.scratch, f"nbgrader-{uid}.log"))
                          for uid in self.groups}

    def describe(self) -> str:
        return next(iter(self.groups.values())).describe() if self.sandboxed else "unsandboxed"

    def take(self) -> tuple[int, dict]:
        uid = self.free.get()
        return uid, self.groups[uid].env() if self.groups[uid] else {}

    def give_back(self, uid: int) -> None:
        self.free.put(uid)

    def close(self) -> None:
        for server in [*self.judges.values(), *self.nbgraders.values()]:
            server.close()
        for job in filter(None, self.groups.values()):
            job.remove()
        self._lock.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _uid_block():
    """A block of sandbox uids no other grading run on this machine holds (an flock per block, held
    until the run ends), so that two runs never share a uid and its process limit."""
    import fcntl

    folder = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    for block in range(UID_BLOCKS):
        lock = open(os.path.join(folder, f"course-grader-uids-{block}.lock"), "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return block, lock
        except OSError:
            lock.close()
    raise RuntimeError(f"all {UID_BLOCKS} blocks of sandbox uids are held by other grading runs")


def _prepare(root: Path, student: str, lesson: str) -> str | None:
    """Find the lesson's notebook in the submission; None if it is fine, else why it cannot be graded.
    A single notebook under another name is graded as if correctly named (the copy is noted).
    Symbolic links and anything but regular files are refused: the grader runs as root and must not
    read or write what a link points at. The student's own file is never lost: a notebook whose
    nbgrader metadata must be restored (or whose text holds a lone surrogate, which nbgrader cannot
    write) is kept as <lesson>.ipynb.submitted and replaced atomically by the repaired one."""
    folder = root / "submitted" / student / lesson
    expected = folder / f"{lesson}.ipynb"
    if expected.is_symlink() or (expected.exists() and not expected.is_file()):
        return "not graded: the notebook is not a regular file (a symbolic link or a folder)"
    if not expected.exists():
        others = sorted(p for p in folder.glob("*.ipynb") if not p.is_symlink() and p.is_file())
        if len(others) != 1:
            return "not graded: no notebook named " + expected.name
        shutil.copyfile(others[0], expected, follow_symlinks=False)
    if expected.stat().st_size > MAX_NOTEBOOK_FILE_BYTES:
        return f"not graded: the notebook is larger than {MAX_NOTEBOOK_FILE_BYTES >> 20} MiB"
    try:
        if _cell_count(json.loads(expected.read_bytes())) > MAX_CELLS:  # counted before nbformat reads it all
            return f"not graded: the notebook has more than {MAX_CELLS} cells"
        submission = nbformat.read(expected, as_version=4)
    except Exception as error:  # truncated, not JSON, not a notebook, not UTF-8
        return f"not graded: the notebook cannot be read ({type(error).__name__})"
    restored = _restore_metadata(submission, nbformat.read(root / "solutions" / lesson / f"{lesson}.ipynb", as_version=4))
    text = nbformat.writes(submission)
    try:
        text.encode("utf-8")
    except UnicodeError:  # a lone surrogate in a cell: nbgrader could not write the graded notebook
        restored = True
    if restored:
        text = text.encode("utf-8", errors="replace")
        original = folder / f"{lesson}.ipynb.submitted"
        if not original.exists():
            shutil.copyfile(expected, original, follow_symlinks=False)
        partial = folder / f".{lesson}.ipynb.restoring"
        partial.write_bytes(text)
        os.replace(partial, expected)
    return None


def _cell_count(raw) -> int:
    if type(raw) is not dict:
        return 0
    sheets = raw.get("worksheets") if type(raw.get("worksheets")) is list else [raw]  # nbformat 3 had worksheets
    return sum(len(sheet["cells"]) for sheet in sheets if type(sheet) is dict and type(sheet.get("cells")) is list)


def _restore_metadata(submission, source) -> bool:
    """Give back the nbgrader metadata a student's editor stripped, matching cells by their ids
    (nbgrader itself cannot grade a notebook whose exercise cells lost it)."""
    known = {cell.get("id"): cell.metadata["nbgrader"] for cell in source.cells if "nbgrader" in cell.metadata}
    restored = False
    for cell in submission.cells:
        if "nbgrader" not in cell.metadata and cell.get("id") in known:
            cell.metadata["nbgrader"] = dict(known[cell.get("id")])
            restored = True
    return restored


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
            outcome = _execute_in(course, task, slots, uid, job_env)
    except Exception as error:  # noqa: BLE001 - one submission never stops the batch
        outcome = Outcome(f"not graded: the grader failed on it ({type(error).__name__})")
    finally:
        slots.give_back(uid)
    outcome.seconds, outcome.worker = time.monotonic() - start, worker
    return outcome


# Submissions are graded side by side on one machine (JOBS, Dask workers): GNU OpenMP's idle threads, which spin
# by default, would burn the CPU the other kernels need (10-17% of it with three lessons on two cores, measured).
# Passive waiting changes no result; an instructor's own OMP_WAIT_POLICY wins.
SHARED_MACHINE_OMP = "PASSIVE"


def _execute_in(course: Path, task: Task, slots: Slots, uid: int, job_env: dict) -> Outcome:
    student, lesson = task.student, task.lesson
    skipped: dict[int, str] = {}  # cell index -> what it did to the kernel
    start = time.monotonic()
    with sandbox.ipc_folder() as ipc, tempfile.NamedTemporaryFile() as progress, \
            tempfile.TemporaryDirectory(prefix="judge-") as private:
        os.chmod(ipc, 0o700)
        canaries, verdicts = os.path.join(private, "canaries.json"), os.path.join(private, "verdicts.json")
        failure = os.path.join(private, "failure.txt")  # what stopped nbgrader, in graders/execute.py's words
        env = {"GRADER_CELL_TIMEOUT": str(task.cell_timeout), "GRADER_PROGRESS_FILE": progress.name,
               "GRADER_CANARY_FILE": canaries, "GRADER_OUTCOME_FILE": failure, "GRADER_PIPELINE": "1", "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", SHARED_MACHINE_OMP),
               **job_env}
        if slots.spec_dir:
            env.update(GRADER_SANDBOX="1", GRADER_IPC_PREFIX=os.path.join(ipc, "k"), JUPYTER_PATH=slots.spec_dir,
                       GRADER_SANDBOX_UID=str(uid), GRADER_READONLY=str(REPO / "helpers"))
        deadline = start + task.submission_timeout  # one cap for all the retries together
        while True:
            env["GRADER_SKIP_CELLS"] = ",".join(map(str, skipped))
            left = deadline - time.monotonic()
            if left <= 0:
                return Outcome("not graded: " + TIMED_OUT)
            Path(progress.name).touch()  # the watchdog counts from now
            Path(failure).unlink(missing_ok=True)
            proc = nbgrader(course, "autograde", lesson, f"--student={student}", "--create", "--force",
                            timeout=left, env=env, stalled_after=task.cell_timeout + STALL_GRACE,
                            server=slots.nbgraders[uid])
            graded = course / "autograded" / student / lesson / f"{lesson}.ipynb"
            if proc.returncode == 0 and graded.is_file():
                break
            reason = _reason(proc, failure)
            cell = _read_int(progress.name)
            skippable = reason in (KERNEL_DIED, KERNEL_HUNG, limits.PROCESS_LIMIT) and cell is not None
            if not skippable or cell in skipped or len(skipped) >= MAX_CRASHES:
                return Outcome("not graded: " + reason)
            skipped[cell] = reason
        solution = course / "solutions" / lesson / f"{lesson}.ipynb"
        verdict = _judge(slots.judges[uid], solution, graded, verdicts, slots.memo, max(60.0, deadline - time.monotonic()))
        if "error" in verdict:
            return Outcome("not graded: the judge failed on it (the grader's log has its traceback)")
        flags = tuple(dict.fromkeys(verdict["flags"] + (_read_json(canaries) or [])))
        notebook = read_notebook_text(graded)
    status = "graded"
    if skipped:
        status += " (" + "; ".join(f"cell {cell} skipped: {why}" for cell, why in skipped.items()) + ")"
    return Outcome(status, notebook=notebook, verdict=verdict, flags=flags)


def read_notebook_text(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, encoding="utf-8") as f:
        return f.read()


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


class Recorder:
    """The coordinator's writes, one submission at a time: the graded notebook into autograded/, its scores into
    the gradebook (nbgrader's own SaveAutoGrades and late penalties, then the judge's verdicts), its feedback."""

    def __init__(self, root: Path):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config.loader import PyFileConfigLoader

        self.root = root
        self.db_url = f"sqlite:///{root / 'gradebook.db'}"
        bin_dir = str(Path(sys.executable).parent)  # nbgrader runs `alembic` from PATH to create a gradebook
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        self.config = PyFileConfigLoader(CONFIG.name + ".py", path=str(CONFIG.parent)).load_config()
        self.config.CourseDirectory.root = str(root)
        # Recording a lesson's cells in the gradebook releases it too: into a scratch folder, never notebooks/
        # (`make release` alone writes those, tagged so that Run All goes on past an unsolved exercise).
        self._scratch = tempfile.mkdtemp(prefix="recorder-")
        self.config.CourseDirectory.release_directory = os.path.join(self._scratch, "released")
        self.coursedir = CourseDirectory(config=self.config)
        self.api = NbGraderAPI(coursedir=self.coursedir, config=self.config)
        self._feedback_server = None

    def generate_assignment(self, lesson: str) -> None:
        """nbgrader generate_assignment, in this process: the lesson's cells into the gradebook."""
        outcome = self.api.generate_assignment(lesson, force=True, create=True)
        if not outcome.get("success"):
            raise RuntimeError(f"generate_assignment {lesson} failed:\n{outcome.get('log', '')[-3000:]}\n{outcome.get('error', '')}")

    def template(self) -> bytes:
        """The gradebook with the lessons' cells and no students: each worker grades in a copy of it."""
        import sqlite3

        from nbgrader.api import Gradebook

        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "gradebook.db")
            with sqlite3.connect(self.root / "gradebook.db") as source, sqlite3.connect(path) as copy:
                source.backup(copy)
            with Gradebook(f"sqlite:///{path}") as gb:
                for student in [s.id for s in gb.students]:
                    gb.remove_student(student)
            with sqlite3.connect(path) as db:
                db.execute("VACUUM")
            return Path(path).read_bytes()

    def record(self, task: Task, outcome: Outcome) -> Result:
        result = Result(task.student, task.lesson, outcome.status, outcome.seconds, tuple(outcome.flags))
        if not outcome.status.startswith("graded"):
            return result
        if len(outcome.notebook or "") > MAX_GRADED_CHARS:
            result.status = f"not graded: the graded notebook is larger than {MAX_GRADED_CHARS >> 20} MiB"
            return result
        try:
            notebook = nbformat.reads(outcome.notebook, as_version=4)
            self._write_graded(task, outcome.notebook)
            self._save_scores(task, notebook, outcome.verdict)
        except Exception as error:  # noqa: BLE001 - a bad outcome costs its submission a status, not the batch
            result.status = f"not graded: its result could not be recorded ({type(error).__name__})"
            return result
        if not self._feedback(task, outcome.verdict):
            result.status += " (feedback failed)"
        return result

    def _write_graded(self, task: Task, text: str) -> None:
        folder = self.root / "autograded" / task.student / task.lesson
        for part in (folder.parent.parent, folder.parent, folder):  # root writes: never through a link
            if part.is_symlink():
                raise RuntimeError(f"{part} is a symbolic link")
            part.mkdir(exist_ok=True)
        partial = folder / f".{task.lesson}.ipynb.recording"
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
        os.replace(partial, folder / f"{task.lesson}.ipynb")

    def _save_scores(self, task: Task, notebook, verdict: dict) -> None:
        from nbgrader.api import Gradebook
        from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

        timestamp = self.coursedir.get_existing_timestamp(str(self.root / "submitted" / task.student / task.lesson))
        resources = {"nbgrader": {"db_url": self.db_url, "assignment": task.lesson, "notebook": task.lesson,
                                  "student": task.student}}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module="nbgrader.api")  # SQLAlchemy's autoflush notes on nbgrader's code
            with Gradebook(self.db_url, self.coursedir.course_id) as gb:
                gb.update_or_create_student(task.student)
                gb.update_or_create_submission(task.lesson, task.student, **({"timestamp": timestamp} if timestamp else {}))
            for step in (SaveAutoGrades, AssignLatePenalties):
                step(config=self.config).preprocess(notebook, resources)
        failed = [cell for cell, v in (verdict or {}).get("cells", {}).items() if not v["passed"]]
        if failed:  # a judged cell keeps the points the kernel's run gave it only if the judge passed it too
            with Gradebook(self.db_url, self.coursedir.course_id) as gb:
                for cell in failed:
                    gb.find_grade(cell, task.lesson, task.lesson, task.student).auto_score = 0.0
                gb.db.commit()

    def _feedback(self, task: Task, verdict: dict) -> bool:
        """The feedback page, rendered in a fork of the recorder's nbgrader server under a time and a memory limit
        (a submission decides how much there is to render)."""
        if self._feedback_server is None:
            self._feedback_server = forkserver.Server("nbgrader", os.path.join(self._scratch, "nbgrader.log"))
        path = os.path.join(self._scratch, "verdicts.json")
        with open(path, "w") as f:
            json.dump(verdict or {}, f)
        proc = nbgrader(self.root, "generate_feedback", task.lesson, f"--student={task.student}", "--force",
                        timeout=FEEDBACK_SECONDS, env={"GRADER_VERDICTS_FILE": path}, server=self._feedback_server,
                        memory_bytes=GRADER_MEMORY_BYTES)
        page = self.root / "feedback" / task.student / task.lesson / f"{task.lesson}.html"
        return proc.returncode == 0 and page.is_file()

    def close(self) -> None:
        if self._feedback_server is not None:
            self._feedback_server.close()
            self._feedback_server = None
        shutil.rmtree(self._scratch, ignore_errors=True)


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


# What stopped nbgrader, as graders/execute.py records it (an exception class of nbclient or its own), and
# the status it gives the submission. Only the grader's own observations decide a status: a kernel can write
# anything on its stderr, which nbgrader's output carries.
FAILURES = {"DeadKernelError": KERNEL_DIED, "CellTimeoutError": KERNEL_HUNG, "ProcessLimitReached": limits.PROCESS_LIMIT}


def _reason(proc, failure_file: str | None = None) -> str:
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
        out.writerow(["student", "lesson", "status", "flags", "score", "max_score", "seconds", *cells])
        for r in results:
            maximum = lesson_cells.get(r.lesson, {})
            got = scores(root, r.student, r.lesson) if r.status.startswith("graded") else None
            per_cell = {f"{r.lesson}:{k}": v for k, v in (got or dict.fromkeys(maximum, 0.0)).items()}
            out.writerow([_inert(v) for v in (r.student, r.lesson, r.status, "; ".join(r.flags), sum(per_cell.values()),
                                              sum(maximum.values()), round(r.seconds, 1), *[per_cell.get(c, "") for c in cells])])
    return path


def _inert(value):
    """A CSV field a spreadsheet shows as text: one starting like a formula (=, +, -, @) gets a quote first."""
    if isinstance(value, str) and value.startswith(("=", "+", "-", "@", "\t", "\r")):
        return "'" + value
    return value


def report(root: Path = REPO) -> Path:
    """reports/points-lost.png: per exercise, how many students lost points there."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(root / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    by_lesson: dict[str, dict[str, int]] = {}
    for lesson in lessons(root):
        maximum = max_scores(root, lesson)
        lesson_rows = [r for r in rows if r["lesson"] == lesson]
        by_lesson[lesson] = {cell.removesuffix("_tests"): sum(float(r[f"{lesson}:{cell}"] or 0) < top for r in lesson_rows)
                             for cell, top in maximum.items()} if lesson_rows else {}
    shown = {k: v for k, v in by_lesson.items() if v}
    fig, axes = plt.subplots(len(shown) or 1, 1, figsize=(8, 2.2 * max(1, len(shown))), squeeze=False)
    for ax, (lesson, lost) in zip(axes[:, 0], shown.items()):
        ax.barh(list(lost), list(lost.values()), color="C3")
        ax.set_title(f"{lesson}: students who lost points, per exercise", fontsize=9)
        ax.invert_yaxis()
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    out = root / "reports" / "points-lost.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["release", "grade", "gradebook"])
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at the same time")
    parser.add_argument("--cell-timeout", type=int, default=300)
    parser.add_argument("--submission-timeout", type=int, default=3600)
    parser.add_argument("--unsandboxed", action="store_true", help="run student code without the sandbox (unsafe)")
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
    if args.command == "gradebook":  # the lessons in gradebook.db, for the formgrader (make lab)
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
                        insecure_tcp=args.insecure_tcp, certs=args.certs)
    except SandboxUnavailable as error:
        print(error, file=sys.stderr)
        return 2
    if args.unsandboxed:
        print("WARNING: graded without the sandbox: student code ran with your rights.", file=sys.stderr)
    print(f"grades: {root / 'grades.csv'}  feedback: {root / 'feedback'}  report: {report(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
