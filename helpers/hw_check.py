"""One command to check the course on the machine at hand (`make hw-check`).

    python -m helpers.hw_check [--out DIR] [--lessons 01-dataparallel ...] [--cell-timeout S]
                               [--no-notebooks] [--no-figures]

Runs what students run, with this Python and its own torch (a Colab or Kaggle runtime's, a GPU image's):
the four *student* notebooks (nbclient, each in a scratch folder), their explanation cells and figures
end to end, skipping the exercise and check cells (a student completes those); then it measures the
figures that matter with the course's helpers, in this process: DataParallel's device-0 imbalance,
AMP's speed and activation-memory ratios, all-reduce bus bandwidth and XLA compile counts. The notebooks
come with the package (`pip install` of the course's repository ships them as helpers/notebooks/) or,
in a course checkout, from its notebooks/: nothing is downloaded and no solutions/ is needed. Writes
DIR/hw-check.md and DIR/hw-check.json (DIR defaults to reports/): the date, the versions (Python, torch
and its CUDA, torch_xla, libtpu, Accelerate, Lightning, the helpers) against the range the course
supports (helpers/versions.py), the hardware (GPUs with name and compute capability, TPU chips and
kind), each lesson's result and the figures; prints the markdown, and exits 0 when every lesson
passed, 1 otherwise. A figure that fails is reported as failed; it never stops the report.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import amp, hardware, launch, memory, models, tpu_stack, versions, xla
from . import dataparallel as dp
from ._validate import positive_int, positive_number

PACKAGE = Path(__file__).resolve().parent
LESSONS = ("01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu", "05-sharding")
# The distributions whose versions the report gives (importlib.metadata; absent ones are reported absent).
DISTRIBUTIONS = ("torch", "torch_xla", "torch_tpu", "libtpu", "accelerate", "lightning", "multi-device-course-helpers")


def student_notebooks() -> dict[str, Path]:
    """lesson -> the student notebook: the copies the installed package ships (helpers/notebooks/, from the
    repository's notebooks/ at build time), else a course checkout's notebooks/ beside helpers/."""
    for folder in (PACKAGE / "notebooks", PACKAGE.parent / "notebooks"):
        paths = {lesson: folder / lesson / f"{lesson}.ipynb" for lesson in LESSONS}
        if all(path.is_file() for path in paths.values()):
            return paths
    return {lesson: PACKAGE / "notebooks" / lesson / f"{lesson}.ipynb" for lesson in LESSONS}  # each reports it is missing


NOTEBOOKS = student_notebooks()
DEFAULT_OUT = "reports"
DEFAULT_CELL_TIMEOUT = 600
AMP_FORMATS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Skipped(Exception):
    """A figure this machine cannot measure; the message says why."""


# ---- the figures ------------------------------------------------------------------------------


def dataparallel_imbalance(batch: int = 256) -> dict:
    """Lesson 1's step: MLP 256-512-64 with Adam under (real or emulated) DataParallel on devices 0 and 1."""
    positive_int("batch", batch)
    net = models.seeded(models.MLP, in_features=256, hidden=512, out_features=64)
    model = dp.make_data_parallel(net, device_ids=[0, 1])
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(batch, 256, generator=g), torch.randn(batch, 64, generator=g)
    device = model.primary_device
    report = memory.measure_step(model, torch.optim.Adam(model.parameters()), x.to(device), y.to(device), F.mse_loss)
    return {"imbalance_ratio": report.imbalance_ratio, "emulated": report.emulated, "source": report.source,
            "wrapper": model.label, "bytes_per_device": report.totals(),
            "summary": f"device 0 / device 1 = {report.imbalance_ratio:.2f}, {report.source}; "
                       f"MLP 256-512-64, Adam, batch {batch}"}


def amp_ratios(device: str | None = None, shape=(1024, 2048, 1024), batch: int | None = None,
               steps: int | None = None) -> dict:
    """Lesson 3's measurements: step time of an MLP `shape` in fp32, bf16 and fp16 autocast, and the bytes
    autograd saves for lesson 3's MLP 64-256-10 (depth 3, batch 1024)."""
    device = device or amp.device_type()
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    batch = positive_int("batch", batch) if batch is not None else 4096 if device == "cuda" else 256
    steps = positive_int("steps", steps) if steps is not None else 20 if device == "cuda" else 1
    amp.quiet_fp16_cpu_warnings()
    ms = {}
    for fmt, dtype in AMP_FORMATS.items():
        net = models.seeded(models.MLP, 0, in_features=shape[0], hidden=shape[1], out_features=shape[2]).to(device)
        x, y = torch.randn(batch, shape[0], device=device), torch.randn(batch, shape[2], device=device)
        ms[fmt] = amp.step_seconds(net, x, y, dtype, steps=steps) * 1e3
    net = models.seeded(models.MLP, 0, in_features=64, hidden=256, out_features=10, depth=3).to(device)
    x = torch.randn(1024, 64, device=device)
    saved = {fmt: amp.saved_activation_bytes(net, x, dtype) for fmt, dtype in AMP_FORMATS.items()}
    speedup = {fmt: ms["fp32"] / ms[fmt] for fmt in ("bf16", "fp16")}
    memory_ratio = {fmt: saved[fmt] / saved["fp32"] for fmt in ("bf16", "fp16")}
    name = torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({hardware.cpu_cores()} cores)"
    return {"device": device, "device_name": name, "step_ms": ms, "speedup_vs_fp32": speedup,
            "saved_bytes": saved, "saved_bytes_vs_fp32": memory_ratio,
            "speed_model": f"MLP {'-'.join(map(str, shape))}, batch {batch}, mean of {steps} steps",
            "summary": f"on {name}: step speed vs fp32 bf16 x{speedup['bf16']:.2f}, fp16 x{speedup['fp16']:.2f} "
                       f"(MLP {'-'.join(map(str, shape))}, batch {batch}); saved activations vs fp32 "
                       f"bf16 x{memory_ratio['bf16']:.2f}, fp16 x{memory_ratio['fp16']:.2f} (MLP 64-256-10, batch 1024)"}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _allreduce_worker(rank: int, world_size: int, numel: int, warmup: int, iters: int) -> dict:
    device = launch.device()
    x = torch.zeros(numel, device=device)
    flag = torch.zeros(1, device=device)
    seconds = []
    for _ in range(warmup + iters):
        dist.all_reduce(flag)  # lines the ranks up, so each timing is the collective alone
        _sync(device)
        start = time.perf_counter()
        dist.all_reduce(x)
        _sync(device)
        seconds.append(time.perf_counter() - start)
    return {"backend": dist.get_backend(), "device": str(device), "seconds": seconds[warmup:]}


def allreduce_bandwidth(mib: int = 16, n_procs: int = 2, warmup: int = 3, iters: int = 10) -> dict:
    """Bus bandwidth of `dist.all_reduce` on a float32 tensor of `mib` MiB, as nccl-tests defines it."""
    positive_int("mib", mib)
    positive_int("n_procs", n_procs, minimum=2)
    positive_int("warmup", warmup, minimum=0)
    positive_int("iters", iters)
    numel = mib * 2**20 // 4
    ranks = launch.launch(_allreduce_worker, n_procs, args=(numel, warmup, iters))
    per_iter = [max(times) for times in zip(*(r["seconds"] for r in ranks))]  # the slowest rank's time
    seconds = statistics.median(per_iter)
    algbw = numel * 4 / seconds / 1e9
    busbw = algbw * 2 * (n_procs - 1) / n_procs
    backend, device = ranks[0]["backend"], ranks[0]["device"]
    return {"backend": backend, "device": device, "ranks": n_procs, "mib": mib, "median_ms": seconds * 1e3,
            "algbw_gbps": algbw, "busbw_gbps": busbw,
            "summary": f"bus bandwidth {busbw:.2f} GB/s (algbw {algbw:.2f} GB/s; {mib} MiB float32, {n_procs} ranks, "
                       f"{backend} on {device if backend == 'nccl' else 'cpu'}, median of {iters}: {seconds * 1e3:.2f} ms)"}


def xla_compiles() -> dict:
    """Lesson 4's experiment: graph compilations for 8 steps of a fixed batch, and with a smaller last batch."""
    if not xla.available():
        raise Skipped(xla.missing())
    fixed, last = xla.run_many([(xla.count_compiles, (), {"batch_sizes": [8] * 8}),
                                (xla.count_compiles, (), {"batch_sizes": [8] * 7 + [5]})])
    mode = hardware.detect().xla_mode()
    return {"fixed_batch": fixed["compiles"], "smaller_last_batch": last["compiles"], "xla": mode,
            "summary": f"compilations: fixed batch of 8 -> {fixed['compiles']}, smaller last batch -> "
                       f"{last['compiles']} ({mode})"}


def tpu_stack_report() -> dict:
    """Which TPU stack ran here (torch_xla, TorchTPU or none, and why), and TorchTPU's step where it can run."""
    stack = tpu_stack.status()
    summary = f"TPU stack: {stack.name or 'none'} ({stack.why})"
    if stack.name != "torchtpu":
        return {"stack": stack.name, "summary": summary}
    r = tpu_stack.torchtpu_step()
    return {"stack": stack.name, "step": r,
            "summary": f"{summary}; TorchTPU step on {r['device']}: torch {r['torch']}, torch_tpu {r['torch_tpu']}, "
                       f"{r['graphs_compiled']} graph(s), compiled vs eager {r['compiled_vs_eager']:.1e}, "
                       f"eager vs fp32 CPU {r['eager_vs_cpu']:.1e}"}


def sharded_bytes(n_procs: int = 2) -> dict:
    """Lesson 5's ledger: the bytes of parameters, gradients and Adam state each rank holds after one step under DDP,
    ZeroRedundancyOptimizer (ZeRO-1) and FSDP2 (ZeRO-3), next to the fp32 formula."""
    from . import sharding

    positive_int("n_procs", n_procs, minimum=2)
    cfg = sharding.ShardConfig()
    ranks = launch.launch(sharding.memory_worker, n_procs, args=(cfg,))
    n = ranks[0]["n_parameters"]
    fp32 = dict(param_bytes=4, grad_bytes=4, state_bytes=8)
    per_rank = {mode: [sum(r[mode].values()) for r in ranks] for mode in sharding.MODES}
    formula = {mode: sharding.zero_bytes(n, n_procs, stage, **fp32) for mode, stage in zip(sharding.MODES, (0, 1, 3))}
    return {"backend": launch.plan(n_procs).backend, "bytes_per_rank": per_rank, "formula": formula,
            "summary": f"{n_procs} ranks ({launch.plan(n_procs).backend}), {n} parameters, Adam: "
                       + "; ".join(f"{mode} {per_rank[mode]} bytes per rank (formula {formula[mode]:.0f})"
                                   for mode in sharding.MODES)}


FIGURES = {
    "TPU stack": tpu_stack_report,
    "DataParallel device-0 imbalance": dataparallel_imbalance,
    "AMP speed and memory": amp_ratios,
    "All-reduce bandwidth": allreduce_bandwidth,
    "XLA compile counts": xla_compiles,
    "ZeRO / FSDP2 bytes per rank": sharded_bytes,
}


def measure(fn) -> dict:
    """Run one figure's function: status "ok", "skipped" (with a reason) or "failed" (with the error)."""
    start = time.perf_counter()
    try:
        result = {"status": "ok", **fn()}
    except Skipped as why:
        result = {"status": "skipped", "reason": str(why)}
    except Exception as error:
        result = {"status": "failed", "error": f"{type(error).__name__}: {error}"[:4000]}
    result["seconds"] = time.perf_counter() - start
    return result


# ---- the lessons ------------------------------------------------------------------------------


def _describe(error: Exception) -> str:
    if hasattr(error, "ename"):  # nbclient's CellExecutionError: the cell's own exception
        return f"{error.ename}: {error.evalue}"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def is_exercise_cell(cell) -> bool:
    """A code cell a student completes (an nbgrader solution cell) or that checks it (a grade cell)."""
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("solution") or meta.get("grade"))


