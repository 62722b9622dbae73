"""`make hw-check`: the figures it measures, its report, and its verdict on a failing lesson; the student notebooks
it runs, from a checkout and from the pip-installed package (no solutions/ there), with the machine's own torch."""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
import torch

from helpers import hw_check, tpu_stack, versions, xla

REPO = Path(__file__).resolve().parent.parent


def test_dataparallel_imbalance_is_emulated_without_gpus():
    result = hw_check.dataparallel_imbalance()
    assert result["imbalance_ratio"] > 1
    if torch.cuda.device_count() < 2:
        assert result["emulated"] and "emulated" in result["source"] and "emulated" in result["summary"]


def test_amp_ratios_are_positive():
    result = hw_check.amp_ratios(shape=(32, 64, 8), batch=64, steps=1)
    assert result["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    for fmt in ("bf16", "fp16"):
        assert result["speedup_vs_fp32"][fmt] > 0
        assert result["saved_bytes_vs_fp32"][fmt] > 0
    assert all(ms > 0 for ms in result["step_ms"].values())


def test_allreduce_bandwidth_is_positive():
    result = hw_check.allreduce_bandwidth(mib=1, warmup=1, iters=3)
    assert result["busbw_gbps"] > 0 and result["algbw_gbps"] > 0
    assert result["busbw_gbps"] == pytest.approx(result["algbw_gbps"])  # 2 ranks: 2 * (n - 1) / n = 1
    assert result["backend"] == ("nccl" if torch.cuda.device_count() >= 2 else "gloo")


def test_xla_compile_counts():
    result = hw_check.measure(hw_check.xla_compiles)
    if not xla.available():
        assert result["status"] == "skipped" and "torch_xla" in result["reason"]
        return
    assert result["status"] == "ok", result
    assert (result["fixed_batch"], result["smaller_last_batch"]) == (1, 2)


def test_the_report_names_the_tpu_stack_that_ran(monkeypatch):
    """make hw-check says which TPU stack this runtime has (here: none, and why), and runs TorchTPU's step only where
    it is the stack (simulated: the step's result stands in for a TPU)."""
    result = hw_check.measure(hw_check.tpu_stack_report)
    here = tpu_stack.status()
    assert result["status"] == "ok" and result["summary"] == f"TPU stack: {here.name or 'none'} ({here.why})"
    step = {"device": "tpu:0", "torch": "2.12.0", "torch_tpu": "0.2.0", "graphs_compiled": 2,
            "compiled_vs_eager": 1e-6, "eager_vs_cpu": 3e-3}
    monkeypatch.setattr(tpu_stack, "status", lambda: tpu_stack.Stack("torchtpu", "a TPU and torch_tpu 0.2.0"))
    monkeypatch.setattr(tpu_stack, "torchtpu_step", lambda: step)
    result = hw_check.measure(hw_check.tpu_stack_report)
    assert result["step"] == step and result["summary"].startswith(
        "TPU stack: torchtpu (a TPU and torch_tpu 0.2.0); TorchTPU step on tpu:0: torch 2.12.0, torch_tpu 0.2.0, 2 graph(s)")


def _fake_figures():
    def broken():
        raise RuntimeError("no such device")

    def unavailable():
        raise hw_check.Skipped("not on this machine")

    return {"fine": lambda: {"value": 1.5, "summary": "value 1.5"}, "broken": broken, "unavailable": unavailable}


def test_report_without_notebooks(tmp_path, capsys):
    assert hw_check.main(["--no-notebooks", "--out", str(tmp_path)], figures=_fake_figures()) == 0
    report = json.loads((tmp_path / "hw-check.json").read_text())
    md = (tmp_path / "hw-check.md").read_text()
    assert report["lessons"] is None and report["passed"] is True
    assert report["hardware"] in md and report["date"] in md and "CPU cores" in md
    found = report["versions"]  # what students run: the versions, from the installed distributions
    assert found["torch"] == importlib.metadata.version("torch") and found["torch (imported)"] == torch.__version__
    assert set(hw_check.DISTRIBUTIONS) <= set(found) and "libtpu" in found
    low, high = versions.SUPPORTED_TORCH
    assert report["supported_torch"] == [low, high] and report["version_problems"] == []
    assert "## Versions" in md and f"| torch | {found['torch']} |" in md and f"Supported: torch {low} to {high}" in md
    if found["libtpu"] is None:
        assert "| libtpu | not installed |" in md
    figures = report["figures"]
    assert figures["fine"]["status"] == "ok" and figures["fine"]["value"] == 1.5
    assert figures["broken"]["status"] == "failed" and "RuntimeError: no such device" in figures["broken"]["error"]
    assert figures["unavailable"] == {"status": "skipped", "reason": "not on this machine",
                                      "seconds": figures["unavailable"]["seconds"]}
    assert "value 1.5" in md and "RuntimeError: no such device" in md and "skipped: not on this machine" in md
    assert md in capsys.readouterr().out


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_failing_lesson_is_reported_with_exit_code_1(tmp_path):
    paths = {"good": _notebook(tmp_path / "good.ipynb", "x = 1 + 1"),
             "bad": _notebook(tmp_path / "bad.ipynb", "y = 2", "raise ValueError('lesson broke here')", "z = 3"),
             "missing": tmp_path / "missing.ipynb"}
    out = tmp_path / "out"
    assert hw_check.main(["--out", str(out), "--cell-timeout", "60"], paths=paths, figures={}) == 1
    report = json.loads((out / "hw-check.json").read_text())
    good, bad, missing = report["lessons"]
    assert good["passed"] and good["error"] is None and good["seconds"] > 0
    assert not bad["passed"] and bad["cell"] == 1 and bad["error"] == "ValueError: lesson broke here"
    assert not missing["passed"] and "FileNotFoundError" in missing["error"]
    assert report["passed"] is False
    md = (out / "hw-check.md").read_text()
    assert "| bad | **FAIL** |" in md and "cell 1: ValueError: lesson broke here" in md and "| good | pass |" in md
    assert "2 of 3 lessons failed" in md
    assert hw_check.main(["--out", str(out), "--lessons", "good"], paths=paths, figures={}) == 0
    assert "1 of 1 lessons passed" in (out / "hw-check.md").read_text()


@pytest.mark.parametrize("argv, name", [
    (["--lessons", "05-nothing"], "--lessons"),
    (["--lessons"], "--lessons"),
    (["--lessons", "02-ddp", "02-ddp"], "--lessons"),
    (["--cell-timeout", "0"], "--cell-timeout"),
    (["--cell-timeout", "soon"], "--cell-timeout"),
    (["--frobnicate"], "--frobnicate"),
])
def test_bad_command_line_is_rejected(argv, name, capsys):
    with pytest.raises(SystemExit) as exit_:
        hw_check.main(argv, figures={})
    assert exit_.value.code == 2 and name in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, name", [
    ({"lessons": ["05-nothing"]}, "lessons"),
    ({"lessons": "02-ddp"}, "lessons"),
    ({"lessons": []}, "lessons"),
    ({"cell_timeout": 0}, "cell_timeout"),
    ({"cell_timeout": "600"}, "cell_timeout"),
    ({"notebooks": "no"}, "notebooks"),
    ({"out": None}, "out"),
    ({"paths": {}}, "paths"),
])
def test_bad_arguments_are_rejected(kwargs, name, tmp_path):
    kwargs.setdefault("out", tmp_path)
    with pytest.raises(ValueError, match=name):
        hw_check.run_checks(figures={}, **kwargs)
    assert not (tmp_path / "hw-check.json").exists()


