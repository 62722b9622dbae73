"""A student's copies of the lessons (`make lab`, graders/workspace.py): made once, never overwritten, and a
course update of a lesson the student has is said once, with where the new one is."""

import shutil
from pathlib import Path

import pytest

from graders import workspace

REPO = Path(__file__).resolve().parent.parent


def test_copies_are_made_once_kept_and_updates_are_said_once(tmp_path):
    shutil.copytree(REPO / "notebooks" / "01-dataparallel", tmp_path / "notebooks" / "01-dataparallel")
    shutil.copytree(REPO / "notebooks" / "tr" / "02-ddp", tmp_path / "notebooks" / "tr" / "02-ddp")
    assert workspace.prepare(tmp_path) == []
    mine = tmp_path / "workspace" / "01-dataparallel" / "01-dataparallel.ipynb"
    assert mine.read_bytes() == (tmp_path / "notebooks" / "01-dataparallel" / "01-dataparallel.ipynb").read_bytes()
    assert (tmp_path / "workspace" / "tr" / "02-ddp" / "02-ddp.ipynb").is_file()

    mine.write_text("my answers")
    assert workspace.prepare(tmp_path) == [] and mine.read_text() == "my answers"
    (tmp_path / "notebooks" / "01-dataparallel" / "01-dataparallel.ipynb").write_text("an updated lesson")
    [note] = workspace.prepare(tmp_path)
    assert "workspace/01-dataparallel/01-dataparallel.ipynb" in note and "notebooks/01-dataparallel" in note
    assert mine.read_text() == "my answers" and workspace.prepare(tmp_path) == []

    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="folder must be a folder"):
        workspace.prepare(tmp_path, tmp_path / "file")
