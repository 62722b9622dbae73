"""The Dask grading cluster admits only the instructor's machines: mutual TLS with the certificates of `make certs`,
checked on a real `dask scheduler` and real `dask worker`s started with the commands of the website's cluster page
(website/pages/cluster.md), on 127.0.0.1."""

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

import course_docs
from graders import cluster, pipeline

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LOCAL = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return s.getsockname()[1]


def _readme_command(program: str) -> str:
    """The cluster page's `dask scheduler` or `dask worker` command, as written."""
    block = course_docs.bash_block("cluster.md", "Many machines: grading on a Dask cluster")
    (line,) = [line for line in block.splitlines() if f".venv/bin/dask {program} " in line and not line.startswith("#")]
    return line.rstrip("& ")


def _on_this_machine(command: str, port: int, certs: Path) -> str:
    """A cluster page command on 127.0.0.1 only (`port` for 8786, any free port for HTTP) with the certificates in `certs`."""
    command = re.sub(r"\b8786\b", str(port), command.replace(" --host 0.0.0.0", "")).replace("certs/", f"{certs}/")
    return command.replace(f" --dashboard-address {LOCAL}:8787", "") + f" --host {LOCAL} --dashboard-address {LOCAL}:0"


def _start(command: str, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", COORDINATOR=LOCAL)
    with open(log, "wb") as out:
        return subprocess.Popen(["bash", "-c", command], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def _log_once_it_says(log: Path, start: int, *needles: str, timeout: float = 15) -> str:
    """The log from offset `start` once it holds every needle (the process writes it on its own schedule)."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text()[start:]
        if all(needle in text for needle in needles) or time.monotonic() > deadline:
            assert all(needle in text for needle in needles), text[-3000:]
            return text
        time.sleep(0.2)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return cluster.make_certificates(tmp_path_factory.mktemp("instructor") / "certs")["ca"].parent


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    """Another CA, and a certificate it signed: what someone who is not the instructor can make."""
    return cluster.make_certificates(tmp_path_factory.mktemp("stranger") / "certs")["ca"].parent


@pytest.fixture(scope="module")
def scheduler(certs, tmp_path_factory):
    """The cluster page's scheduler command on 127.0.0.1: (its address, its log)."""
    port, log = _free_port(), tmp_path_factory.mktemp("scheduler") / "scheduler.log"
    proc = _start(_on_this_machine(_readme_command("scheduler"), port, certs), log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the scheduler did not listen within 60 s: " + log.read_text()[-3000:]
            with socket.socket() as s:
                if s.connect_ex((LOCAL, port)) == 0:
                    break
            time.sleep(0.2)
        yield f"tls://{LOCAL}:{port}", log
    finally:
        _stop(proc)


def test_only_a_worker_with_the_instructors_certificate_joins_and_gets_tasks(scheduler, certs, foreign, tmp_path):
    """A task waits while a worker over plain TCP, and one with another CA's certificate (trusting the course's CA),
    try to join: they never appear and never run it; the cluster page's worker, with the certificate, joins and runs it."""
    address, scheduler_log = scheduler
    port = int(address.rsplit(":", 1)[1])
    worker = _on_this_machine(_readme_command("worker"), port, certs)
    plain = f"PYTHONPATH=$PWD .venv/bin/dask worker tcp://{LOCAL}:{port} --host {LOCAL} --dashboard-address {LOCAL}:0"
    stranger = worker.replace(f"{certs}/cluster.", f"{foreign}/cluster.")
    refused_before = len(scheduler_log.read_text())

    def worker_address() -> str:  # local, so that it travels by value: the workers cannot import the tests
        from distributed import get_worker

        return get_worker().address

    with cluster.connect(address, certs=certs) as client:
        assert client.security.require_encryption and client.scheduler_info()["workers"] == {}
        waiting = client.submit(worker_address, pure=False)
        rogues = {name: _start(command, tmp_path / f"{name}.log") for name, command in
                  (("plain", plain), ("stranger", stranger))}
        try:
            deadline = time.monotonic() + 60
            while any(proc.poll() is None for proc in rogues.values()) and time.monotonic() < deadline:
                assert client.scheduler_info()["workers"] == {}, "a worker without the certificate joined"
                time.sleep(0.2)
        finally:
            for proc in rogues.values():
                _stop(proc)
        for name, proc in rogues.items():
            assert proc.returncode != 0, (tmp_path / f"{name}.log").read_text()[-3000:]
            assert "Nanny failed to start" in (tmp_path / f"{name}.log").read_text()
        # the scheduler itself refused them: the stranger trusts the course's CA, but the scheduler not its CA
        refusals = _log_once_it_says(scheduler_log, refused_before, "wrong version number", "certificate verify failed")
        assert "Register worker" not in refusals, refusals
        assert client.scheduler_info()["workers"] == {} and not waiting.done()

        good = _start(worker, tmp_path / "worker.log")
        try:
            ran_on = waiting.result(timeout=60)
            workers = client.scheduler_info()["workers"]
            assert list(workers) == [ran_on] and ran_on.startswith(f"tls://{LOCAL}:")
            assert client.submit(lambda: 1).result(timeout=30) == 1
        finally:
            _stop(good)


def test_a_client_without_the_certificate_cannot_connect(scheduler, certs, foreign):
    from distributed import Client

    address, scheduler_log = scheduler
    port = int(address.rsplit(":", 1)[1])
    before = scheduler_log.read_text()
    for attempt in ({"address": f"tcp://{LOCAL}:{port}"},
                    {"address": address, "security": cluster.tls_security(
                        str(certs / "ca.pem"), str(foreign / "cluster.pem"), str(foreign / "cluster.key"))}):
        with pytest.raises(OSError):
            Client(**attempt, timeout="3s")
    # trusting the course's CA, without a certificate of one's own: the scheduler ends the connection unheard
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    context.check_hostname = False
    with socket.create_connection((LOCAL, port), timeout=10) as raw, context.wrap_socket(raw) as tls:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            tls.sendall(b"\0" * 64)
            if tls.recv(64) == b"":
                raise ConnectionError("closed")
    refusals = _log_once_it_says(scheduler_log, len(before), "wrong version number", "certificate verify failed",
                                 "peer did not return a certificate")
    assert refusals.count("TLS handshake failed") >= 3 and "Receive client connection" not in refusals, refusals


def test_grading_refuses_a_plain_tcp_scheduler_without_the_opt_in(tmp_path, capsys):
    (tmp_path / "solutions").mkdir()
    with pytest.raises(ValueError, match="--insecure-tcp"):
        pipeline.grade(tmp_path, sandboxed=False, scheduler="tcp://127.0.0.1:9")
    with pytest.raises(SystemExit) as refused:
        pipeline.main(["grade", "--root", str(tmp_path), "--scheduler", "tcp://127.0.0.1:9"])
    assert refused.value.code == 2 and "--insecure-tcp" in capsys.readouterr().err
    cluster.check_scheduler("tcp://127.0.0.1:9", insecure_tcp=True)
    for refused_address in ("127.0.0.1:9", "ucx://127.0.0.1:9", "ws://127.0.0.1:9"):
        with pytest.raises(ValueError, match="scheduler"):
            cluster.check_scheduler(refused_address)
    with pytest.raises(ValueError, match="make certs"):
        cluster.check_scheduler("tls://127.0.0.1:9", certs=tmp_path / "none")


def test_a_client_that_does_not_require_tls_is_refused():
    """A Client handed to grade() must be one that talks only mutual TLS, unless plain TCP was opted in."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host=LOCAL, dashboard_address=None) as plain, \
            Client(plain) as client:
        with pytest.raises(ValueError, match="mutual TLS"):
            next(cluster.run(client, [], b""))
        cluster.require_authenticated(client, insecure_tcp=True)


def test_the_local_cluster_speaks_mutual_tls():
    """local:N and the tests' LocalCluster: TLS with a CA of their own, the Client taking the cluster's security."""
    from distributed import Client

    with cluster.local_cluster(1) as local, Client(local) as client:
        assert client.scheduler.address.startswith(f"tls://{LOCAL}:") and client.security.require_encryption
        assert all(address.startswith("tls://") for address in client.scheduler_info()["workers"])
        assert client.submit(lambda: 1).result(timeout=60) == 1
        cluster.require_authenticated(client)


def test_make_certificates_writes_private_keys_once(tmp_path, foreign):
    folder = tmp_path / "certs"
    paths = cluster.make_certificates(folder)
    assert {p.name for p in folder.iterdir()} == {"ca.pem", "ca.key", "cluster.pem", "cluster.key"}
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in (paths["ca_key"], paths["key"])} == {0o600}
    verify = ["openssl", "verify", "-CAfile", str(paths["ca"]), str(paths["cert"])]
    assert subprocess.run(verify, capture_output=True).returncode == 0
    assert subprocess.run(verify[:-1] + [str(foreign / "cluster.pem")], capture_output=True).returncode != 0
    before = {p: p.read_bytes() for p in paths.values()}
    paths["key"].chmod(0o644)
    assert cluster.make_certificates(folder) == paths  # again: the same files, the key private again
    assert {p: p.read_bytes() for p in paths.values()} == before and paths["key"].stat().st_mode & 0o777 == 0o600
    paths["cert"].unlink()
    cluster.make_certificates(folder)  # a lost cluster certificate: issued again by the same CA
    assert paths["ca"].read_bytes() == before[paths["ca"]] and paths["cert"].read_bytes() != before[paths["cert"]]
    assert subprocess.run(verify, capture_output=True).returncode == 0
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []
    paths["ca_key"].unlink()  # a grading machine's copy: no CA key, so nothing to make there
    with pytest.raises(ValueError, match="CA"):
        cluster.make_certificates(folder)
    for bad in ("", None):
        with pytest.raises(ValueError, match="folder"):
            cluster.make_certificates(bad)


def test_the_slurm_workers_run_the_readme_worker_command_with_tls():
    sbatch = (REPO / "graders" / "dask-workers.sbatch").read_text()
    worker = _readme_command("worker").replace("tls://$COORDINATOR:8786", '"tls://$COORDINATOR:8786"')
    worker = worker.replace("--nthreads 2", "--nthreads")
    assert worker.replace("PYTHONPATH=$PWD ", 'PYTHONPATH=$PWD "${run[@]}" ') in sbatch
    assert "export DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True" in sbatch
    assert subprocess.run(["bash", "-n", REPO / "graders" / "dask-workers.sbatch"]).returncode == 0
