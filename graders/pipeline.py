"""The grading pipeline: release the student notebooks, autograde submissions, write feedback and grades.

    python -m graders.pipeline release [--root DIR]
    python -m graders.pipeline grade   [--root DIR] [--jobs N] [--cell-timeout S] [--unsandboxed]

`--root` is the course root (default: this repository). Each submission is autograded in its own
nbgrader process, its code in the bubblewrap sandbox of graders/sandbox.py. A kernel crash costs
the cell that caused it (the submission is graded again with that cell skipped); a hang costs the
cell that hangs; nothing stops the batch. `--jobs N` grades N submissions at a time.

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
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

from graders import limits, sandbox

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
             stalled_after: float | None = None):
    exe = Path(sys.executable).with_name("nbgrader")
    full_env = {**os.environ, **(env or {})}
    full_env["PATH"] = f"{exe.parent}{os.pathsep}{full_env.get('PATH', '')}"  # nbgrader runs `alembic` from PATH
    cmd = [str(exe), *args, f"--JupyterApp.config_file={CONFIG}", f"--CourseDirectory.root={root}"]
    return run_watched(cmd, root, full_env, timeout, full_env.get("GRADER_PROGRESS_FILE"), stalled_after)


def run_watched(cmd, cwd, env, timeout, progress: str | None = None, stalled_after: float | None = None):
    """subprocess.run, with a watchdog: when the progress file (rewritten before each cell) has not changed
    for `stalled_after` seconds, the kernel died or hung without nbclient noticing (its cell timeout did not
    end the cell): the run is stopped and reported as STALLED, so that the pipeline skips that cell instead
    of letting the submission run out its whole time limit."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        outputs = {}
        readers = [threading.Thread(target=lambda name, stream: outputs.__setitem__(name, stream.read()),
                                    args=(name, stream), daemon=True) for name, stream in (("out", proc.stdout), ("err", proc.stderr))]
        for reader in readers:
            reader.start()
        why = None
        while proc.poll() is None:
            now = time.monotonic()
            if deadline is not None and now > deadline:
                why = f"timed out after {timeout} s"
            elif stalled_after and progress and time.time() - _mtime(progress) > stalled_after:
                why = f"{STALLED}: no cell finished for {stalled_after:.0f} s"
            if why:
                _kill_group(proc)
                break
            time.sleep(0.2)
        proc.wait()
        for reader in readers:
            reader.join(timeout=10)
    stderr = outputs.get("err", "") + (f"\n{why}" if why else "")
    return subprocess.CompletedProcess(cmd, -1 if why else proc.returncode, outputs.get("out", ""), stderr)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def _kill_group(proc) -> None:
    import signal

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
    for lesson in lessons(root):
        _check(nbgrader(root, "generate_assignment", lesson, "--force", "--no-db"), f"release of {lesson}")
        written.append(root / "notebooks" / lesson / f"{lesson}.ipynb")
    return written


class SandboxUnavailable(RuntimeError):
    pass


