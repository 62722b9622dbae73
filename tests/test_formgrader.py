"""The formgrader as an instructor meets it after `make lab`, in headless Chromium: on a fresh course folder (the
lessons recorded by `python -m graders.pipeline gradebook`, as `make lab` does, and one submission), the lesson list
shows the four lessons, not a database traceback, and the Autograde button of a submission is refused with a message
that names `make grade`, and records no grade (graders/execute.py's GradingPipelineOnly)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from graders.course import lessons

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv's bin: jupyter, and alembic (nbgrader runs it from PATH)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# In CI (CI=true) a missing Chromium fails the browser test; a developer machine without it skips it.
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
NO_CHROMIUM = "no Chromium: install Debian's chromium (`make browser` as root, or apt-get install chromium)"
# As tests/test_site.py: no background connections, no sandbox as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
LESSON, STUDENT = "01-dataparallel", "s1"
TOKEN = "formgrader-test"


def _wait_until_up(server: subprocess.Popen, runtime: Path, log: Path, timeout: float = 60) -> str:
    """The server's address, once it answers: it takes a free port itself (port 0) and writes it into its info file
    (jpserver-PID.json), so that no other process can take the port between our choosing it and its binding it."""
    info = runtime / f"jpserver-{server.pid}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the Jupyter server exited ({server.returncode}):\n{log.read_text()[-3000:]}")
        try:
            base = f"http://127.0.0.1:{json.loads(info.read_text())['port']}"
            with urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2) as response:
                if response.status == 200:
                    return base
        except (OSError, ValueError, KeyError):  # no info file yet, or not listening yet
            pass
        time.sleep(0.2)
    pytest.fail(f"the Jupyter server did not answer in {timeout} s:\n{log.read_text()[-3000:]}")


def _no_error_on(page) -> None:
    """No traceback, no database error, no error page: in the text shown or in the page's HTML."""
    shown, html = page.locator("body").inner_text(), page.content()
    for bad in ("Traceback", "sqlalchemy", "No assignment", "the formgrader encountered an error"):
        assert bad.lower() not in (shown + html).lower(), f"{page.url} shows {bad!r}:\n{shown[:2000]}"


def _stop(server: subprocess.Popen) -> None:
    """The server and whatever it started (its own process group)."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(server.pid, signal.SIGKILL)  # anything of the group still there
    except ProcessLookupError:
        pass
    server.wait()


@pytest.mark.skipif(CHROMIUM is None and not IN_CI, reason=NO_CHROMIUM)
def test_the_formgrader_lists_the_lessons_and_its_autograde_button_points_to_make_grade(tmp_path):
    if CHROMIUM is None:  # only in CI (CI is set): the browser test must run there
        pytest.fail(f"{NO_CHROMIUM}; in CI it must run: `make browser`, which make test runs first, said why not")
    from nbgrader.api import Gradebook, MissingEntry
    from playwright.sync_api import expect, sync_playwright

    root = tmp_path / "course"
    for folder in ("solutions", "notebooks"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    submitted = root / "submitted" / STUDENT / LESSON
    submitted.mkdir(parents=True)
    shutil.copy(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", submitted)
    course_lessons = lessons(root)
    assert len(course_lessons) == 4 and LESSON in course_lessons

    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}  # GRADER_PIPELINE=1 would let it grade
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([sys.executable, "-m", "graders.pipeline", "gradebook", "--root", str(root)], cwd=REPO, env=env,
                   check=True, capture_output=True, timeout=120)

    # The course config (graders/nbgrader_config.py) sets the course root to the repository, and the formgrader
    # reloads the config files on each request, over --CourseDirectory.root on the command line (nbgrader 0.9.6
    # shows its error page then): a config file in a folder ahead of graders/ on JUPYTER_CONFIG_PATH sets this root.
    config = tmp_path / "config"
    config.mkdir()
    (config / "nbgrader_config.py").write_text(f"c.CourseDirectory.root = {str(root)!r}\n")
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(config), str(REPO / "graders")])
    runtime = tmp_path / "runtime"
    env["JUPYTER_RUNTIME_DIR"] = str(runtime)
    log = tmp_path / "server.log"
    with open(log, "wb") as out:  # as `make lab` starts it
        server = subprocess.Popen(
            [str(BIN / "jupyter"), "lab", f"--ServerApp.root_dir={root}", "--allow-root", "--no-browser",
             "--ServerApp.open_browser=False", "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0",
             f"--IdentityProvider.token={TOKEN}"],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = _wait_until_up(server, runtime, log)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                errors = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                page.set_default_timeout(20_000)

                # The lesson list (the token logs the browser in; /formgrader goes on to Manage Assignments).
                page.goto(f"{base}/formgrader?token={TOKEN}")
                page.wait_for_url("**/formgrader/manage_assignments")
                rows = page.locator("#main-table tr")
                expect(rows).to_have_count(len(course_lessons))
                for lesson in course_lessons:
                    expect(page.locator("#main-table td.name", has_text=lesson)).to_have_count(1)
                _no_error_on(page)
                page.screenshot(path=str(tmp_path / "lessons.png"), full_page=True)

                # The lesson's submissions: the number of submissions links to them.
                row = page.locator("#main-table tr", has=page.locator("td.name", has_text=LESSON))
                expect(row.locator("td.num-submissions a")).to_have_text("1")
                row.locator("td.num-submissions a").click()
                page.wait_for_url(f"**/formgrader/manage_submissions/{LESSON}")
                submission = page.locator("#main-table tr", has=page.locator("td.student-id", has_text=STUDENT))
                expect(submission).to_have_count(1)
                _no_error_on(page)

                # Autograde: refused, with the command that grades.
                submission.locator("td.autograde a").click()
                modal = page.locator("#error-modal")
                expect(modal).to_be_visible(timeout=30_000)
                expect(modal.locator(".modal-title")).to_have_text("Error")
                message = modal.inner_text()
                page.screenshot(path=str(tmp_path / "autograde.png"), full_page=True)
                assert "make grade" in message, message
                assert "sandbox" in message, message
                state = page.request.get(f"{base}/formgrader/api/submission/{LESSON}/{STUDENT}").json()
                assert state["autograded"] is False and state["score"] == 0, state
                assert not errors, f"JavaScript errors: {errors}"
            finally:
                browser.close()
    finally:
        _stop(server)

    assert not list((root / "autograded").rglob("*.ipynb")), "the refused autograde left an autograded notebook"
    gradebook = Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id="multi-device-course")
    try:
        try:
            recorded = gradebook.find_submission(LESSON, STUDENT)
        except MissingEntry:
            recorded = None
        if recorded is not None:  # nbgrader may record the submission before the refusal, never a score
            scores = [(grade.name, grade.auto_score, grade.manual_score) for notebook in recorded.notebooks
                      for grade in notebook.grades]
            assert all(auto is None and manual is None for _, auto, manual in scores), scores
            assert recorded.score == 0, recorded.score
    finally:
        gradebook.close()