def kernel_environment() -> dict:
    """The notebooks' kernels import the helpers this process runs: a course checkout's folder goes on their
    PYTHONPATH (an installed package is found anyway)."""
    env = dict(os.environ)
    root = PACKAGE.parent
    if (root / "pyproject.toml").is_file():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    return env


def run_notebook(lesson: str, path, cell_timeout: float) -> dict:
    """Execute the notebook end to end in a fresh python3 kernel, in a scratch folder (what it writes stays out
    of the checkout and the package); exercise and check cells are skipped, their count reported."""
    import tempfile

    path = Path(path)
    result = {"lesson": lesson, "notebook": str(path), "passed": False, "cell": None, "error": None,
              "cells_run": 0, "exercise_cells_skipped": 0}
    current = {}
    start = time.perf_counter()
    try:
        import nbformat
        from nbclient import NotebookClient

        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if is_exercise_cell(cell):
                cell.source = ""  # nbclient skips an empty cell; the others keep their index
                result["exercise_cells_skipped"] += 1
        result["cells_run"] = sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())
        with tempfile.TemporaryDirectory(prefix=f"hw-check-{lesson}-") as scratch:
            client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3",
                                    resources={"metadata": {"path": scratch}},
                                    on_cell_start=lambda cell, cell_index: current.update(cell=cell_index, source=cell.source))
            client.execute(env=kernel_environment())
        result["passed"] = True
    except Exception as error:
        result["error"] = _describe(error)[:4000]
        result["cell"] = current.get("cell")
        result["cell_first_line"] = (current.get("source") or "").strip().split("\n")[0][:200] or None
    result["seconds"] = time.perf_counter() - start
    return result


