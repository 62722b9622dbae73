"""One class graded once for the whole test session (conftest.py's `graded_class`), on a real Dask LocalCluster.

The class: the hostile and broken lesson-1 corpus (tests/corpus.py's CASES, only where the sandbox is
available), and every lesson's solution, its released notebook and its Turkish edition with a wrong answer and correct
answers that warn (corpus.CLASS). Grading leaves the lessons' demonstrations out, as it does by default, but for the submissions
of corpus.RUN_DEMONSTRATIONS (the blank and the Turkish ones, whose outputs the website shows). It is graded by two worker processes
over TCP; one of them is killed (SIGKILL) mid-submission, so that every test reading these grades also checks that a
dead worker cost nothing.
test_grading.py, test_corpus.py and test_cluster.py read the results.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from corpus import CASES, CLASS, LESSON, RUN_DEMONSTRATIONS, write_class_submission
from graders import pipeline, sandbox

REPO = Path(__file__).resolve().parent.parent
SANDBOXED = sandbox.available() is None
# A cell's limit, in CPU-seconds of its job (graders/cell_limit.py: a busy machine slows a cell, never fails it), above the
# slowest cell of lessons 2-4. Lesson 1's cells take a second or less, demonstrations included: its infinite loop pays
# 10 CPU-seconds (it paid 20 until 2026-12-06: 47 s of the class's 252 on two workers). Its fork bomb then meets the
# limit or its job's process limit, whichever comes first (corpus._only_the_bombs_cell_was_skipped takes either).
CELL_TIMEOUT = 120
LESSON_TIMEOUTS = {LESSON: 10}


class Listener:
    """A TCP server on the host's loopback that records whether anybody reached it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                pass

    def close(self):
        self.running = False
        self.thread.join()
        self.sock.close()


@dataclass
class Graded:
    root: Path
    results: dict  # (student, lesson) -> graders.submission.Result
    rows: dict  # (student, lesson) -> grades.csv row
    ctx: dict  # what the corpus's attacks aimed at
    connections: int  # how many reached the host's listener from the jail
    killed: dict = field(default_factory=dict)  # the worker killed mid-submission: pid, key, its processes then
    log: list = field(default_factory=list)  # the coordinator's progress lines
    cleanup: list = field(default_factory=list)  # folders made outside the course for the attacks
    profiling: dict = field(default_factory=dict)  # worker address -> whether Dask's statistical profiler ran
    memos: dict = field(default_factory=dict)  # worker address -> its slots' judge memo folders, and the files there

    def close(self) -> None:
        for folder in self.cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def _attack_context(root: Path, listener: Listener) -> tuple[dict, list[Path]]:
    host_tmp = Path(tempfile.mkdtemp(prefix="corpus-canary-"))
    secret = host_tmp / "secret.txt"  # a root-only file outside the course
    secret.write_text("TOPSECRET")
    secret.chmod(0o600)
    os.environ["INSTRUCTOR_TOKEN"] = "token-only-the-instructor-has"  # must not reach the jail
    elsewhere = Path(tempfile.mkdtemp(prefix="course-canary-", dir="/var/lib" if os.access("/var/lib", os.W_OK) else None))
    (elsewhere / "data.txt").write_text("ELSEWHERE-CONTENT")
    elsewhere.chmod(0o755)
    (elsewhere / "data.txt").chmod(0o644)  # readable by anyone: only the jail's view of the machine protects it
    ctx = {"repo": REPO, "root": root, "host_tmp": host_tmp, "host_tmp_name": host_tmp.name, "port": listener.port,
           "secret": secret, "env_secret": os.environ["INSTRUCTOR_TOKEN"], "elsewhere": elsewhere / "data.txt"}
    return ctx, [host_tmp, elsewhere]


def kill_a_busy_worker(client, killed: dict, stop: threading.Event) -> None:
    """Once a worker's kernel runs a submission, kill the worker process (SIGKILL, no goodbye)."""
    while not stop.is_set():
        pids = client.run(os.getpid)
        for address, keys in client.processing().items():
            if not keys or address not in pids:
                continue
            worker = psutil.Process(pids[address])
            # mid-submission: a kernel runs the submission's cells, in the jail of its launcher (nbgrader itself runs as
            # a fork of the worker's nbgrader server, the kernel as a fork of its warm kernel server: both stay up)
            if any("graders/sandbox.py" in _cmdline(c) for c in worker.children(recursive=True)):
                time.sleep(2)
                killed.update(pid=worker.pid, key=client.processing().get(address, keys)[0],
                              children=worker.children(recursive=True))
                os.kill(worker.pid, signal.SIGKILL)
                return
        time.sleep(0.2)


def _judge_memos() -> list:
    from graders import cluster

    return [(slots.memo, sorted(os.listdir(slots.memo))) for slots in cluster._SLOTS.values()]


def _cmdline(process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # it ended meanwhile
        return ""


def grade_the_class(root: Path) -> Graded:
    import dask
    from distributed import Client

    from graders import cluster as dask_cluster

    shutil.copytree(REPO / "solutions", root / "solutions")
    listener = Listener()
    ctx, cleanup = _attack_context(root, listener)
    for case in CASES if SANDBOXED else []:  # the attacks only ever run in the sandbox
        folder = root / "submitted" / case.name / LESSON
        folder.mkdir(parents=True)
        case.write(folder, REPO, ctx)
    for student, lessons in CLASS.items():
        for lesson, edit in lessons.items():
            folder = root / "submitted" / student / lesson
            folder.mkdir(parents=True)
            write_class_submission(folder, REPO, lesson, edit)
    graded = Graded(root, {}, {}, ctx, 0, cleanup=cleanup)
    stop = threading.Event()
    try:
        with dask_cluster.local_cluster(2) as cluster, Client(cluster) as client:
            killer = threading.Thread(target=kill_a_busy_worker, args=(client, graded.killed, stop), daemon=True)
            killer.start()
            results = pipeline.grade(root, cell_timeout=CELL_TIMEOUT, submission_timeout=900, sandboxed=SANDBOXED,
                                     scheduler=client, log=graded.log.append, lesson_timeouts=LESSON_TIMEOUTS,
                                     run_demonstrations=RUN_DEMONSTRATIONS)
            stop.set()
            killer.join(timeout=30)
            graded.profiling = client.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
            graded.memos = client.run(_judge_memos)
    finally:
        listener.close()
        os.environ.pop("INSTRUCTOR_TOKEN", None)
    graded.connections = listener.connections
    graded.results = {(r.student, r.lesson): r for r in results}
    with open(root / "grades.csv") as f:
        graded.rows = {(row["student"], row["lesson"]): row for row in csv.DictReader(f)}
    return graded
