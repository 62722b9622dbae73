"""`make hw-check`: the figures it measures, its report, and its verdict on a failing lesson."""

import json

import nbformat
import pytest
import torch

from helpers import hw_check, xla


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
