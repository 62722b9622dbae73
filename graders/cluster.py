"""Grading on a Dask cluster: the workers execute and judge the submissions, the coordinator records them.

    python -m graders.pipeline grade --scheduler tls://HOST:8786    (make grade SCHEDULER=tls://HOST:8786)
    python -m graders.pipeline grade --scheduler local:4             (a LocalCluster of 4 worker processes)
    python -m graders.cluster certs [DIR]                            (make certs: the cluster's CA and certificate)

Each task is one submission, sent as data (graders.submission.Task); the worker runs it in its own sandbox
(a block of sandbox uids and cgroups per worker process, like `make grade` on one machine) and sends back
the graded notebook and the judge's verdict (graders.submission.Outcome). Only the coordinator writes the
gradebook, autograded/, feedback/ and grades.csv. When a worker dies mid-submission the scheduler runs the
task again on another worker (Dask's `allowed-failures`), and the coordinator records each submission once.

A worker is `dask worker` started from a checkout of the course with its environment (`make setup`), as
root for the sandbox; graders.course.course_digest() refuses to grade on a worker whose helpers or grader
differ from the coordinator's. The scheduler runs whatever it is sent, as root on the workers, and a task
carries the lesson's hidden tests: the cluster speaks mutual TLS, every connection authenticated by a
certificate of the course's own CA (make_certificates), so only the instructor's machines can send work,
join as a worker or hand back a result. Plain tcp:// needs an explicit opt-in (insecure_tcp, --insecure-tcp).
"""

from __future__ import annotations

import argparse
import atexit
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import uuid
import weakref
from pathlib import Path

from graders import sandbox, worker
from graders.course import REPO
from graders.slots import Slots
from graders.submission import Outcome, Task

WAIT_FOR_WORKERS = 600  # seconds for the first worker to join (a batch system may take a while to start them)
CERTS = REPO / "certs"  # make certs (kept out of git); each grading machine holds a copy, less ca.key
CERT_FILES = {"ca": "ca.pem", "ca_key": "ca.key", "cert": "cluster.pem", "key": "cluster.key"}
CERT_DAYS = 3650
INSECURE_OPT_IN = "--insecure-tcp (make grade INSECURE_TCP=1)"
# A local cluster's workers share the judge's references through the folder this variable names (local_cluster).
SHARED_MEMO = "GRADER_CLUSTER_JUDGE_MEMO"
_SLOTS: dict[bool, Slots] = {}
_SLOTS_LOCK = threading.Lock()

