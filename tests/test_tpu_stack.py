"""helpers.tpu_stack: which TPU stack a runtime has (TorchTPU, torch_xla or none) and why, decided from simulated
inputs (TPU chips and device files, a fake torch_tpu distribution on sys.path, torch's, Python's and libtpu's
versions); the TorchTPU step's plain data, run here on the CPU with torch.compile's eager backend; and lesson 4's B8
saying what the helper decides. No TPU ran any of this."""

from pathlib import Path

import nbformat
import pytest

from helpers import fresh, hardware, tpu_stack

LESSON = Path(__file__).resolve().parent.parent / "solutions" / "04-accelerate-tpu" / "04-accelerate-tpu.ipynb"
V5E = hardware.TPU(chips=1, generation="v5e")


def _runtime(monkeypatch, tmp_path, tpu=V5E, torch="2.12.0+cpu", python="3.12.4", torch_tpu=None, libtpu=None,
             torch_xla=None, requires=("torch>=2.11.0,<=2.15.0", "libtpu>=0.0.50")):
    """A simulated runtime: `tpu` on the PCI bus (no device files), these distributions installed (a fake
    torch_tpu whose import fails: deciding must not import it), torch's and Python's versions."""
    monkeypatch.setattr(hardware, "tpu", lambda: tpu)
    monkeypatch.setattr(tpu_stack, "tpu_device_files", lambda: [])
    monkeypatch.setattr(tpu_stack, "torch_version", lambda: torch)
    monkeypatch.setattr(tpu_stack, "python_version", lambda: python)
    site = tmp_path / "site"
    site.mkdir(parents=True)
    for name, version, lines in (("torch_tpu", torch_tpu, [f"Requires-Python: >=3.11", *(f"Requires-Dist: {r}" for r in requires)]),
                                 ("libtpu", libtpu, []), ("torch_xla", torch_xla, [])):
        if version:
            info = site / f"{name}-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text("\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *lines]) + "\n")
    if torch_tpu:
        (site / "torch_tpu").mkdir()
        (site / "torch_tpu" / "__init__.py").write_text("raise RuntimeError('deciding imported torch_tpu')\n")
    real = tpu_stack.installed
    monkeypatch.setattr(tpu_stack, "installed", lambda d: _from(site, d) if d in ("torch-tpu", "libtpu", "torch_xla") else real(d))
    monkeypatch.syspath_prepend(str(site))


def _from(site, distribution):
    """The version of `distribution` installed in `site` only (the real environment's torch_xla is not seen)."""
    import importlib.metadata

    found = [d for d in importlib.metadata.distributions(path=[str(site)])
             if d.metadata["Name"].replace("_", "-") == distribution.replace("_", "-")]
    return found[0].version if found else None


def test_no_tpu_skips_torchtpu_and_says_where_part_b_runs(monkeypatch, tmp_path):
    _runtime(monkeypatch, tmp_path, tpu=None, torch_tpu="0.2.0", libtpu="0.0.51", torch_xla="2.9.0")
    stack = tpu_stack.status()
    assert stack.name is None
    assert stack.why == ("No TPU here (none on the PCI bus, no /dev/accel* or /dev/vfio device): TorchTPU needs one, "
                         "so its step is skipped. torch_xla is installed: Part B runs on XLA:CPU.")
    _runtime(monkeypatch, tmp_path / "b", tpu=None)
    assert tpu_stack.status().why.endswith("torch_xla is not installed either: Part B says so where it cannot run.")


def test_device_files_show_a_tpu_the_pci_scan_missed(monkeypatch, tmp_path):
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "vfio").touch()  # every VFIO host has it: no TPU
    assert tpu_stack.tpu_device_files(str(tmp_path)) == []
    (tmp_path / "vfio" / "12").touch()
    (tmp_path / "accel0").touch()
    assert tpu_stack.tpu_device_files(str(tmp_path)) == [str(tmp_path / "accel0"), str(tmp_path / "vfio" / "12")]
    monkeypatch.setattr(hardware, "tpu", lambda: None)
    monkeypatch.setattr(tpu_stack, "tpu_device_files", lambda: ["/dev/vfio/12"])
    assert tpu_stack.tpu_found() == "TPU device files /dev/vfio/12"


