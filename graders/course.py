"""The course a grader works on: its root, its nbgrader config, its lessons, and the version of its code.

Every step of grading (release, intake, the workers, the recorder) reads these; nothing here grades.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


CONFIG = Path(__file__).resolve().parent / "nbgrader_config"  # nbgrader appends ".py"


def lessons(root: Path) -> list[str]:
    """Assignment folders under solutions/: solutions/<lesson>/<lesson>.ipynb."""
    return sorted(d.name for d in (root / "solutions").iterdir() if (d / f"{d.name}.ipynb").is_file())


def course_digest(repo: Path = REPO) -> str:
    """What a worker must share with the coordinator to grade the same way: the helpers students call and
    the grader (the lesson's source notebook travels with each task)."""
    import hashlib

    digest = hashlib.sha256()
    for pattern in ("helpers/**/*.py", "graders/**/*.py", "i18n/**/*.py", "i18n/**/*.po"):  # i18n: the editions
        for path in sorted(repo.glob(pattern)):
            digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
