"""Hugging Face Accelerate: a launcher that returns each process's result, the lesson's workers,
and their single-process reference.

Importing this module sets USE_TORCH_XLA=0 unless a TPU is present: with torch_xla installed,
Accelerate would otherwise pick `xla:0` even for `Accelerator(cpu=True)`.
"""

from __future__ import annotations

import os
import sys

from .hardware import tpu_present

os.environ.setdefault("USE_TORCH_XLA", "1" if tpu_present() else "0")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.utils.environment import str_to_bool  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from . import data, ddp, fresh as _fresh, launch as _launch  # noqa: E402
from ._validate import function, positive_int, positive_number, str_dict  # noqa: E402
from .language import say  # noqa: E402
from . import refusal  # noqa: E402


def launch_env(num_processes: int) -> dict[str, str]:
    """What each process of `launch` is told besides torchrun's variables: run on the CPU (gloo)
    unless every process can have a GPU of its own, and never on the TPU (one chip serves one process)."""
    positive_int("num_processes", num_processes)
    env = {"USE_TORCH_XLA": "0"}
    if _launch.plan(num_processes).backend == "gloo":
        env["ACCELERATE_USE_CPU"] = "true"
    return env


def launch(fn, num_processes: int = 2, args: tuple = (), timeout_s: float = 300.0, env: dict | None = None) -> list:
    """Run `fn(*args)` in `num_processes` processes, as `notebook_launcher(fn, args, num_processes)` means
    to, and bring back what `fn` returns on each process (in process order). `env`: more variables for every
    process, as `accelerate launch` sets them (`--gradient_accumulation_steps 2`:
    {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2"}).

    The processes start from a fork server (`helpers.launch`) with torchrun's environment (RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_*) and a process group that times out; Accelerate takes both
    over. Not `notebook_launcher` itself: it forks the notebook (a child can hang
    in OpenMP once the notebook has run a multi-threaded op), runs `fn` once in the notebook on
    Colab without two GPUs (its check is Colab's alone: on Kaggle it starts the processes), and
    puts two processes on one GPU where there is one.
    """
    __tracebackhide__ = True  # a notebook shows a failed process's traceback from the cell straight to `fn`'s code
    function("fn", fn)
    if not isinstance(args, tuple):
        raise ValueError(say("args must be a tuple, got {kind}", kind=type(args).__name__))
    env = {**launch_env(num_processes), **str_dict("env", env)}

    def process(rank, world_size, *fn_args):
        __tracebackhide__ = True
        return fn(*fn_args)

    return _launch.launch(process, num_processes, args, timeout_s=timeout_s, env=env)


def accelerator(**kwargs) -> Accelerator:
    """An Accelerator on the devices `launch` gave this process: the CPU when it was told
    ACCELERATE_USE_CPU or there is no GPU (Accelerate would otherwise quietly run each
    "MULTI_GPU" process alone), else its own GPU."""
    use_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes") or not torch.cuda.is_available()
    return Accelerator(cpu=use_cpu, **kwargs)


def dataset(n_samples: int = 256, seed: int = 0):
    """Lesson 2's data (ddp.TrainConfig), so both lessons train the same thing."""
    return ddp.TrainConfig(n_samples=n_samples, seed=seed).dataset()


def model(seed: int = 0):
    return ddp.TrainConfig(seed=seed).model()


