"""The formgrader as an instructor meets it after `make instructor`, in headless Chromium: on a fresh course folder (the
lessons recorded by `python -m graders.pipeline gradebook`, as `make instructor` does, and one submission), the lesson list
shows the lessons, not a database traceback, and the Autograde button grades a submission through the grading
pipeline (graders/formgrader.py): the same scores, status, flags and feedback as `make grade`, and a grading that
fails keeps the grade recorded before."""

import csv
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


def _course(root: Path) -> None:
    for folder in ("solutions", "notebooks"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    submitted = root / "submitted" / STUDENT / LESSON
    submitted.mkdir(parents=True)
    shutil.copy(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", submitted)


def _recorded(root: Path) -> dict:
    """What grading recorded for the submission: its scores per cell, grades.csv's row and the feedback's verdicts."""
    from graders.grades import scores

    with open(root / "grades.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if (r["student"], r["lesson"]) == (STUDENT, LESSON))
    page = (root / "feedback" / STUDENT / LESSON / f"{LESSON}.html").read_text()
    verdicts = sorted(line.strip() for line in page.splitlines() if "hidden test" in line.lower())
    return {"scores": scores(root, STUDENT, LESSON), "status": row["status"], "flags": row["flags"],
            "score": row["score"], "verdicts": verdicts}


@pytest.mark.skipif(CHROMIUM is None and not IN_CI, reason=NO_CHROMIUM)
def test_the_formgraders_autograde_button_grades_as_make_grade_and_never_loses_a_grade(tmp_path):
    if CHROMIUM is None:  # only in CI (CI is set): the browser test must run there
        pytest.fail(f"{NO_CHROMIUM}; in CI it must run: `make browser`, which make test runs first, said why not")
    from graders import pipeline
    from playwright.sync_api import expect, sync_playwright

    if (why := pipeline.sandbox.available()) is not None:
        pytest.skip(f"no sandbox here: {why}")
    root, by_make_grade = tmp_path / "course", tmp_path / "make-grade"
    _course(root)
    _course(by_make_grade)
    course_lessons = lessons(root)
    assert LESSON in course_lessons

    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}  # GRADER_PIPELINE=1 would let it grade
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([sys.executable, "-m", "graders.pipeline", "gradebook", "--root", str(root)], cwd=REPO, env=env,
                   check=True, capture_output=True, timeout=120)
    # `make grade STUDENT=s1 LESSON=01-dataparallel` on a copy of the same course: what the button must give
    subprocess.run([sys.executable, "-m", "graders.pipeline", "grade", "--root", str(by_make_grade),
                    f"--student={STUDENT}", f"--lesson={LESSON}"], cwd=REPO, env=env, check=True, capture_output=True,
                   timeout=600)
    expected = _recorded(by_make_grade)
    assert expected["status"] == "graded" and expected["flags"] == "", expected

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
    with open(log, "wb") as out:  # as `make instructor` starts it, from another folder
        server = subprocess.Popen(
            [str(BIN / "jupyter"), "lab", f"--ServerApp.root_dir={root}", "--allow-root", "--no-browser",
             "--ServerApp.open_browser=False", "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0",
             f"--IdentityProvider.token={TOKEN}"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
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

                # The lesson's submissions: the number of submissions links to them.
                row = page.locator("#main-table tr", has=page.locator("td.name", has_text=LESSON))
                expect(row.locator("td.num-submissions a")).to_have_text("1")
                row.locator("td.num-submissions a").click()
                page.wait_for_url(f"**/formgrader/manage_submissions/{LESSON}")
                submission = page.locator("#main-table tr", has=page.locator("td.student-id", has_text=STUDENT))
                expect(submission).to_have_count(1)
                _no_error_on(page)

                # Autograde: graded, in the sandbox, as make grade grades.
                submission.locator("td.autograde a").click()
                modal = page.locator("#success-modal")
                expect(modal).to_be_visible(timeout=600_000)
                page.screenshot(path=str(tmp_path / "autograde.png"), full_page=True)
                modal.locator(".modal-footer button", has_text="OK").click()
                expect(modal).to_have_count(0)
                state = page.request.get(f"{base}/formgrader/api/submission/{LESSON}/{STUDENT}").json()
                assert state["autograded"] is True and state["score"] == state["max_score"] > 0, state
                assert _recorded(root) == expected
                page.reload()
                expect(submission.locator("td.student-name")).to_have_text(f"{STUDENT}, ")  # not "None, None"

                # A grading that fails (the notebook is no longer readable) keeps the grade.
                (root / "submitted" / STUDENT / LESSON / f"{LESSON}.ipynb").write_text("not a notebook")
                page.reload()
                submission.locator("td.autograde a").click()
                modal = page.locator("#error-modal")
                expect(modal).to_be_visible(timeout=600_000)
                assert "cannot be read" in modal.inner_text() and "kept" in modal.inner_text(), modal.inner_text()
                state = page.request.get(f"{base}/formgrader/api/submission/{LESSON}/{STUDENT}").json()
                assert state["autograded"] is True and state["score"] == state["max_score"], state
                assert not errors, f"JavaScript errors: {errors}"
            finally:
                browser.close()
    finally:
        _stop(server)
    assert (root / "autograded" / STUDENT / LESSON / f"{LESSON}.ipynb").is_file()
    assert _recorded(root)["scores"] == expected["scores"]


def test_a_bare_nbgrader_autograde_is_refused_before_it_removes_a_grade(tmp_path):
    """`nbgrader autograde --force` by hand would remove the graded notebook, then run student code unsandboxed: the
    course config refuses it first, naming the commands that grade, and the graded notebook stays."""
    root = tmp_path / "course"
    _course(root)
    graded = root / "autograded" / STUDENT / LESSON / f"{LESSON}.ipynb"
    graded.parent.mkdir(parents=True)
    graded.write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    ran = subprocess.run([str(BIN / "nbgrader"), "autograde", LESSON, f"--student={STUDENT}", "--force",
                          f"--CourseDirectory.root={root}", f"--JupyterApp.config_file={REPO / 'graders' / 'nbgrader_config'}"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode != 0 and "make grade STUDENT=" in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    assert graded.read_text() == "{}"