def test_a_tpu_with_torch_tpu_and_what_it_needs_is_torchtpu(monkeypatch, tmp_path):
    _runtime(monkeypatch, tmp_path, torch_tpu="0.2.0", libtpu="0.0.51", torch_xla="2.9.0")
    stack = tpu_stack.status()
    assert stack == tpu_stack.Stack("torchtpu", "TPU v5e, 1 chip, 1 XLA device, torch_tpu 0.2.0 with torch 2.12.0+cpu "
                                                "and libtpu 0.0.51: the TorchTPU step runs on device \"tpu\".")


def test_no_torch_tpu_on_a_tpu_gives_the_pip_command_that_keeps_this_torch(monkeypatch, tmp_path):
    _runtime(monkeypatch, tmp_path, torch="2.13.1+cpu")
    stack = tpu_stack.status()
    assert stack.name is None
    assert 'pip install "torch-tpu==0.2.0" "torch==2.13.1"' in stack.why
    assert stack.why.startswith("TPU v5e, 1 chip, 1 XLA device: torch_tpu is not installed. TorchTPU 0.2.0 supports "
                                "this runtime's torch 2.13.1+cpu")
    assert stack.why.endswith("torch_xla is not installed either.")


@pytest.mark.parametrize("torch", ["2.10.0", "2.15.1", "2.8.0"])
def test_a_torch_outside_torchtpus_range_is_said(monkeypatch, tmp_path, torch):
    _runtime(monkeypatch, tmp_path, torch=torch, torch_xla="2.8.0" if torch == "2.8.0" else None)
    stack = tpu_stack.status()
    assert f"TorchTPU 0.2.0 needs torch>=2.11.0,<=2.15.0, and this runtime has torch {torch}: TorchTPU cannot run " \
           "with this torch" in stack.why
    assert "pip install" not in stack.why
    # Kaggle's TPU image: torch 2.8 with torch_xla 2.8 drives its TPU
    assert (stack.name, stack.why.endswith("The TPU runs Part B through torch_xla 2.8.0.")) == \
           (("torch_xla", True) if torch == "2.8.0" else (None, False))


def test_an_installed_torch_tpu_is_judged_by_its_own_metadata(monkeypatch, tmp_path):
    _runtime(monkeypatch, tmp_path, torch="2.16.0", torch_tpu="0.3.0", libtpu="0.0.60",
             requires=("torch>=2.12.0,<=2.16.0", "libtpu>=0.0.55"))
    assert tpu_stack.status().name == "torchtpu"
    _runtime(monkeypatch, tmp_path / "b", torch="2.11.0", torch_tpu="0.3.0", libtpu="0.0.60",
             requires=("torch>=2.12.0,<=2.16.0", "libtpu>=0.0.55"))
    assert "torch_tpu 0.3.0 is installed, but it needs torch>=2.12.0,<=2.16.0, and this runtime has torch 2.11.0" in \
        tpu_stack.status().why


@pytest.mark.parametrize("libtpu, says", [(None, "no libtpu"), ("0.0.17", "libtpu 0.0.17")])
def test_torch_tpu_without_the_libtpu_it_needs(monkeypatch, tmp_path, libtpu, says):
    _runtime(monkeypatch, tmp_path, torch_tpu="0.2.0", libtpu=libtpu)
    stack = tpu_stack.status()
    assert stack.name is None
    assert f'torch_tpu 0.2.0 needs libtpu>=0.0.50, and this runtime has {says}: pip install "libtpu>=0.0.50"' in stack.why


def test_an_old_python_is_said(monkeypatch, tmp_path):
    _runtime(monkeypatch, tmp_path, python="3.10.12")
    assert "TorchTPU needs Python>=3.11, and this runtime has Python 3.10.12" in tpu_stack.status().why


