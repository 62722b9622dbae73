"""The lessons as Python for review (solutions-py/<lesson>.py, written by `make release` from the .ipynb): in sync
with the notebooks, losing nothing a lesson is made of, and an edit made to one comes back into the notebook the
way CONTRIBUTING.md says."""

import copy
import shutil
import subprocess
import sys

import jupytext
import nbformat
import pytest

from graders import course, release

REPO = course.REPO
LESSONS = course.lessons(REPO)
MIRRORS = REPO / release.MIRRORS


def _notebook(lesson):
    return REPO / "solutions" / lesson / f"{lesson}.ipynb"


def _cells(nb):
    return [(c.cell_type, c.source, c.metadata.get("nbgrader"), c.metadata.get("tags")) for c in nb.cells]


def test_every_lesson_has_one_mirror():
    assert sorted(p.stem for p in MIRRORS.glob("*.py")) == LESSONS


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_mirror_is_what_release_writes(lesson):
    assert (MIRRORS / f"{lesson}.py").read_bytes() == release.mirror(_notebook(lesson)).encode(), (
        f"{release.MIRRORS}/{lesson}.py is out of sync with solutions/{lesson}/{lesson}.ipynb: run `make release` "
        f"(after bringing an edit of the .py back into the .ipynb: CONTRIBUTING.md)")


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_mirror_reads_back_as_the_lesson(lesson):
    """Every cell's type, source, nbgrader metadata and tags survive the .py."""
    source = nbformat.read(_notebook(lesson), as_version=4)
    assert _cells(jupytext.reads(release.mirror(_notebook(lesson)), fmt="py:percent")) == _cells(source)


def _documented_way_back() -> list[str]:
    """The jupytext command of CONTRIBUTING.md's "Editing the Python instead", word by word."""
    section = (REPO / "CONTRIBUTING.md").read_text().split("### Editing the Python instead")[1]
    return next(line for line in section.split("```bash\n")[1].splitlines() if "jupytext" in line).split()


def test_an_edit_to_a_mirror_comes_back_with_jupytext_update(tmp_path):
    """CONTRIBUTING.md's way back: the edited cell changes in the .ipynb, and nothing else does (cell ids, the keys of
    the translations, included)."""
    lesson = "02-ddp"
    notebook, script = tmp_path / f"{lesson}.ipynb", tmp_path / f"{lesson}.py"
    here = {".venv/bin/jupytext": [sys.executable, "-m", "jupytext"], f"{release.MIRRORS}/{lesson}.py": [str(script)],
            f"solutions/{lesson}/{lesson}.ipynb": [str(notebook)]}
    command = [part for word in _documented_way_back() for part in here.get(word, [word])]
    assert command[3:] == ["--update", "--to", "ipynb", str(script), "-o", str(notebook)], command
    shutil.copy(_notebook(lesson), notebook)
    original = nbformat.read(notebook, as_version=4)
    index, cell = next((i, c) for i, c in enumerate(original.cells) if (c.metadata.get("nbgrader") or {}).get("grade"))
    text = release.mirror(notebook)
    assert text.count(cell.source) == 1
    script.write_text(text.replace(cell.source, cell.source + "\nassert True, 'added in the .py'"))
    subprocess.run(command, check=True, capture_output=True)
    expected = copy.deepcopy(original)
    expected.cells[index].source = cell.source + "\nassert True, 'added in the .py'"
    assert nbformat.read(notebook, as_version=4) == expected
