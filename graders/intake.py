"""Intake: the submissions under submitted/<student>/<lesson>/ turned into Tasks, or a status saying why one
cannot be graded (a symbolic link, no notebook, a notebook past the size or cell-count limit, an unreadable
one). A notebook whose nbgrader metadata a student's editor stripped is repaired, the student's file kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import nbformat

from graders.course import course_digest
from graders.submission import Result, Task

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


MAX_SUBMISSION_BYTES = 64 * 2**20


# A notebook the coordinator reads and renders: its size and cell count bound that work (a lesson has ~70
# cells and ~60 kB; 60,000 cells once cost minutes to read and render).
MAX_NOTEBOOK_FILE_BYTES = int(os.environ.get("GRADER_MAX_NOTEBOOK_FILE_BYTES", str(16 * 2**20)))


MAX_CELLS = int(os.environ.get("GRADER_MAX_CELLS", "1000"))


def submissions(root: Path, course_lessons: list[str], timeouts: dict[str, int], submission_timeout: int, sandboxed: bool,
                run_demonstrations=False, only_students=None):
    """The submissions to grade, and a Result for each that cannot be. `run_demonstrations`: True runs the
    instructor's demonstrations in every submission, a collection of student ids in theirs only. `only_students`:
    these students' submissions only (default: everybody's)."""
    submitted = root / "submitted"
    students = submitters(root)
    if only_students is not None:
        students = [s for s in students if s in set(only_students)]
    digest = course_digest()
    sources = {lesson: (root / "solutions" / lesson / f"{lesson}.ipynb").read_bytes() for lesson in course_lessons}
    results, tasks = [], []
    for student in students:
        if not STUDENT_ID.match(student):
            results.append(Result(student, "", "skipped: not a valid student id"))
            continue
        for lesson in course_lessons:
            folder = submitted / student / lesson
            if (submitted / student).is_symlink() or folder.is_symlink():
                results.append(Result(student, lesson, "not graded: the submission is a symbolic link"))
            elif folder.is_dir():
                files = prepare(root, student, lesson) or _files(folder)
                if isinstance(files, str):
                    results.append(Result(student, lesson, files))
                else:
                    demonstrations = run_demonstrations is True or student in (run_demonstrations or ())
                    tasks.append(Task(student, lesson, files, digest, sandboxed, timeouts[lesson], submission_timeout,
                                      sources[lesson], demonstrations))
    return results, tasks


def submitters(root: Path) -> list[str]:
    """The folders of submitted/: one per student who submitted anything."""
    submitted = root / "submitted"
    return sorted(d.name for d in submitted.iterdir() if d.is_dir()) if submitted.is_dir() else []


def _files(folder: Path) -> dict[str, bytes] | str:
    """The submission's regular files (what nbgrader would copy), never what a link points at; or why not."""
    files, size = {}, 0
    for parent, dirs, names in os.walk(folder):  # does not descend into linked folders
        for name in names:
            path = Path(parent) / name
            if path.is_symlink() or not path.is_file() or name.endswith((".submitted", ".restoring")):
                continue
            size += path.stat().st_size
            if size > MAX_SUBMISSION_BYTES:
                return f"not graded: the submission folder holds more than {MAX_SUBMISSION_BYTES >> 20} MiB"
            files[str(path.relative_to(folder))] = path.read_bytes()
    return files


def prepare(root: Path, student: str, lesson: str) -> str | None:
    """Find the lesson's notebook in the submission; None if it is fine, else why it cannot be graded.
    A single notebook under another name is graded as if correctly named (the copy is noted).
    Symbolic links and anything but regular files are refused: the grader runs as root and must not
    read or write what a link points at. The student's own file is never lost: a notebook whose
    nbgrader metadata must be restored (or whose text holds a lone surrogate, which nbgrader cannot
    write) is kept as <lesson>.ipynb.submitted and replaced atomically by the repaired one."""
    folder = root / "submitted" / student / lesson
    expected = folder / f"{lesson}.ipynb"
    if expected.is_symlink() or (expected.exists() and not expected.is_file()):
        return "not graded: the notebook is not a regular file (a symbolic link or a folder)"
    if not expected.exists():
        others = sorted(p for p in folder.glob("*.ipynb") if not p.is_symlink() and p.is_file())
        if len(others) != 1:
            return "not graded: no notebook named " + expected.name
        shutil.copyfile(others[0], expected, follow_symlinks=False)
    if expected.stat().st_size > MAX_NOTEBOOK_FILE_BYTES:
        return f"not graded: the notebook is larger than {MAX_NOTEBOOK_FILE_BYTES >> 20} MiB"
    try:
        if _cell_count(json.loads(expected.read_bytes())) > MAX_CELLS:  # counted before nbformat reads it all
            return f"not graded: the notebook has more than {MAX_CELLS} cells"
        submission = nbformat.read(expected, as_version=4)
    except Exception as error:  # truncated, not JSON, not a notebook, not UTF-8
        return f"not graded: the notebook cannot be read ({type(error).__name__})"
    restored = _restore_metadata(submission, nbformat.read(root / "solutions" / lesson / f"{lesson}.ipynb", as_version=4))
    text = nbformat.writes(submission)
    try:
        text.encode("utf-8")
    except UnicodeError:  # a lone surrogate in a cell: nbgrader could not write the graded notebook
        restored = True
    if restored:
        text = text.encode("utf-8", errors="replace")
        original = folder / f"{lesson}.ipynb.submitted"
        if not original.exists():
            shutil.copyfile(expected, original, follow_symlinks=False)
        partial = folder / f".{lesson}.ipynb.restoring"
        partial.write_bytes(text)
        os.replace(partial, expected)
    return None


def _cell_count(raw) -> int:
    if type(raw) is not dict:
        return 0
    sheets = raw.get("worksheets") if type(raw.get("worksheets")) is list else [raw]  # nbformat 3 had worksheets
    return sum(len(sheet["cells"]) for sheet in sheets if type(sheet) is dict and type(sheet.get("cells")) is list)


def _restore_metadata(submission, source) -> bool:
    """Give back the nbgrader metadata a student's editor stripped, matching cells by their ids
    (nbgrader itself cannot grade a notebook whose exercise cells lost it)."""
    known = {cell.get("id"): cell.metadata["nbgrader"] for cell in source.cells if "nbgrader" in cell.metadata}
    restored = False
    for cell in submission.cells:
        if "nbgrader" not in cell.metadata and cell.get("id") in known:
            cell.metadata["nbgrader"] = dict(known[cell.get("id")])
            restored = True
    return restored