def test_versions_compare_as_torch_tpu_matches_torch_builds():
    assert tpu_stack.satisfies("2.15.0+cpu", ">=2.11.0,<=2.15.0") and tpu_stack.satisfies("2.11.0a0+git12", ">=2.11.0")
    assert not tpu_stack.satisfies("2.15.1", ">=2.11.0,<=2.15.0") and not tpu_stack.satisfies("2.10.0", ">=2.11.0")
    assert tpu_stack.satisfies("2.12.3", "==2.12.*") and not tpu_stack.satisfies("2.13.0", "==2.12.*")
    assert tpu_stack.public("2.12.0+cpu") == "2.12.0"
    with pytest.raises(ValueError, match="version"):
        tpu_stack.release("latest")


def test_the_step_is_refused_with_the_reason_and_starts_nothing(monkeypatch, tmp_path):
    _runtime(monkeypatch, tmp_path, torch="2.10.0")
    monkeypatch.setattr(fresh, "run", lambda *a, **k: pytest.fail("a process was started"))
    with pytest.raises(tpu_stack.TorchTPUUnavailable) as refused:
        tpu_stack.torchtpu_step()
    assert str(refused.value) == tpu_stack.status().why
    with pytest.raises(ValueError, match="batch_sizes"):
        tpu_stack.torchtpu_step(batch_sizes=[64, 0])


def test_where_torchtpu_runs_the_step_goes_to_a_fresh_process_on_tpu(monkeypatch, tmp_path):
    _runtime(monkeypatch, tmp_path, torch_tpu="0.2.0", libtpu="0.0.51")
    calls = []
    monkeypatch.setattr(fresh, "run", lambda fn, *args, **kwargs: calls.append((fn, args, kwargs)) or {"ran": True})
    assert tpu_stack.torchtpu_step() == {"ran": True}
    assert calls == [(tpu_stack.train_on, ("tpu", tpu_stack.BATCH_SIZES, 0, "tpu"), {"timeout_s": 900})]


def test_the_step_eager_and_compiled_as_plain_data_on_the_cpu():
    """The same code as on "tpu", on the CPU with torch.compile's eager backend: compiled equals eager, and the
    smaller last batch is a second graph (dynamic=False), as a new shape is under torch_xla (B2)."""
    run = tpu_stack.train_on("cpu", batch_sizes=[8, 8, 5], backend="eager")
    assert run["device"] == "cpu" and run["batch_sizes"] == [8, 8, 5] and run["graphs_compiled"] == 2
    assert set(run["losses"]) == {"eager", "compiled", "cpu fp32"}
    assert all(type(v) is float for curve in run["losses"].values() for v in curve) and len(run["losses"]["eager"]) == 3
    assert run["compiled_vs_eager"] == 0.0 and run["eager_vs_cpu"] == 0.0
    assert run["losses"]["eager"] != tpu_stack.train_on("cpu", batch_sizes=[8, 8, 5], seed=1, backend="eager")["losses"]["eager"]


def test_the_step_on_tpu_without_torch_tpu_loaded_says_so():
    with pytest.raises(tpu_stack.TorchTPUUnavailable, match="did not load torch_tpu's \"tpu\" device"):
        tpu_stack.train_on("tpu")


def _b8():
    cells = nbformat.read(LESSON, as_version=4).cells
    index = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## B8."))
    return cells[index].source, cells[index + 1]


def test_b8_says_what_happened_from_the_sources_and_what_ran():
    text, _ = _b8()
    text = " ".join(text.split())  # as a reader sees it, whatever the line breaks
    for fact in ("pytorch/xla#9752", "2.9", "pypi.org/project/torch-tpu", "torchtpu.readthedocs.io",
                 "github.com/google-pytorch/torch_tpu", "PrivateUse1", '"tpu"', "torch.compile", "DTensor",
                 "torch_xla.sync()", "not run"):
        assert fact in text, f"B8 does not say {fact}"
    needs = tpu_stack.DOCUMENTED
    assert f"torch-tpu` {needs['version']}" in text and "2.11.0 to 2.15.0" in text and needs["libtpu"][2:] in text


def test_the_cell_after_b8_runs_or_says_why_not():
    _, cell = _b8()
    assert cell.cell_type == "code" and "tpu_stack.status()" in cell.source and "tpu_stack.torchtpu_step()" in cell.source
    assert not cell.metadata.get("nbgrader")