@pytest.mark.parametrize("fn, kwargs, name", [
    (hw_check.allreduce_bandwidth, {"mib": 0}, "mib"),
    (hw_check.allreduce_bandwidth, {"n_procs": 1}, "n_procs"),
    (hw_check.amp_ratios, {"device": "tpu"}, "device"),
    (hw_check.amp_ratios, {"steps": 0}, "steps"),
    (hw_check.dataparallel_imbalance, {"batch": 0}, "batch"),
])
def test_bad_figure_arguments_are_rejected(fn, kwargs, name):
    with pytest.raises(ValueError, match=name):
        fn(**kwargs)


def test_the_notebooks_are_the_student_versions():
    """hw-check runs what students run: the released notebooks (a checkout's notebooks/), never the solutions."""
    for lesson, path in hw_check.NOTEBOOKS.items():
        assert path == REPO / "notebooks" / lesson / f"{lesson}.ipynb" and path.is_file()
    assert list(hw_check.NOTEBOOKS) == list(hw_check.LESSONS)


def test_exercise_and_check_cells_are_skipped(tmp_path):
    """A student notebook's exercise stubs raise until solved: hw-check skips them (and their checks) and runs the
    rest, in a scratch folder (what a lesson writes stays out of the notebook's folder)."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("open('written.txt', 'w').write('x')\nx = 1"),
        nbformat.v4.new_code_cell("def f():\n    raise NotImplementedError()",
                                  metadata={"nbgrader": {"solution": True, "grade": False, "grade_id": "f"}}),
        nbformat.v4.new_code_cell("assert f() == 1, 'f'", metadata={"nbgrader": {"solution": False, "grade": True}}),
        nbformat.v4.new_code_cell("assert x == 1, 'the explanation cells ran'"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    result = hw_check.run_notebook("lesson", tmp_path / "lesson.ipynb", 60)
    assert result["passed"], result
    assert (result["cells_run"], result["exercise_cells_skipped"]) == (2, 2)
    assert not (tmp_path / "written.txt").exists()
    assert nbformat.read(tmp_path / "lesson.ipynb", as_version=4).cells[1].source.startswith("def f")  # untouched


def test_no_figures(tmp_path):
    paths = {"tiny": _notebook(tmp_path / "tiny.ipynb", "x = 1")}
    assert hw_check.main(["--out", str(tmp_path / "out"), "--no-figures"], paths=paths, figures=_fake_figures()) == 0
    report = json.loads((tmp_path / "out" / "hw-check.json").read_text())
    assert report["figures"] == {} and "Not measured (--no-figures)." in (tmp_path / "out" / "hw-check.md").read_text()


def _make_n(*args) -> str:
    out = subprocess.run(["make", "-n", "hw-check", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_hw_check_uses_a_python_that_has_torch():
    """On Colab, Kaggle or a GPU image make hw-check runs with the runtime's own torch: no .venv/ with the pinned
    stack installed over it. Only a Python without torch gets the course's .venv/."""
    own = _make_n(f"PYTHON={sys.executable}", "HW_CHECK_ARGS=--no-figures")
    assert f"{sys.executable} -m helpers.hw_check --no-figures" in own.splitlines()
    assert "--no-print-directory setup" not in own
    named = _make_n("HW_CHECK_PYTHON=/opt/their/python")
    assert "/opt/their/python -m helpers.hw_check " in named.splitlines() and "--no-print-directory setup" not in named
    bare = _make_n("PYTHON=/no/such/python")
    assert "--no-print-directory setup" in bare and ".venv/bin/python -m helpers.hw_check " in bare.splitlines()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The helpers package as pip installs it from the repository (a wheel built from a copy of what it is made
    of), unpacked into a folder of its own: PYTHONPATH to it imports that copy, never the checkout."""
    tmp = tmp_path_factory.mktemp("installed")
    source = tmp / "source"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source)
    for folder in ("helpers", "notebooks"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp / "wheels"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (wheel,) = (tmp / "wheels").glob("multi_device_course_helpers-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(tmp / "site")
    for lesson in hw_check.LESSONS:
        assert f"helpers/notebooks/{lesson}/{lesson}.ipynb" in names
    assert not [n for n in names if "solutions" in n or n.startswith(("graders/", "tests/"))], names
    cwd = tmp / "elsewhere"  # no solutions/, no notebooks/, no helpers/ here
    cwd.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp / "site"), "OMP_WAIT_POLICY": "PASSIVE"}
    return tmp / "site", cwd, env


def test_the_package_ships_the_student_notebooks(installed):
    site, _, _ = installed
    for lesson in hw_check.LESSONS:
        for edition in ("", "tr"):  # both editions (helpers/refusal.py reads the Turkish lessons' cells too)
            shipped = site / "helpers" / "notebooks" / edition / lesson / f"{lesson}.ipynb"
            assert nbformat.read(shipped, as_version=4) == nbformat.read(
                REPO / "notebooks" / edition / lesson / f"{lesson}.ipynb", as_version=4)


def test_hw_check_runs_from_the_pip_installed_package(installed):
    """`python -m helpers.hw_check` where the helpers are pip-installed (the setup cell's way on Colab or Kaggle):
    it finds the student notebooks in the package, runs them with this Python's torch, and needs no checkout."""
    site, cwd, env = installed
    where = subprocess.run([sys.executable, "-c", "import helpers.hw_check as h; print(h.__file__); print(h.NOTEBOOKS)"],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0 and where.stdout.startswith(str(site / "helpers")), where.stdout + where.stderr
    assert str(REPO) not in where.stdout
    help_ = subprocess.run([sys.executable, "-m", "helpers.hw_check", "--help"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0 and "--lessons" in help_.stdout and "01-dataparallel" in help_.stdout
    out = subprocess.run([sys.executable, "-m", "helpers.hw_check", "--lessons", "01-dataparallel", "--no-figures",
                          "--out", "report", "--cell-timeout", "300"],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    report = json.loads((cwd / "report" / "hw-check.json").read_text())
    (lesson,) = report["lessons"]
    assert out.returncode == 0 and lesson["passed"], (lesson, out.stderr[-3000:])
    assert lesson["notebook"] == str(site / "helpers" / "notebooks" / "01-dataparallel" / "01-dataparallel.ipynb")
    assert lesson["exercise_cells_skipped"] > 0 and lesson["cells_run"] > 0
    assert report["versions"]["torch (imported)"] == torch.__version__
    assert "| 01-dataparallel | pass |" in (cwd / "report" / "hw-check.md").read_text()
    assert sorted(p.name for p in cwd.iterdir()) == ["report"], "the lesson wrote nothing where it was started"