def train_worker(n_samples=256, batch_size=16, epochs=2, lr=0.05, seed=0, mixed_precision="no",
                 accumulation_steps=1) -> dict:
    """The training loop of lesson 2, in Accelerate: prepare, acc.backward, accumulate."""
    acc = accelerator(mixed_precision=mixed_precision, gradient_accumulation_steps=accumulation_steps)
    net = model(seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    loader = DataLoader(dataset(n_samples, seed), batch_size=batch_size)
    inner_dtypes = []  # what the first layer really computes in (accelerate returns fp32 outputs)
    net[0].register_forward_hook(lambda module, args, out: inner_dtypes.append(out.dtype))
    net, optimizer, loader = acc.prepare(net, optimizer, loader)
    bar = _launch.progress(epochs * len(loader))  # launch's one bar for all processes: a step is a batch
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            with acc.accumulate(net):
                loss = F.mse_loss(net(x), y)
                acc.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            losses.append(acc.gather(loss.detach()).mean().item())
            bar.update()
    return {"state": {k: v.cpu() for k, v in acc.unwrap_model(net).state_dict().items()},
            "losses": losses, "distributed_type": str(acc.distributed_type), "device": str(acc.device),
            "num_processes": acc.num_processes, "mixed_precision": acc.mixed_precision,
            "compute_dtype": str(inner_dtypes[-1])}


@refusal.reference
def reference(n_samples=256, batch_size=16, epochs=2, lr=0.05, seed=0, num_processes=2) -> dict:
    """One process: Accelerate hands process r the batches r, r+k, r+2k, ... of the loader, so one
    optimizer step sees k consecutive batches — one batch of k x batch_size here."""
    for name, value in (("n_samples", n_samples), ("batch_size", batch_size), ("epochs", epochs),
                        ("num_processes", num_processes)):
        positive_int(name, value)
    positive_number("lr", lr)
    if n_samples % (batch_size * num_processes):
        raise ValueError(say("n_samples must be a multiple of batch_size x num_processes for an exact reference"))
    net = model(seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in DataLoader(dataset(n_samples, seed), batch_size=batch_size * num_processes):
            optimizer.zero_grad()
            F.mse_loss(net(x), y).backward()
            optimizer.step()
    return {"state": net.state_dict()}


def accumulation_references(n_samples: int, batch_size: int, epochs: int, lr: float, seed: int, num_processes: int,
                            accumulation_steps: int) -> dict:
    """What Accelerate's loop trains when its Accelerator accumulates gradients over `accumulation_steps` batches
    (`Accelerator(gradient_accumulation_steps=k)`, or `accelerate launch --gradient_accumulation_steps k`), as
    single-process references (`reference`), each a state dict:
    "accumulate": the step inside `with accelerator.accumulate(model)`, which steps every k batches of each
    process on their mean gradient (accelerator.backward divides each loss by k): a batch k times larger;
    "every batch": the step outside it, which steps every batch on 1/k of its gradient: a learning rate k times
    smaller. A loop that calls loss.backward() instead of accelerator.backward(loss) trains neither."""
    positive_int("accumulation_steps", accumulation_steps)
    positive_number("lr", lr)
    return {"accumulate": reference(n_samples, batch_size * accumulation_steps, epochs, lr, seed, num_processes)["state"],
            "every batch": reference(n_samples, batch_size, epochs, lr / accumulation_steps, seed, num_processes)["state"]}


def gather_worker(n_samples: int, batch_size: int) -> dict:
    """Evaluate over `n_samples` indexed samples: what gather and gather_for_metrics return."""
    acc = accelerator()
    loader = acc.prepare(DataLoader(data.indexed(n_samples), batch_size=batch_size))
    gathered, for_metrics, local = [], [], []
    for (x,) in loader:
        local += x.flatten().tolist()
        gathered += acc.gather(x).flatten().tolist()
        for_metrics += acc.gather_for_metrics(x).flatten().tolist()
    return {"rank": acc.process_index, "local": local, "gather": gathered, "gather_for_metrics": for_metrics}


@refusal.reference
def gather_lengths_reference(n_samples: int, batch_size: int, num_processes: int) -> tuple[int, int]:
    """(len(gather), len(gather_for_metrics)) of gather_worker's loop on `num_processes` processes, worked out in this
    one process from Accelerate's own sharding: the loader `prepare` gives each process (prepare_data_loader with its
    process index: its batches, even across processes, and the remainder Accelerate reads at the loader's start),
    gathered step by step as `gather` concatenates them, the last step cut to that remainder as `gather_for_metrics`
    cuts it. No launch: the grader's reference for any number of processes (tests/test_accel.py checks it against
    launched runs)."""
    from accelerate.data_loader import prepare_data_loader

    positive_int("n_samples", n_samples)
    positive_int("batch_size", batch_size)
    positive_int("num_processes", num_processes)
    loaders = [prepare_data_loader(DataLoader(data.indexed(n_samples), batch_size=batch_size),
                                   num_processes=num_processes, process_index=rank, put_on_device=False)
               for rank in range(num_processes)]
    local = [[len(x) for (x,) in loader] for loader in loaders]
    if len({len(steps) for steps in local}) != 1:
        raise RuntimeError(say("the processes' loaders have different numbers of batches: {local}", local=local))
    per_step = [sum(steps[i] for steps in local) for i in range(len(local[0]))]
    remainder = loaders[0].remainder
    last = min(remainder, per_step[-1]) if remainder > 0 else per_step[-1]
    return sum(per_step), sum(per_step[:-1]) + last


def checkpoint_worker(folder: str) -> dict:
    """save_state after a step, a second step, load_state: the weights return to the saved ones."""
    acc = accelerator()
    net = model(0)
    optimizer = torch.optim.Adam(net.parameters())
    loader = DataLoader(dataset(64), batch_size=8)
    net, optimizer, loader = acc.prepare(net, optimizer, loader)
    batches = iter(loader)
    for _ in range(2):
        x, y = next(batches)
        acc.backward(F.mse_loss(net(x), y))
        optimizer.step()
        optimizer.zero_grad()
        if _ == 0:
            acc.save_state(folder)
            saved = {k: v.clone().cpu() for k, v in acc.unwrap_model(net).state_dict().items()}
    acc.load_state(folder)
    restored = {k: v.cpu() for k, v in acc.unwrap_model(net).state_dict().items()}
    acc.print(say("saved to {folder}: {files}", folder=folder, files=sorted(os.listdir(folder))))  # main process only
    return {"equal": all(torch.equal(saved[k], restored[k]) for k in saved), "files": sorted(os.listdir(folder))}


# Section A6's probe, forked from a server that imported torch alone (a second a probe less than a fresh
# interpreter): Accelerate and torch_xla, which read the variables probed when imported, are imported anew each time.
# On Linux; elsewhere (no fork on Windows, an unsafe one on macOS) each probe is a fresh interpreter.
PROBE_SERVER = _fresh.ForkServer(["torch", "helpers.accelerate_probe"])


def warm_up() -> None:
    """The servers this lesson's processes fork from (the launch's ranks, section A6's probe) start importing torch
    now, in the background: the first launch and the first probe then start at once. Only in a notebook's kernel."""
    _launch.warm_up()
    if _probe_server() is not None:
        PROBE_SERVER.start_in_background()


def _probe_server():
    return PROBE_SERVER if sys.platform.startswith("linux") else None


def _steers_device(name: str) -> bool:
    """A variable that only chooses Accelerate's or torch_xla's device: the only ones the grader passes on from
    an environment a notebook chose (an allow-list: anything else could make the process load other code)."""
    return name in ("USE_TORCH_XLA", "PJRT_DEVICE") or (name.startswith("ACCELERATE_") and "PATH" not in name
                                                         and "FILE" not in name)


def _accelerate_reads(value: str, flag: bool) -> bool:
    """Whether Accelerate reads the variable's `value` as `flag`, with its own parser (it refuses what it cannot read)."""
    try:
        return str_to_bool(value) == flag
    except ValueError:
        return False


# The variables known to leave Accelerator(cpu=True) on a TPU, with the values that do: torch_xla imported by
# Accelerate (its default), PJRT's TPU runtime (what torch_xla picks by itself where libtpu and a chip are; torch_xla
# compares the name as written), and the CPU not forced.
TPU_SAFE_ENV = {"USE_TORCH_XLA": lambda v: _accelerate_reads(v, True), "PJRT_DEVICE": lambda v: v == "TPU",
                "ACCELERATE_USE_CPU": lambda v: _accelerate_reads(v, False)}


def tpu_env_problem(env: dict) -> str | None:
    """What in `env`, the variables a notebook sets before importing Accelerate on a machine with a TPU, could keep
    `Accelerator(cpu=True)` off the TPU (None when nothing): judged by what the variables mean, never by a probe,
    which would depend on the machine judging (PJRT_DEVICE=TPU fails where there is no TPU). Only the variables of
    TPU_SAFE_ENV, with the values it allows, are known to leave the TPU in use."""
    str_dict("env", env)
    for name, value in env.items():
        if name not in TPU_SAFE_ENV:
            return say("with a TPU, {name} is not known to leave Accelerate and torch_xla on it", name=name)
        if not TPU_SAFE_ENV[name](value):
            return say("with a TPU, {name}={value} keeps Accelerate or torch_xla off it", name=name, value=value)
    return None


def accelerator_device(extra_env: dict) -> str:
    """What `Accelerator(cpu=True)` runs on in a process of its own (fresh for Accelerate and torch_xla: a child of
    PROBE_SERVER on Linux) whose environment is this process's less USE_TORCH_XLA, plus `extra_env`: "cpu
    DistributedType.NO", "xla:0 DistributedType.XLA", ... or the last line of the error. For the grader, which runs
    it on environments a notebook chose: only the variables that choose a device (USE_TORCH_XLA, PJRT_DEVICE,
    ACCELERATE_*) are passed on; anything else (LD_PRELOAD, PYTHONPATH, ...) is left out."""
    from . import accelerate_probe

    str_dict("extra_env", extra_env)
    env = {k: v for k, v in os.environ.items() if k != "USE_TORCH_XLA"}
    env.update({k: v for k, v in extra_env.items() if _steers_device(k)})
    try:
        return _fresh.run(accelerate_probe.device, env, server=_probe_server(), timeout_s=120)
    except RuntimeError as error:  # Accelerate refused: its error's last line, as a terminal would show it
        return (str(error).strip().splitlines() or [""])[-1]
