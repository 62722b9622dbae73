"""nbgrader's exchange end to end, as a JupyterHub class uses it (website/pages/instructors.md, "A real class"): on
this machine, root as the instructor and two real Unix users as the students, with a temporary exchange folder
(mode 1777, as /usr/local/share/nbgrader/exchange must be) and course root. The instructor releases lesson 1; each
student fetches it, one answers every exercise with the solution's code, the other changes nothing, and both submit;
the instructor collects, grades with `python -m graders.pipeline grade` and releases the feedback; each student
fetches their own feedback page, and nobody else's."""

import csv
import grp
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.utils import parse_utc

from corpus import LESSON_POINTS
from graders import sandbox
from graders.grades import scores

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # nbgrader, and alembic (nbgrader runs it from PATH when it makes a gradebook)
CONFIG = REPO / "graders" / "nbgrader_config"
LESSON, COURSE = "01-dataparallel", "multi-device-course"
POINTS = LESSON_POINTS[LESSON]


def _why_not_here() -> str | None:
    if os.geteuid() != 0:
        return "the exchange test makes Unix users for its students: it runs as root (make test does, in CI too)"
    missing = [tool for tool in ("useradd", "userdel") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not installed (Debian/Ubuntu: apt-get install passwd)" if missing else None


pytestmark = pytest.mark.skipif(_why_not_here() is not None, reason=str(_why_not_here()))


@dataclass
class Student:
    name: str
    uid: int
    gid: int
    home: Path


def _hidden_above(path: str) -> str | None:
    """The first folder on the way to `path` (itself included) that other users cannot enter, if any."""
    path = Path(os.path.realpath(path))
    for folder in [*reversed(path.parents), path]:
        if not folder.stat().st_mode & 0o001:
            return str(folder)
    return None


def _students_view() -> list[str]:
    """What the students' commands run in, so that they can start this course's Python. Where it lives under a folder
    they cannot enter (pyenv's under /root; a checkout in a 0750 home), a hub's image would have installed it
    elsewhere: they get a mount namespace of their own, the machine's folders as they are, but over each such folder
    a tmpfs holding only Python. The exchange, their homes and their rights are the machine's own."""
    mounts, made = [], set()
    for path in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}):
        hidden = _hidden_above(path)
        if hidden is None:
            continue
        if sandbox.available() is not None:
            pytest.skip(f"this Python lives under {hidden}, which the students cannot enter, and bwrap cannot show it "
                        f"to them: {sandbox.available()}")
        if hidden not in made:
            mounts += ["--perms", "0755", "--tmpfs", hidden]
        folders = [str(p) for p in reversed(Path(path).parents) if str(p).startswith(hidden + "/")]
        for folder in folders:  # bwrap would make the missing mount points 0700
            if folder not in made:
                mounts += ["--perms", "0755", "--dir", folder]
        made.update([hidden, *folders])
        mounts += ["--ro-bind", path, path]
    if not mounts:
        return []
    # bwrap, as root, creates no user namespace and keeps only these capabilities for setpriv
    return ["bwrap", "--dev-bind", "/", "/", *mounts, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


def _add_student(name: str, homes: Path) -> Student:
    home = homes / name
    subprocess.run(["useradd", "--no-create-home", f"--home-dir={home}", "--shell=/usr/sbin/nologin", "--user-group",
                    name], check=True, capture_output=True, timeout=60)
    user = pwd.getpwnam(name)
    home.mkdir(mode=0o700)
    os.chown(home, user.pw_uid, user.pw_gid)
    return Student(name, user.pw_uid, user.pw_gid, home)


def _remove_student(name: str) -> None:
    subprocess.run(["userdel", name], capture_output=True, timeout=60)
    try:
        grp.getgrnam(name)
    except KeyError:
        return
    subprocess.run(["groupdel", name], capture_output=True, timeout=60)


def _student_config(student: Student, exchange: Path) -> None:
    """~/.jupyter/nbgrader_config.py, as a hub's image sets it up for its users."""
    folder = student.home / ".jupyter"
    folder.mkdir()
    (folder / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\n"
                                               f"c.CourseDirectory.course_id = {COURSE!r}\n")
    for path in (folder, folder / "nbgrader_config.py"):
        os.chown(path, student.uid, student.gid)


def _as(student: Student, *argv: str, view: list[str]) -> subprocess.CompletedProcess:
    """`argv` run by the student, in their home, with their own environment, uid, gid and no other group."""
    env = {"HOME": str(student.home), "USER": student.name, "LOGNAME": student.name, "LANG": "C.UTF-8",
           "PATH": f"{BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin"}
    user = {"user": student.uid, "group": student.gid, "extra_groups": []}
    if view:
        argv = (*view, "--chdir", str(student.home), "setpriv", f"--reuid={student.uid}", f"--regid={student.gid}",
                "--clear-groups", "--", *argv)
        user = {}
    return subprocess.run(argv, cwd=student.home, env=env, capture_output=True, text=True, timeout=300, **user)


def _nbgrader_as(student: Student, command: str, view: list[str]) -> None:
    ran = _as(student, str(BIN / "nbgrader"), command, LESSON, f"--course={COURSE}", view=view)
    assert ran.returncode == 0, f"{student.name}: nbgrader {command}\n{ran.stdout}\n{ran.stderr}"


def _instructor(*argv: str, cwd: Path = REPO, timeout: int = 300) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    ran = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert ran.returncode == 0, f"{' '.join(argv)}\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"


def _nbgrader(root: Path, exchange: Path, command: str) -> None:
    """An nbgrader command of the instructor's, from the course root."""
    _instructor(str(BIN / "nbgrader"), command, LESSON, f"--CourseDirectory.root={root}",
                f"--JupyterApp.config_file={CONFIG}", f"--Exchange.root={exchange}", cwd=root)


def _answer_every_exercise(notebook: Path) -> None:
    """The student's edit: each exercise cell's code from the solution (the file stays the student's)."""
    source = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    solution = {c.id: c.source for c in source.cells}
    nb = nbformat.read(notebook, as_version=4)
    answered = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for cell in answered:
        cell.source = solution[cell.id]
    assert len(answered) == 6
    nbformat.write(nb, notebook)


def _can_read(student: Student, path: Path, view: list[str]) -> bool:
    """Whether the student can list the folder or read the file at `path`."""
    code = "import os, sys; p = sys.argv[1]; os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read()"
    ran = _as(student, sys.executable, "-c", code, str(path), view=view)
    assert ran.returncode == 0 or "PermissionError" in ran.stderr, ran.stderr
    return ran.returncode == 0


def _grades(root: Path) -> dict[str, dict]:
    with open(root / "grades.csv", newline="") as f:
        return {row["student"]: row for row in csv.DictReader(f) if row["lesson"] == LESSON}


def _gradebook_timestamp(root: Path, student: str):
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        submission = gb.find_submission(LESSON, student)
        return submission.timestamp, submission.total_seconds_late


def test_a_class_releases_fetches_submits_collects_grades_and_returns_feedback(tmp_path):
    root = tmp_path / "course"
    for folder in ("solutions", "notebooks"):
        shutil.copytree(REPO / folder / LESSON, root / folder / LESSON)
    view = _students_view()
    shared = Path(tempfile.mkdtemp(prefix="exchange-test-"))  # what the students reach: not under pytest's 0700 folder
    names = [f"crs-ex-{secrets.token_hex(4)}-{n}" for n in (1, 2)]
    try:
        os.chmod(shared, 0o755)
        assert _hidden_above(str(shared)) is None, f"the students cannot enter {_hidden_above(str(shared))}"
        exchange, homes = shared / "exchange", shared / "home"
        exchange.mkdir(mode=0o777)
        os.chmod(exchange, 0o1777)  # mkdir's mode goes through the umask
        homes.mkdir(mode=0o755)
        full, blank = [_add_student(name, homes) for name in names]
        for student in (full, blank):
            _student_config(student, exchange)
        _run_the_class(root, exchange, full, blank, view)
    finally:
        for name in names:
            _remove_student(name)
        shutil.rmtree(shared, ignore_errors=True)


def _run_the_class(root: Path, exchange: Path, full: Student, blank: Student, view: list[str]) -> None:
    _instructor(sys.executable, "-m", "graders.pipeline", "gradebook", "--root", str(root))
    _nbgrader(root, exchange, "release_assignment")
    for student in (full, blank):
        _nbgrader_as(student, "fetch_assignment", view)
        notebook = student.home / LESSON / f"{LESSON}.ipynb"
        if student is full:
            _answer_every_exercise(notebook)
        assert notebook.stat().st_uid == student.uid
        _nbgrader_as(student, "submit", view)

    inbound = exchange / COURSE / "inbound"
    submitted_by_full = next(inbound.glob(f"{full.name}+{LESSON}+*"))
    assert not _can_read(blank, inbound, view), "the inbound folder lists nobody's submission to a student"
    assert not _can_read(blank, full.home, view), "nor may a student look into another's home (their nbgrader cache)"
    assert _can_read(full, submitted_by_full / f"{LESSON}.ipynb", view)

    _nbgrader(root, exchange, "collect")
    unsandboxed = [] if sandbox.available() is None else ["--unsandboxed"]
    _instructor(sys.executable, "-m", "graders.pipeline", "grade", "--root", str(root), *unsandboxed, timeout=1200)
    _nbgrader(root, exchange, "release_feedback")
    assert not _can_read(blank, exchange / COURSE / "feedback", view), "released feedback is found by its hash only"

    rows, most = _grades(root), sum(POINTS.values())
    for student, points in ((full, POINTS), (blank, dict.fromkeys(POINTS, 0.0))):
        score = sum(points.values())
        assert (rows[student.name]["status"], float(rows[student.name]["score"])) == ("graded", score), rows
        assert scores(root, student.name, LESSON) == points
        cache = student.home / ".local/share/jupyter/nbgrader_cache" / COURSE
        written = next(cache.glob(f"{student.name}+{LESSON}+*/timestamp.txt")).read_text()  # by `nbgrader submit`
        assert (root / "submitted" / student.name / LESSON / "timestamp.txt").read_text() == written
        assert _gradebook_timestamp(root, student.name) == (parse_utc(written), 0)  # 0: seconds late

        _nbgrader_as(student, "fetch_feedback", view)
        fetched = [p.read_text() for p in (student.home / LESSON / "feedback").glob(f"*/{LESSON}.html")]
        assert fetched == [(root / "feedback" / student.name / LESSON / f"{LESSON}.html").read_text()], "theirs, only"
        assert f"Score: {score:.1f} / {most:.1f}" in fetched[0]


def test_the_instructors_page_names_this_nbgraders_default_exchange():
    """Issue 39: the page named another exchange folder than the nbgrader the course pins uses by default."""
    import nbgrader
    from nbgrader.exchange.default.exchange import Exchange

    page = " ".join((REPO / "website" / "pages" / "instructors.md").read_text().split())
    root = Exchange.class_traits()["root"].default_value
    assert f"by default `{root}` in this nbgrader, {nbgrader.__version__}" in page