# ---- the report -------------------------------------------------------------------------------


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def installed_versions() -> dict:
    """Python, torch as imported (with its CUDA), and the installed version of each of DISTRIBUTIONS (None: absent)."""
    found = {"python": f"{platform.python_version()} ({sys.executable})", "torch (imported)": torch.__version__,
             "torch CUDA": torch.version.cuda}
    for name in DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def markdown(report: dict) -> str:
    out = [f"# Hardware check, {report['date']}", "", "## Hardware", "", "```", report["hardware"], "```", ""]
    if report.get("versions"):
        out += ["## Versions", "", "| package | version |", "|---|---|"]
        out += [f"| {name} | {_cell(version) if version else 'not installed'} |" for name, version in report["versions"].items()]
        low, high = report["supported_torch"]
        problems = report.get("version_problems") or []
        out += ["", f"Supported: torch {low} to {high}, torch_xla of the same minor "
                    f"({_cell(' '.join(problems)) if problems else 'this runtime is inside the range'}).", ""]
    if report["lessons"] is None:
        out += ["## Lessons", "", "Not run (--no-notebooks).", ""]
    else:
        out += ["## Lessons", "", "The student notebooks' explanation cells and figures executed end to end, exercise and "
                f"check cells skipped (cell timeout {report['cell_timeout_s']:g} s).",
                "", "| lesson | result | seconds | cells run | error |", "|---|---|---:|---:|---|"]
        for r in report["lessons"]:
            where = f"cell {r['cell']}: " if r["cell"] is not None else ""
            error = _cell(f"{where}{r['error']}") if r["error"] else ""
            out.append(f"| {r['lesson']} | {'pass' if r['passed'] else '**FAIL**'} | {r['seconds']:.1f} | "
                       f"{r.get('cells_run', '')} | {error} |")
        out.append("")
    out += ["## Figures", "", "Measured in the hw-check process with the course's helpers.", ""]
    if not report["figures"]:
        out.append("Not measured (--no-figures).")
    for name, f in report["figures"].items():
        text = {"ok": f.get("summary"), "skipped": f"skipped: {f.get('reason')}",
                "failed": f"**FAILED**: {_last_line(f.get('error', ''))}"}[f["status"]]
        out.append(f"- **{name}** ({f['seconds']:.1f} s): {text}")
    lessons = report["lessons"] or []
    failed = [r["lesson"] for r in lessons if not r["passed"]]
    verdict = (f"{len(failed)} of {len(lessons)} lessons failed ({', '.join(failed)})" if failed
               else f"{len(lessons)} of {len(lessons)} lessons passed" if lessons else "no lessons run")
    out += ["", f"**Result: {verdict}** (total {report['total_seconds']:.0f} s)", ""]
    return "\n".join(out)