def grade(root: Path = REPO, cell_timeout: int = 300, submission_timeout: int = 3600, jobs: int = 1,
          sandboxed: bool = True) -> list[Result]:
    """Autograde everything under submitted/<student>/<lesson>/, write feedback/, grades.csv and a report plot."""
    if sandboxed and (why := sandbox.available()):
        raise SandboxUnavailable(f"cannot sandbox student code: {why}. Fix that, or grade with --unsandboxed "
                                 "(make grade UNSANDBOXED=1) to run submissions with your own rights.")
    course_lessons = lessons(root)
    for lesson in course_lessons:  # records each lesson's grade cells in the gradebook
        _check(nbgrader(root, "generate_assignment", lesson, "--force"), f"generate_assignment {lesson}")
    submitted = root / "submitted"
    students = sorted(d.name for d in submitted.iterdir() if d.is_dir()) if submitted.is_dir() else []
    tasks, results = [], []
    for student in students:
        if not STUDENT_ID.match(student):
            results.append(Result(student, "", "skipped: not a valid student id"))
            continue
        for lesson in course_lessons:
            folder = submitted / student / lesson
            if (submitted / student).is_symlink() or folder.is_symlink():
                results.append(Result(student, lesson, "not graded: the submission is a symbolic link"))
            elif folder.is_dir():
                tasks.append((student, lesson))
    if jobs > UID_BLOCK:
        raise ValueError(f"jobs must be at most {UID_BLOCK}, got {jobs}")
    block, block_lock = _uid_block()
    slots = queue.Queue()  # one sandbox uid and one set of cgroups per parallel job
    groups = {}
    for slot in range(max(1, jobs)):
        uid = SANDBOX_UID_BASE + block * UID_BLOCK + slot
        groups[uid] = limits.JobGroups(f"course-grader-{uid}", limits.default_memory_bytes(jobs),
                                       int(os.environ.get("GRADER_MAX_PROCESSES", "512"))).create() if sandboxed else None
        slots.put(uid)
    if sandboxed:
        print(groups[uid].describe(), flush=True)

    def run(task):
        uid = slots.get()
        start = time.monotonic()
        try:
            return _grade_one(root, *task, cell_timeout, submission_timeout, spec_dir, uid, memo,
                              groups[uid].env() if groups[uid] else {})
        except Exception as error:  # one submission never stops the batch
            return Result(*task, f"not graded: the grader failed on it ({type(error).__name__}: {error})"[:300],
                          time.monotonic() - start)
        finally:
            slots.put(uid)

    try:
        with tempfile.TemporaryDirectory(prefix="grader-") as scratch:
            spec_dir = sandbox.kernelspec(scratch) if sandboxed else None
            memo = os.path.join(scratch, "judge-memo")  # the judge's references, shared by the run's submissions
            os.makedirs(memo, mode=0o700)
            with ThreadPoolExecutor(max(1, jobs)) as pool:
                results += pool.map(run, tasks)
    finally:
        for job in filter(None, groups.values()):
            job.remove()
        block_lock.close()
    write_grades_csv(root, results)
    return results


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
    try:
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


def _grade_one(root: Path, student: str, lesson: str, cell_timeout: int, submission_timeout: int,
               spec_dir: str | None, uid: int = 0, memo: str | None = None, job_env: dict | None = None) -> Result:
    start = time.monotonic()
    problem = _prepare(root, student, lesson)
    if problem:
        return Result(student, lesson, problem, time.monotonic() - start)
    skipped: dict[int, str] = {}  # cell index -> what it did to the kernel
    busy_retries = 2
    with tempfile.TemporaryDirectory(prefix="g-", dir="/tmp") as ipc, tempfile.NamedTemporaryFile() as progress, \
            tempfile.TemporaryDirectory(prefix="judge-") as private:
        os.chmod(ipc, 0o700)
        canaries, verdicts = os.path.join(private, "canaries.json"), os.path.join(private, "verdicts.json")
        env = {"GRADER_CELL_TIMEOUT": str(cell_timeout), "GRADER_PROGRESS_FILE": progress.name,
               "GRADER_CANARY_FILE": canaries, **(job_env or {})}
        if spec_dir:
            env.update(GRADER_SANDBOX="1", GRADER_IPC_PREFIX=os.path.join(ipc, "k"), JUPYTER_PATH=spec_dir,
                       GRADER_SANDBOX_UID=str(uid), GRADER_READONLY=str(REPO / "helpers"))
        deadline = start + submission_timeout  # one cap for all the retries together
        while True:
            env["GRADER_SKIP_CELLS"] = ",".join(map(str, skipped))
            left = deadline - time.monotonic()
            if left <= 0:
                return Result(student, lesson, "not graded: " + TIMED_OUT, time.monotonic() - start)
            Path(progress.name).touch()  # the watchdog counts from now
            proc = nbgrader(root, "autograde", lesson, f"--student={student}", "--create", "--force",
                            timeout=left, env=env, stalled_after=cell_timeout + STALL_GRACE)
            graded = root / "autograded" / student / lesson / f"{lesson}.ipynb"
            if proc.returncode == 0 and graded.is_file():
                break
            reason = _reason(proc)
            crashed = reason in (KERNEL_DIED, KERNEL_HUNG)
            if not crashed and busy_retries > 0 and reason != TIMED_OUT:
                busy_retries -= 1  # e.g. another job held the gradebook a moment too long: grading is idempotent
                continue
            cell = _read_int(progress.name)
            if not crashed or cell is None or cell in skipped or len(skipped) >= MAX_CRASHES:
                return Result(student, lesson, "not graded: " + reason, time.monotonic() - start)
            skipped[cell] = reason
        left = deadline - time.monotonic()
        verdict = _judge(root, student, lesson, verdicts, memo, max(60.0, left))
        if "error" in verdict:
            return Result(student, lesson, "not graded: the judge failed: " + verdict["error"].strip().splitlines()[-1][:200],
                          time.monotonic() - start)
        _apply_verdicts(root, student, lesson, verdict)
        flags = tuple(dict.fromkeys(verdict["flags"] + (_read_json(canaries) or [])))
        feedback = nbgrader(root, "generate_feedback", lesson, f"--student={student}", "--force", timeout=600,
                            env={"GRADER_VERDICTS_FILE": verdicts})
    status = "graded"
    if skipped:
        status += " (" + "; ".join(f"cell {cell} skipped: {why}" for cell, why in skipped.items()) + ")"
    if feedback.returncode != 0:
        status += " (feedback failed)"
    return Result(student, lesson, status, time.monotonic() - start, flags)


