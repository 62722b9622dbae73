"""The README's commands: `make lab` really serves the course; setup is idempotent."""

import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

from helpers.launch import free_port

REPO = Path(__file__).resolve().parent.parent


def test_setup_is_up_to_date_after_a_run():
    # `make test` ran the setup before these tests: a second setup must have nothing to do
    assert subprocess.run(["make", "-q", "setup"], cwd=REPO).returncode == 0


def test_make_lab_serves_the_course():
    port = free_port()
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token= --ServerApp.password="
    proc = subprocess.Popen(["make", "lab", f"LAB_ARGS={args}"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/notebooks/01-dataparallel", timeout=5) as r:
                    listing = json.load(r)
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
                assert time.time() < deadline, "JupyterLab did not answer within 90 s"
                time.sleep(1)
        assert "01-dataparallel.ipynb" in {item["name"] for item in listing["content"]}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/kernelspecs", timeout=5) as r:
            assert "python3" in json.load(r)["kernelspecs"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/", timeout=5) as r:
            shown = {item["name"] for item in json.load(r)["content"]}
        assert "solutions" in shown and not [name for name in shown if name.endswith(".egg-info")], shown
        # the formgrader reads the course's nbgrader config (graders/nbgrader_config.py): the lessons, and a
        # gradebook nbgrader's `alembic` (found on PATH) has stamped
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/formgrader/api/assignments", timeout=30) as r:
            assignments = {a["name"]: a for a in json.load(r)}
        assert set(assignments) >= {"01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu"}, assignments
        assert assignments["02-ddp"]["source_path"] == "solutions/02-ddp"
        with sqlite3.connect(REPO / "gradebook.db") as db:
            assert db.execute("select count(*) from alembic_version").fetchone()[0] == 1
            # make lab recorded the lessons first: the formgrader's pages find them in the gradebook
            assert {name for (name,) in db.execute("select name from assignment")} >= set(assignments)
        # the training progress bars (widgets) are saved in the notebook, so that a reopened notebook shows them
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab/api/settings/@jupyter-widgets/jupyterlab-manager:plugin",
                                    timeout=30) as r:
            assert json.load(r)["schema"]["properties"]["saveState"]["default"] is True  # overrides.json
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
