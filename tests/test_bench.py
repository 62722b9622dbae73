"""`make bench BENCH_ARGS="--lessons ..."` measures the lessons asked for, and only those (tests/bench.py)."""

import sys

import pytest

import bench


def test_bench_times_only_the_lessons_asked_for(monkeypatch, capsys):
    executed, graded = [], []
    monkeypatch.setattr(bench, "execute_seconds", lambda path: executed.append(path.stem) or 1.0)
    monkeypatch.setattr(bench, "grade_lesson", lambda students, lesson, *a, **k: graded.append(lesson) or {})
    monkeypatch.setattr(bench, "print_lessons", lambda figures: None)
    monkeypatch.setattr(bench, "project", lambda figures, lessons: None)
    monkeypatch.setattr(sys, "argv", ["bench.py", "--lessons", "02-ddp", "--jobs", "1"])
    bench.main()
    assert executed == ["02-ddp"] and graded == ["02-ddp"]
    monkeypatch.setattr(sys, "argv", ["bench.py", "--lessons", "05-nothing"])
    with pytest.raises(SystemExit):
        bench.main()
    assert "--lessons names ['05-nothing']" in capsys.readouterr().err
