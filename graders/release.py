"""What a released (student) notebook is: the instructor's source less its solutions and hidden tests, and its
exercise cells tagged so that JupyterLab's Run All goes on past an unsolved exercise.

nbgrader's generate_assignment runs LetRunAllGoOn last (graders/nbgrader_config.py), so every way of releasing
— `make release`, the formgrader's Generate button, `nbgrader generate_assignment` — writes the same notebooks/.

`make release` also writes each lesson as Python for review, solutions-py/<lesson>.py (jupytext's percent format,
with the cells' nbgrader metadata and tags): outside solutions/, so nbgrader never ships it to students.
"""

import os
import tempfile
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

from graders import forkserver
from graders.course import REPO, lessons
from graders.runs import check, nbgrader

RUN_ALL_GOES_ON = "raises-exception"
MIRRORS = "solutions-py"
# The header keeps only the kernel: no jupytext version, so the text is the same wherever it is made. Cell metadata
# goes through jupytext's default filter: nbgrader's and the tags are kept, UI state (collapsed, scrolled, timings)
# is left out and comes back from the .ipynb with `jupytext --update`.
NOTEBOOK_METADATA = "kernelspec,-all"


def is_exercise_cell(cell) -> bool:
    """A code cell a student completes (a solution cell) or that checks it (a grade cell)."""
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("solution") or meta.get("grade"))


class LetRunAllGoOn(NbGraderPreprocessor):
    """Tag the released exercise and check cells "raises-exception": an unsolved exercise fails its cells, and
    JupyterLab's Run All (which stops at the first error) goes on to the rest of the lesson. Only the student
    version: on the solutions nbval must still fail on any error."""

    def preprocess_cell(self, cell, resources, index):
        if is_exercise_cell(cell):
            tags = cell.metadata.setdefault("tags", [])
            if RUN_ALL_GOES_ON not in tags:
                tags.append(RUN_ALL_GOES_ON)
        return cell, resources


def release(root: Path = REPO) -> list[Path]:
    """Regenerate notebooks/ from solutions/ (byte-reproducible)."""
    written = []
    with tempfile.TemporaryDirectory(prefix="release-") as scratch:
        server = forkserver.Server("nbgrader", os.path.join(scratch, "nbgrader.log"))  # nbgrader imported once
        try:
            for lesson in lessons(root):
                check(nbgrader(root, "generate_assignment", lesson, "--force", "--no-db", server=server),
                       f"release of {lesson}")
                written.append(root / "notebooks" / lesson / f"{lesson}.ipynb")
        finally:
            server.close()
    from i18n import catalog  # the other editions, translated from the English just written

    return written + write_mirrors(root) + catalog.release(root)


def mirror(notebook: Path) -> str:
    """The lesson at `notebook` as a jupytext percent-format script: what a reviewer reads."""
    import jupytext  # only releasing needs it, not every nbgrader process that loads this module
    from jupytext.config import JupytextConfiguration

    config = JupytextConfiguration(notebook_metadata_filter=NOTEBOOK_METADATA)
    return jupytext.writes(jupytext.read(notebook), fmt="py:percent", config=config)


def write_mirrors(root: Path = REPO) -> list[Path]:
    """solutions-py/<lesson>.py for every lesson, from solutions/<lesson>/<lesson>.ipynb."""
    written = []
    for lesson in lessons(root):
        path = root / MIRRORS / f"{lesson}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(mirror(root / "solutions" / lesson / f"{lesson}.ipynb").encode())
        written.append(path)
    return written