# openssl's settings for the CA and for the one certificate the scheduler, the workers and the coordinator share
# (Dask checks the CA's signature, not host names: one certificate serves every machine).
OPENSSL_CONFIG = """\
[req]
distinguished_name = name
prompt = no
[name]
CN = course grading
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[cluster]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:course-grading-cluster
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def certificate_paths(folder) -> dict[str, Path]:
    """The files of make_certificates in `folder`: ca, ca_key, cert (the cluster's), key (the cluster's)."""
    if not folder:
        raise ValueError(f"folder must be a directory path, got {folder!r}")
    return {name: Path(folder) / file for name, file in CERT_FILES.items()}


def make_certificates(folder=CERTS) -> dict[str, Path]:
    """A CA, and the cluster's certificate and key signed by it, in `folder` (made mode 0700; keys 0600), with
    openssl. Idempotent: existing files are kept, since the grading machines hold copies of them; a missing
    cluster certificate is issued again by the existing CA."""
    paths = certificate_paths(folder)
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is needed to make the cluster's certificates (apt-get install openssl)")
    has_ca = paths["ca"].is_file() and paths["ca_key"].is_file()
    has_cert = paths["cert"].is_file() and paths["key"].is_file()
    if not has_ca and (paths["cert"].exists() or paths["key"].exists()):
        raise ValueError(f"folder {folder} holds a cluster certificate but not its CA's key ({CERT_FILES['ca_key']}): "
                         "a grading machine takes its copy from the coordinator; on the coordinator, remove the "
                         "folder and make them again")
    Path(folder).mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".certs-", dir=folder) as scratch:  # 0700: keys never readable
        config = Path(scratch) / "openssl.cnf"
        config.write_text(OPENSSL_CONFIG)
        if not has_ca:
            _openssl("req", "-x509", "-config", config, "-extensions", "ca", *_new_key(Path(scratch) / "ca.key"),
                     "-subj", "/CN=course grading CA", "-days", CERT_DAYS, "-out", Path(scratch) / "ca.pem")
            _move_into(Path(scratch), paths, "ca", "ca_key")
        if not has_cert:
            request = Path(scratch) / "cluster.csr"
            _openssl("req", "-new", "-config", config, *_new_key(Path(scratch) / "cluster.key"),
                     "-subj", "/CN=course grading cluster", "-out", request)
            _openssl("x509", "-req", "-in", request, "-CA", paths["ca"], "-CAkey", paths["ca_key"],
                     "-set_serial", secrets.randbits(120), "-days", CERT_DAYS,
                     "-extfile", config, "-extensions", "cluster", "-out", Path(scratch) / "cluster.pem")
            _move_into(Path(scratch), paths, "cert", "key")
    for key in (paths["ca_key"], paths["key"]):
        key.chmod(0o600)
    return paths


def _new_key(path: Path) -> list:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", path]


def _openssl(*args) -> None:
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()[-1000:]}")


def _move_into(scratch: Path, paths: dict[str, Path], cert: str, key: str) -> None:
    (scratch / paths[key].name).chmod(0o600)
    for name in (key, cert):  # the certificate last: its presence means the pair is complete
        (scratch / paths[name].name).replace(paths[name])


def tls_security(ca: str, cert: str, key: str):
    """Dask's Security for mutual TLS in every role (scheduler, worker, client), encryption required: `ca`, `cert`
    and `key` are file paths or PEM texts. Dask's TLS contexts require the peer's certificate and check that the
    CA signed it, both ways; they do not check host names."""
    from distributed.security import Security

    roles = {f"tls_{role}_{kind}": value for role in ("client", "scheduler", "worker")
             for kind, value in (("cert", cert), ("key", key))}
    return Security(require_encryption=True, tls_ca_file=ca, **roles)


def temporary_security():
    """Mutual TLS for a cluster of this process: a CA made for it alone, whose key is deleted at once (no one can
    issue another certificate), and its certificate and key, kept in memory."""
    with tempfile.TemporaryDirectory(prefix="dask-tls-") as scratch:
        paths = make_certificates(scratch)
        return tls_security(paths["ca"].read_text(), paths["cert"].read_text(), paths["key"].read_text())


def check_scheduler(scheduler: str, insecure_tcp: bool = False, certs=None) -> None:
    """Refuse a scheduler address that would let others in: tls:// needs the certificates of make_certificates in
    `certs` (default: CERTS); plain tcp:// needs `insecure_tcp`; local:N needs N >= 1."""
    if not scheduler or not isinstance(scheduler, str):
        raise ValueError(f"scheduler must be an address such as tls://host:8786, or local:N, got {scheduler!r}")
    scheme = scheduler.split("://")[0] if "://" in scheduler else "tcp"  # Dask's default for host:port
    if scheduler.startswith("local:"):
        workers = scheduler.removeprefix("local:")
        if not workers.isdigit() or int(workers) < 1:
            raise ValueError(f"scheduler local:N needs a number of workers N >= 1, got {scheduler!r}")
    elif scheme == "tls":
        missing = [str(path) for name, path in certificate_paths(certs or CERTS).items()
                   if name != "ca_key" and not path.is_file()]
        if missing:
            raise ValueError(f"scheduler {scheduler}: the cluster's certificates are missing ({', '.join(missing)}): "
                             "run `make certs` on the coordinator (website/pages/cluster.md)")
    elif scheme != "tcp":
        raise ValueError(f"scheduler {scheduler!r}: grading takes a tls:// address, or local:N")
    elif not insecure_tcp:
        raise ValueError(f"scheduler {scheduler}: refused, plain TCP authenticates nobody: whoever reaches the "
                         "scheduler runs code as root on every worker, and any machine can join as a worker, receive "
                         "the hidden tests and return grades. Use tls:// with the certificates of `make certs` "
                         f"(website/pages/cluster.md), or opt in to plain TCP on a private network: {INSECURE_OPT_IN}")


