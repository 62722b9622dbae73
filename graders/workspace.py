"""The student's own copies of the lessons, which `make lab` opens: workspace/, which git ignores, filled from
notebooks/ (the released lessons). Opening, running and saving a lesson there never changes a file git tracks, so
`git status` stays clean and `git pull` brings course updates without a conflict; a copy is never overwritten. When
the course updates a lesson the student already has, `make lab` says so once, and where the new one is.

    python -m graders.workspace [--folder DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from graders.course import REPO

FOLDER = "workspace"
RELEASED_AS = ".released"  # inside the workspace: each lesson as it was when copied (hidden in JupyterLab)


def prepare(root: Path = REPO, folder: Path | None = None) -> list[str]:
    """Copy into `folder` (default root/workspace) every released notebook it lacks; notes on lessons updated since."""
    released, work = root / "notebooks", Path(folder) if folder is not None else root / FOLDER
    if work.exists() and not work.is_dir():
        raise ValueError(f"folder must be a folder, got the file {str(work)!r}")
    notes = []
    for lesson in sorted(released.rglob("*.ipynb")):
        relative = lesson.relative_to(released)
        mine, copied = work / relative, work / RELEASED_AS / relative
        if not mine.exists():
            _copy(lesson, mine)
            _copy(lesson, copied)
        elif not copied.exists() or copied.read_bytes() != lesson.read_bytes():
            notes.append(f"{FOLDER}/{relative}: the course updated this lesson since you copied it; your copy is kept, "
                         f"the new one is notebooks/{relative} (delete yours to start again from it)")
            _copy(lesson, copied)
    return notes


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        for note in prepare(folder=args.folder):
            print(note)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
