"""The README's commands: `make lab` really serves the lessons (and `make instructor` the course); setup is
idempotent."""

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import tempfile
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
    layouts = tempfile.mkdtemp(prefix="lab-workspaces-")  # JupyterLab's saved layouts: a fresh one, not the user's
    args = (f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token= --ServerApp.password= "
            f"--ServerApp.disable_check_xsrf=True --LabApp.workspaces_dir={layouts}")  # (a test saves with a plain PUT)
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
        assert shown == {"01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu", "05-sharding", "tr"}, shown
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


def test_a_student_in_make_lab_lands_in_lesson_one_and_finds_their_progress_bars_after_reopening(tmp_path):
    """In headless Chromium, as a student: `make lab` opens lesson 1 with no instructor tool in sight; a training's
    progress bar, saved and reopened, shows again (not "Error displaying widget: model not found")."""
    from test_formgrader import CHROMIUM, CHROMIUM_ARGS, IN_CI, NO_CHROMIUM

    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM) if not IN_CI else pytest.fail(NO_CHROMIUM)
    import nbformat
    from playwright.sync_api import expect, sync_playwright

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    code = ("import torch, torch.nn as nn, torch.nn.functional as F\nfrom helpers import training\n"
            "model = nn.Linear(4, 1)\nloader = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(20)]\n"
            "losses = training.train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)],
                                            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                     "language": "python"}}),
                   workspace / "progress.ipynb")
    with _served("lab", f"WORKSPACE={workspace}") as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(f"{base}/")  # JupyterLab's own router may rewrite the address: the open tab is what counts
            expect(page.locator(".lm-TabBar-tabLabel", has_text="01-dataparallel.ipynb").first).to_be_visible(timeout=60_000)
            expect(page.locator(".jp-NotebookPanel:visible .jp-Cell").first).to_be_visible(timeout=60_000)
            assert "Formgrader" not in page.locator("#jp-MainMenu").inner_text()
            page.screenshot(path=str(tmp_path / "lesson-1.png"))

            page.goto(f"{base}/lab/tree/progress.ipynb")
            current = page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")
            expect(current).to_contain_text("progress.ipynb", timeout=60_000)
            cell = page.locator(".jp-NotebookPanel:visible .jp-Cell").first
            expect(cell).to_be_visible(timeout=60_000)
            expect(page.locator("#jp-main-statusbar")).to_contain_text("| Idle", timeout=120_000)  # its kernel is up
            cell.locator(".cm-content").click()
            page.keyboard.press("Shift+Enter")
            outputs = page.locator(".jp-NotebookPanel:visible .jp-OutputArea").first
            try:
                expect(outputs).to_contain_text("20/20", timeout=180_000)  # the bar's count, at its end
            finally:
                page.screenshot(path=str(tmp_path / "ran.png"))
            page.keyboard.press("Control+s")  # saves this tab (lesson 1's may be dirty too: its kernel's metadata came in)
            saved = page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text="progress.ipynb")
            expect(saved).not_to_have_class(re.compile(r"\bjp-mod-dirty\b"), timeout=30_000)
            for kernel in _json(f"{base}/api/kernels"):  # reopened another day: no kernel holds the widgets any more
                page.request.delete(f"{base}/api/kernels/{kernel['id']}")
            page.reload()
            outputs = page.locator(".jp-NotebookPanel:visible .jp-OutputArea").first
            try:
                expect(outputs).to_contain_text("20/20", timeout=60_000)
            finally:
                page.screenshot(path=str(tmp_path / "reopened.png"))
            assert "model not found" not in outputs.inner_text()
        finally:
            browser.close()
    saved = nbformat.read(workspace / "progress.ipynb", as_version=4)
    assert saved.metadata.get("widgets"), "the widgets' state was saved with the notebook"