def connect(scheduler: str, insecure_tcp: bool = False, certs=None):
    """A Dask client for `scheduler` (checked by check_scheduler): tls://host:8786 with the certificates in `certs`
    (default: CERTS), tcp://host:8786 with `insecure_tcp`, or local:N for a LocalCluster of N worker processes
    with one thread each on this machine."""
    from distributed import Client

    check_scheduler(scheduler, insecure_tcp, certs)
    if scheduler.startswith("local:"):
        return Client(local_cluster(int(scheduler.removeprefix("local:"))))
    if scheduler.startswith("tls://"):
        paths = certificate_paths(certs or CERTS)
        return Client(scheduler, security=tls_security(str(paths["ca"]), str(paths["cert"]), str(paths["key"])),
                      timeout="60s")
    return Client(scheduler, timeout="60s")


def local_cluster(workers: int):
    """A LocalCluster of `workers` processes with one thread each, on this machine, over mutual TLS
    (temporary_security): on loopback TCP any user of this machine could send its workers code to run as their
    user, root when they grade in the sandbox. It has no dashboard, so its workers keep no statistical profile
    either (sampling their threads every 10 ms, for nobody). A Client(cluster) takes its security."""
    from distributed import LocalCluster

    if type(workers) is not int or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    # The judge's references (torch's own results), computed once for all the workers of this machine, in a folder
    # only this user may open; removed with the cluster.
    memo = tempfile.mkdtemp(prefix="judge-memo-")
    # Each worker's Nanny sets these in the worker process it starts, and again when it restarts a dead one.
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, protocol="tls://",
                           security=temporary_security(), dashboard_address=None, env={SHARED_MEMO: memo},
                           config={"distributed.worker.profile.enabled": False})
    weakref.finalize(cluster, shutil.rmtree, memo, True)
    return cluster


def require_authenticated(client, insecure_tcp: bool = False) -> None:
    """Refuse a client that would take results from an unauthenticated worker. With mutual TLS and encryption
    required, every connection of the client (to the scheduler, and to the workers it fetches results from)
    checks that the peer holds a certificate of the cluster's CA: a result comes only from a certificate holder."""
    address = client.scheduler.address
    if not insecure_tcp and not (address.startswith("tls://") and client.security.require_encryption):
        raise ValueError(f"scheduler {address}: the client does not require mutual TLS, so a result could come from "
                         f"a worker nobody authenticated; connect over tls:// (connect), or opt in: {INSECURE_OPT_IN}")


def run(scheduler, tasks: list[Task], template: bytes, log=None, insecure_tcp: bool = False, certs=None):
    """Grade `tasks` on the cluster (an address, local:N, or a Client); yield (task, outcome) as they finish.
    A plain-TCP cluster only with `insecure_tcp`; `certs`: the folder of make_certificates (default: CERTS)."""
    from distributed import Client, as_completed

    client = scheduler if isinstance(scheduler, Client) else connect(scheduler, insecure_tcp, certs)
    try:
        require_authenticated(client, insecure_tcp)
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
                outcome = Outcome(f"not graded: the cluster failed on it ({why})"[:300])
            future.release()
            yield task, outcome
    finally:
        if client is not scheduler:
            cluster = client.cluster
            client.close()
            if cluster is not None:
                cluster.close()


def on_worker(task: Task, template: bytes) -> Outcome:
    """The task a Dask worker runs: one submission, in one of this worker process's sandbox slots."""
    can_sandbox = task.sandboxed and sandbox.available() is None
    return worker.execute(task, template, worker_slots(can_sandbox))  # refuses a task it cannot sandbox


def worker_slots(sandboxed: bool) -> Slots:
    """This worker process's slots: as many as it has threads, made on its first task, removed at its exit."""
    from distributed import get_worker

    with _SLOTS_LOCK:
        if sandboxed not in _SLOTS:
            _SLOTS[sandboxed] = slots = Slots(get_worker().state.nthreads, sandboxed, memo=os.environ.get(SHARED_MEMO))
            atexit.register(slots.close)
        return _SLOTS[sandboxed]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The Dask grading cluster's CA, and its certificate and key.")
    parser.add_argument("command", choices=["certs"])
    parser.add_argument("folder", nargs="?", type=Path, default=CERTS, help="where (default: certs/ of this checkout)")
    args = parser.parse_args(argv)
    for name, path in make_certificates(args.folder).items():
        print(f"{name:<7} {path}")
    print(f"copy {CERT_FILES['ca']}, {CERT_FILES['cert']} and {CERT_FILES['key']} into certs/ of each grading "
          f"machine (never {CERT_FILES['ca_key']}): website/pages/cluster.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
