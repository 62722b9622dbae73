"""Grading on a Dask cluster: the workers execute and judge the submissions, the coordinator records them.

    python -m graders.pipeline grade --scheduler tcp://HOST:8786    (make grade SCHEDULER=tcp://HOST:8786)
    python -m graders.pipeline grade --scheduler local:4             (a LocalCluster of 4 worker processes)

Each task is one submission, sent as data (graders.pipeline.Task); the worker runs it in its own sandbox
(a block of sandbox uids and cgroups per worker process, like `make grade` on one machine) and sends back
the graded notebook and the judge's verdict (graders.pipeline.Outcome). Only the coordinator writes the
gradebook, autograded/, feedback/ and grades.csv. When a worker dies mid-submission the scheduler runs the
task again on another worker (Dask's `allowed-failures`), and the coordinator records each submission once.

A worker is `dask worker` started from a checkout of the course with its environment (`make setup`), as
root for the sandbox; graders.pipeline.course_digest() refuses to grade on a worker whose helpers or grader
differ from the coordinator's. The scheduler runs whatever it is sent, as root on the workers: keep it on
a private network, or use Dask's TLS (tls:// addresses with certificates).
"""

from __future__ import annotations

import atexit
import threading
import uuid

from graders import pipeline

WAIT_FOR_WORKERS = 600  # seconds for the first worker to join (a batch system may take a while to start them)
_SLOTS: dict[bool, pipeline.Slots] = {}
_SLOTS_LOCK = threading.Lock()


def connect(scheduler: str):
    """A Dask client for `scheduler`: an address (tcp://host:8786, tls://..., a Gateway's), or local:N for a
    LocalCluster of N worker processes with one thread each on this machine."""
    from distributed import Client

    if not scheduler:
        raise ValueError("scheduler must be an address such as tcp://host:8786, or local:N")
    if scheduler.startswith("local:"):
        workers = scheduler.removeprefix("local:")
        if not workers.isdigit() or int(workers) < 1:
            raise ValueError(f"scheduler local:N needs a number of workers N >= 1, got {scheduler!r}")
        return Client(local_cluster(int(workers)))
    return Client(scheduler, timeout="60s")


def local_cluster(workers: int):
    """A LocalCluster of `workers` processes with one thread each, over TCP, on this machine. It has no dashboard,
    so its workers keep no statistical profile either (sampling their threads every 10 ms, for nobody)."""
    from distributed import LocalCluster

    if type(workers) is not int or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    # Each worker's Nanny sets this in the worker process it starts, and again when it restarts a dead one.
    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, protocol="tcp://",
                        dashboard_address=None, config={"distributed.worker.profile.enabled": False})


def run(scheduler, tasks: list[pipeline.Task], template: bytes, log=None):
    """Grade `tasks` on the cluster (an address, local:N, or a Client); yield (task, outcome) as they finish."""
    from distributed import Client, as_completed

    client = scheduler if isinstance(scheduler, Client) else connect(scheduler)
    try:
        if log:
            log(f"waiting for the workers of {client.scheduler.address}")
        client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS)
        if log:
            workers = client.scheduler_info().get("workers", {})
            log(f"grading on {client.scheduler.address}: {len(workers)} workers, "
                f"{sum(w.get('nthreads', 0) for w in workers.values())} threads")
        shared = client.scatter(template, broadcast=True)
        run_id = uuid.uuid4().hex[:12]
        futures = {client.submit(on_worker, task, shared, key=f"grade-{task.student}-{task.lesson}-{run_id}"): task
                   for task in tasks}
        for future in as_completed(futures):
            task = futures[future]
            try:
                outcome = future.result()
            except Exception as error:  # noqa: BLE001 - e.g. KilledWorker: the task killed every worker it met
                why = " ".join(f"{type(error).__name__}: {error}".split())
                outcome = pipeline.Outcome(f"not graded: the cluster failed on it ({why})"[:300])
            future.release()
            yield task, outcome
    finally:
        if client is not scheduler:
            cluster = client.cluster
            client.close()
            if cluster is not None:
                cluster.close()


def on_worker(task: pipeline.Task, template: bytes) -> pipeline.Outcome:
    """The task a Dask worker runs: one submission, in one of this worker process's sandbox slots."""
    can_sandbox = task.sandboxed and pipeline.sandbox.available() is None
    return pipeline.execute(task, template, worker_slots(can_sandbox))  # refuses a task it cannot sandbox


def worker_slots(sandboxed: bool) -> pipeline.Slots:
    """This worker process's slots: as many as it has threads, made on its first task, removed at its exit."""
    from distributed import get_worker

    with _SLOTS_LOCK:
        if sandboxed not in _SLOTS:
            _SLOTS[sandboxed] = slots = pipeline.Slots(get_worker().state.nthreads, sandboxed)
            atexit.register(slots.close)
        return _SLOTS[sandboxed]
