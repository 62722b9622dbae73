"""The lesson sources and their released student versions: structure, sync, no leaks."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from graders import course, release
from graders.words import ENGLISH, unsolved_stub

REPO = Path(__file__).resolve().parent.parent
LESSONS = course.lessons(REPO)
SOLUTION_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _source(lesson):
    return nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)


def _released(lesson):
    return nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)


def _nbgrader(cell):
    return cell.metadata.get("nbgrader", {})


def test_there_is_a_lesson_per_folder():
    assert "01-dataparallel" in LESSONS
    from i18n.catalog import LANGUAGES

    assert sorted(p.name for p in (REPO / "notebooks").iterdir()) == sorted(LESSONS + list(LANGUAGES))
    for lang in LANGUAGES:  # each edition: the same lessons
        assert sorted(p.name for p in (REPO / "notebooks" / lang).iterdir()) == LESSONS


@pytest.mark.parametrize("lesson", LESSONS)
def test_sources_are_clean_and_valid(lesson):
    nb = _source(lesson)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, "commit sources without outputs"
    ids = [_nbgrader(c)["grade_id"] for c in nb.cells if _nbgrader(c)]
    assert len(ids) == len(set(ids)), "grade_ids must be unique"


@pytest.mark.parametrize("lesson", LESSONS)
def test_at_least_six_graded_exercises_each_with_hidden_tests(lesson):
    nb = _source(lesson)
    tests = [c for c in nb.cells if _nbgrader(c).get("grade") and c.cell_type == "code"]
    assert len(tests) >= 6
    for cell in tests:
        meta = _nbgrader(cell)
        assert meta["locked"] and meta["points"] > 0
        assert "BEGIN HIDDEN TESTS" in cell.source, f"{meta['grade_id']} has no hidden tests"
        visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
        assert "assert" in visible, f"{meta['grade_id']} gives no immediate feedback"
    solutions = [c for c in nb.cells if _nbgrader(c).get("solution")]
    assert len(solutions) >= 6 and all("### BEGIN SOLUTION" in c.source for c in solutions)


def test_release_is_in_sync_and_reproducible(tmp_path):
    shutil.copytree(REPO / "solutions", tmp_path / "solutions")
    release.release(tmp_path)
    first = {p.name: p.read_bytes() for p in (tmp_path / "notebooks").glob("*/*.ipynb")}
    release.release(tmp_path)
    for lesson in LESSONS:
        fresh = (tmp_path / "notebooks" / lesson / f"{lesson}.ipynb").read_bytes()
        assert fresh == first[f"{lesson}.ipynb"], "make release is not byte-reproducible"
        committed = (REPO / "notebooks" / lesson / f"{lesson}.ipynb").read_bytes()
        assert fresh == committed, f"notebooks/{lesson} is out of sync with solutions/: run `make release`"
        mirror = (release.MIRRORS, f"{lesson}.py")  # the lesson as Python, for review (tests/test_mirrors.py)
        assert tmp_path.joinpath(*mirror).read_bytes() == REPO.joinpath(*mirror).read_bytes(), "run `make release`"


def _split_lines(cell):
    """(secret, public) lines of a source cell: inside solution/hidden-test regions, or outside."""
    inside, secret, public = False, [], []
    for line in cell.source.splitlines():
        if "BEGIN SOLUTION" in line or "BEGIN HIDDEN TESTS" in line:
            inside = True
        elif "END SOLUTION" in line or "END HIDDEN TESTS" in line:
            inside = False
        else:
            (secret if inside else public).append(line.strip())
    return secret, public


@pytest.mark.parametrize("lesson", LESSONS)
def test_released_notebooks_leak_nothing(lesson):
    released = _released(lesson)
    text = "\n".join(c.source for c in released.cells)
    for marker in SOLUTION_MARKERS:
        assert marker not in text
    split = [_split_lines(c) for c in _source(lesson).cells]
    public = {line for _, lines in split for line in lines}
    secret = [line for lines, _ in split for line in lines if len(line) > 12 and line not in public]
    assert secret, "the source has solutions and hidden tests"
    released_lines = {line.strip() for c in released.cells for line in c.source.splitlines()}
    for line in secret:
        assert line not in released_lines, f"released notebook contains solution or hidden-test text: {line!r}"
    stubs = [c for c in released.cells if _nbgrader(c).get("solution")]
    stub = unsolved_stub(ENGLISH["unsolved"]).splitlines()[-1]  # says what to do, not an empty NotImplementedError
    assert stubs and all(stub in c.source for c in stubs)
    assert all(not c.get("outputs") for c in released.cells if c.cell_type == "code")


@pytest.mark.parametrize("lesson", LESSONS)
def test_setup_cell_installs_from_the_one_repository_url(lesson):
    url = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    nb = _source(lesson)
    setup = next(c for c in nb.cells if "COURSE_REPO =" in c.source)
    assert f'COURSE_REPO = "{url}"' in setup.source and "hardware.print_summary()" in setup.source
    assert setup.source.count(url) == 1, "the repository URL is written once; everything else derives from COURSE_REPO"
    badge = nb.cells[0].source
    slug = url.removeprefix("https://github.com/")
    notebook = f"{slug}/blob/main/notebooks/{lesson}/{lesson}.ipynb"
    assert f"colab.research.google.com/github/{notebook}" in badge
    assert f"kaggle.com/kernels/welcome?src=https://github.com/{notebook}" in badge
    urls = set(re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", "\n".join(c.source for c in nb.cells)))
    assert urls == {url}


def test_lesson_4_installs_the_tested_versions_of_accelerate_and_lightning():
    """On Colab and Kaggle lesson 4 installs accelerate and lightning through the package's `lesson4`
    extra: pinned to exactly what requirements.txt (and so `make test`) uses."""
    pinned = dict(line.split("==") for line in (REPO / "requirements.txt").read_text().splitlines()
                  if "==" in line and not line.startswith("#") and ";" not in line)
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lesson4"]
    assert {name: version for name, version in (req.split("==") for req in extra)} == {
        "accelerate": pinned["accelerate"], "lightning": pinned["lightning"]}
    assert "[lesson4] @ git+{COURSE_REPO}" in next(c.source for c in _source("04-accelerate-tpu").cells if "COURSE_REPO =" in c.source)


def test_a_failed_install_says_what_it_tried_and_how_to_fix_it(tmp_path):
    """The setup cell where pip fails (no network, a wrong URL): a clear error, not a bare CalledProcessError."""
    cell = next(c.source for c in _source("04-accelerate-tpu").cells if "COURSE_REPO =" in c.source)
    cell = re.sub(r'COURSE_REPO = ".*"', f'COURSE_REPO = "file://{tmp_path}/no-such-repository"', cell)
    cell = cell.replace('NEEDS = ["helpers"', 'NEEDS = ["no_such_module_of_the_course"')
    out = subprocess.run([sys.executable, "-c", cell], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "RuntimeError: could not install multi-device-course-helpers[lesson4] @ git+file://" in out.stderr
    assert "Settings > Internet > On" in out.stderr and "pip install" in out.stdout
    assert "CalledProcessError" not in out.stderr


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_check_says_what_is_wrong(lesson):
    """A failing assert in a lesson (a demo's claim, a visible or a hidden test) names what went wrong: a bare
    AssertionError teaches nothing."""
    import ast

    bare = []
    for index, cell in enumerate(_source(lesson).cells):
        if cell.cell_type != "code":
            continue
        code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        bare += [f"cell {index}: {ast.get_source_segment(code, node)[:80]}"
                 for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Assert) and node.msg is None]
    assert not bare, bare


@pytest.mark.parametrize("lesson", LESSONS)
def test_run_all_goes_on_past_the_released_exercises(lesson):
    """Exercise and check cells of the student version are tagged raises-exception (JupyterLab's Run All goes on
    past them), and no other cell is; the instructor sources carry no such tag (nbval must fail on any error)."""
    for cell in _released(lesson).cells:
        meta = _nbgrader(cell)
        exercise = cell.cell_type == "code" and bool(meta.get("solution") or meta.get("grade"))
        assert ("raises-exception" in cell.metadata.get("tags", [])) == exercise, cell.source[:80]
    assert not [c for c in _source(lesson).cells if "raises-exception" in c.metadata.get("tags", [])]


def test_a_wrong_uneven_split_is_told_what_it_returned():
    """Issue 39: the visible check of lesson 1's split says what the function returned, not only what it should."""
    from graders import judge
    from helpers import dataparallel

    cell = next(c for c in _source("01-dataparallel").cells if _nbgrader(c).get("grade_id") == "split_sizes_tests")
    namespace = {"dp": dataparallel, "my_split_sizes": lambda n, k: [32, 32] if n == 64 else [3, 3, 4]}
    with pytest.raises(AssertionError, match=r"got \[3, 3, 4\]"):
        exec(judge.split(cell.source)["visible"], namespace)