def _judge(root: Path, student: str, lesson: str, out: str, memo: str | None, timeout: float) -> dict:
    """Run graders/judge.py on the graded notebook (written by nbgrader, in a folder the jail never had)."""
    solution = root / "solutions" / lesson / f"{lesson}.ipynb"
    graded = root / "autograded" / student / lesson / f"{lesson}.ipynb"
    env = {**os.environ, "GRADER_JUDGE_MEMO": memo or ""}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, "-m", "graders.judge", str(solution), str(graded), out], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"it ran past {timeout:.0f} s"}
    return _read_json(out) or {"error": f"it exited with {proc.returncode}: {proc.stderr[-500:]}"}


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


_GRADEBOOK = threading.Lock()  # the pipeline's own writes to the gradebook, one at a time


def _apply_verdicts(root: Path, student: str, lesson: str, verdict: dict) -> None:
    """A judged cell keeps the points the kernel's run gave it only if the judge passed it too."""
    from nbgrader.api import Gradebook

    failed = [cell for cell, v in verdict["cells"].items() if not v["passed"]]
    if not failed:
        return
    for attempt in range(10):
        try:
            with _GRADEBOOK, Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
                for cell in failed:
                    gb.find_grade(cell, lesson, lesson, student).auto_score = 0.0
                gb.db.commit()
            return
        except Exception as error:  # noqa: BLE001 - another job's nbgrader held the database: try again
            if "locked" not in str(error) or attempt == 9:
                raise
            time.sleep(0.5 * (attempt + 1))


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def _reason(proc) -> str:
    text = proc.stdout + proc.stderr
    if STALLED in text:
        return KERNEL_HUNG
    if "timed out after" in text:
        return TIMED_OUT
    if "DeadKernelError" in text or "Kernel died" in text or "kernel died" in text:
        return KERNEL_DIED
    if "CellTimeoutError" in text:  # the interrupt after a cell's timeout went unanswered (e.g. a fork bomb)
        return KERNEL_HUNG
    errors = [l.strip() for l in text.splitlines() if re.match(r"^\s+\w+(Error|Exception): ", l)]
    if errors:
        return errors[-1][:200]
    lines = [l for l in text.splitlines() if "ERROR" in l]
    return lines[-1][:200] if lines else f"nbgrader exited with {proc.returncode}"


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
            out.writerow([r.student, r.lesson, r.status, "; ".join(r.flags), sum(per_cell.values()), sum(maximum.values()),
                          round(r.seconds, 1), *[per_cell.get(c, "") for c in cells]])
    return path


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
    parser.add_argument("command", choices=["release", "grade"])
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at the same time")
    parser.add_argument("--cell-timeout", type=int, default=300)
    parser.add_argument("--submission-timeout", type=int, default=3600)
    parser.add_argument("--unsandboxed", action="store_true", help="run student code without the sandbox (unsafe)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.command == "release":
        for path in release(root):
            print("released", path.relative_to(root))
        return 0
    try:
        results = grade(root, args.cell_timeout, args.submission_timeout, args.jobs, sandboxed=not args.unsandboxed)
    except SandboxUnavailable as error:
        print(error, file=sys.stderr)
        return 2
    if args.unsandboxed:
        print("WARNING: graded without the sandbox: student code ran with your rights.", file=sys.stderr)
    for r in results:
        print(f"{r.student:<20} {r.lesson:<24} {r.status}")
    print(f"grades: {root / 'grades.csv'}  feedback: {root / 'feedback'}  report: {report(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