def _check_arguments(out, lessons, cell_timeout, notebooks, paths) -> list[str]:
    if not isinstance(out, (str, Path)) or not str(out):
        raise ValueError(f"out must be a folder path, got {out!r}")
    if not isinstance(paths, dict) or not paths:
        raise ValueError(f"paths must be a non-empty dict of lesson name -> notebook path, got {paths!r}")
    if lessons is None:
        lessons = list(paths)
    if isinstance(lessons, str) or not isinstance(lessons, (list, tuple)) or not lessons:
        raise ValueError(f"lessons must be a non-empty list of lesson names, got {lessons!r}")
    unknown = [name for name in lessons if name not in paths]
    if unknown:
        raise ValueError(f"lessons: unknown {unknown}; choose from {list(paths)}")
    if len(set(lessons)) != len(lessons):
        raise ValueError(f"lessons must not repeat a lesson, got {list(lessons)}")
    positive_number("cell_timeout", cell_timeout)
    if notebooks not in (True, False):
        raise ValueError(f"notebooks must be True or False, got {notebooks!r}")
    return list(lessons)


def run_checks(out=DEFAULT_OUT, lessons=None, cell_timeout: float = DEFAULT_CELL_TIMEOUT, notebooks: bool = True,
               paths: dict | None = None, figures: dict | None = None) -> dict:
    """Run the lessons (unless `notebooks=False`) and the figures; write out/hw-check.md and .json.

    `paths`: lesson name -> notebook (default: every lesson's student notebook, NOTEBOOKS); `figures`: name -> function
    returning a dict with a "summary" line (default: FIGURES)."""
    paths = NOTEBOOKS if paths is None else paths
    figures = FIGURES if figures is None else figures
    lessons = _check_arguments(out, lessons, cell_timeout, notebooks, paths)
    start = time.perf_counter()
    hw = hardware.detect()  # before anything initialises CUDA
    found = installed_versions()
    xla_version = found["torch_xla"] if hw.torch_xla_installed else None
    report = {"date": datetime.now().astimezone().isoformat(timespec="seconds"), "hardware": hw.summary(),
              "torch": torch.__version__, "versions": found, "supported_torch": list(versions.SUPPORTED_TORCH),
              "version_problems": versions.torch_problems(torch.__version__, xla_version),
              "cpu_cores": hw.cpu_cores, "gpus": [str(g) for g in hw.gpus],
              "tpu": str(hw.tpu) if hw.tpu else None, "runtime": hw.runtime, "cell_timeout_s": cell_timeout,
              "lessons": None}
    if notebooks:
        report["lessons"] = []
        for lesson in lessons:
            print(f"hw-check: running {lesson} ...", file=sys.stderr, flush=True)
            report["lessons"].append(run_notebook(lesson, paths[lesson], cell_timeout))
    report["figures"] = {}
    for name, fn in figures.items():
        print(f"hw-check: measuring {name} ...", file=sys.stderr, flush=True)
        report["figures"][name] = measure(fn)
    report["passed"] = all(r["passed"] for r in report["lessons"] or [])
    report["total_seconds"] = time.perf_counter() - start
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hw-check.json").write_text(json.dumps(report, indent=2) + "\n")
    (folder / "hw-check.md").write_text(markdown(report))
    return report


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def main(argv=None, paths: dict | None = None, figures: dict | None = None) -> int:
    paths = NOTEBOOKS if paths is None else paths
    parser = argparse.ArgumentParser(prog="python -m helpers.hw_check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help="folder for hw-check.md and hw-check.json (default: reports)")
    parser.add_argument("--lessons", nargs="+", choices=list(paths), metavar="LESSON",
                        help=f"lessons to run (default: all): {', '.join(paths)}")
    parser.add_argument("--cell-timeout", type=_seconds, default=DEFAULT_CELL_TIMEOUT, metavar="S",
                        help=f"seconds one notebook cell may run (default: {DEFAULT_CELL_TIMEOUT})")
    parser.add_argument("--no-notebooks", action="store_true", help="measure the figures only")
    parser.add_argument("--no-figures", action="store_true", help="run the notebooks only")
    args = parser.parse_args(argv)
    if args.lessons and len(set(args.lessons)) != len(args.lessons):
        parser.error(f"argument --lessons: a lesson is named twice: {args.lessons}")
    report = run_checks(args.out, args.lessons, args.cell_timeout, not args.no_notebooks, paths,
                        {} if args.no_figures else figures)
    print(markdown(report))
    print(f"(written to {Path(args.out) / 'hw-check.md'} and {Path(args.out) / 'hw-check.json'})")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
