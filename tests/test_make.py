"""The README's commands: `make lab` really serves the lessons (and `make instructor` the course); setup is
idempotent."""

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers.launch import free_port

REPO = Path(__file__).resolve().parent.parent


def test_setup_is_up_to_date_after_a_run():
    # `make test` ran the setup before these tests: a second setup must have nothing to do
    assert subprocess.run(["make", "-q", "setup"], cwd=REPO).returncode == 0


@contextlib.contextmanager
def _served(target: str, *settings: str):
    """`make TARGET SETTINGS...` serving JupyterLab on a free port; its address."""
    port = free_port()
    args = (f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token= --ServerApp.password= "
            "--ServerApp.disable_check_xsrf=True")  # the test saves a notebook with a plain PUT
    proc = subprocess.Popen(["make", target, f"LAB_ARGS={args}", *settings], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status", timeout=5).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
                assert time.time() < deadline, "JupyterLab did not answer within 90 s"
                time.sleep(1)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _json(url: str, timeout: float = 30):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def test_make_lab_opens_lesson_one_in_a_students_view(tmp_path):
    """The student's copies of the lessons (workspace/, outside git) and nothing of the instructor's (solutions,
    graders, the formgrader), lesson 1 open, widgets' state saved; nothing git tracks changes."""
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    with _served("lab", f"WORKSPACE={tmp_path / 'workspace'}") as base:  # not the developer's own workspace/
        shown = {item["name"] for item in _json(f"{base}/api/contents/")["content"]}
        assert shown == {"01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu", "tr"}, shown
        assert "01-dataparallel.ipynb" in {i["name"] for i in _json(f"{base}/api/contents/01-dataparallel")["content"]}
        assert "python3" in _json(f"{base}/api/kernelspecs")["kernelspecs"]
        with urllib.request.urlopen(f"{base}/", timeout=10) as r:
            assert r.url.endswith("/lab/tree/01-dataparallel/01-dataparallel.ipynb"), r.url
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/formgrader", timeout=10)
        assert refused.value.code == 404
        with urllib.request.urlopen(f"{base}/lab", timeout=30) as r:
            page = r.read().decode()
        for plugin in ("formgrader", "create-assignment", "course-list"):
            assert f'"@jupyter/nbgrader:{plugin}"' in page.split("disabledExtensions", 1)[1].split("]", 1)[0]
        # the training progress bars (widgets) are saved in the notebook, so that a reopened notebook shows them
        plugin = _json(f"{base}/lab/api/settings/@jupyter-widgets/jupyterlab-manager:plugin")
        assert plugin["schema"]["properties"]["saveState"]["default"] is True  # overrides.json
        # the student runs and saves lesson 1: their copy changes, no file git tracks does
        copy = _json(f"{base}/api/contents/01-dataparallel/01-dataparallel.ipynb")
        copy["content"]["metadata"]["language_info"] = {"name": "python", "version": "3.11.7"}
        put = urllib.request.Request(f"{base}/api/contents/01-dataparallel/01-dataparallel.ipynb", method="PUT",
                                     data=json.dumps({"type": "notebook", "content": copy["content"]}).encode())
        urllib.request.urlopen(put, timeout=30).close()
    assert (tmp_path / "workspace" / "01-dataparallel" / "01-dataparallel.ipynb").read_text() != \
        (REPO / "notebooks" / "01-dataparallel" / "01-dataparallel.ipynb").read_text()
    after = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    assert after == before, "make lab changed files git tracks"


def test_make_instructor_serves_the_course_with_the_formgrader():
    with _served("instructor") as base:
        shown = {item["name"] for item in _json(f"{base}/api/contents/")["content"]}
        assert "solutions" in shown and not [name for name in shown if name.endswith(".egg-info")], shown
        # the formgrader reads the course's nbgrader config (graders/nbgrader_config.py): the lessons, and a
        # gradebook nbgrader's `alembic` (found on PATH) has stamped
        assignments = {a["name"]: a for a in _json(f"{base}/formgrader/api/assignments")}
        assert set(assignments) >= {"01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu"}, assignments
        assert assignments["02-ddp"]["source_path"] == "solutions/02-ddp"
        with sqlite3.connect(REPO / "gradebook.db") as db:
            assert db.execute("select count(*) from alembic_version").fetchone()[0] == 1
            # make instructor recorded the lessons first: the formgrader's pages find them in the gradebook
            assert {name for (name,) in db.execute("select name from assignment")} >= set(assignments)
