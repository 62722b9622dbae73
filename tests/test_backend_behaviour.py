"""nccl refuses CPU tensors: every worker the lessons launch must put its collectives' tensors on its rank's device.

On a GPU the launcher picks nccl, which serves CUDA tensors only: a collective on a CPU tensor fails at once ("No
backend type associated with device type cpu"). On gloo, on the CPU, the same worker passes, so the course's CPU runs
cannot see the mistake. There are no CUDA tensors here to run a worker on, so each rank plays it the other way
round: the CPU is its device (what `launch.device()` returns, what the gloo group serves) and the host is another
device type: the default device becomes "lazy" (torch's lazy-tensor backend, computing on the CPU), so a tensor made
without a device (`torch.ones(1)`, a model never moved) lands there, as it would land on the CPU beside a GPU; and a
collective on a host tensor is refused, as nccl refuses one, and recorded with the worker's line that made the call.

Each worker runs as its lesson launches it (its arguments scaled down); the lessons' own workers are read from the
solution notebooks. A worker that still puts a host tensor into a collective is an xfail(strict=True) naming the fix:
once the fix lands it passes, and the strict xfail turns into a failure that asks for the mark to go.
"""

import ast
import json
import os
import traceback
from pathlib import Path
from typing import Callable, NamedTuple

import pytest
import torch
import torch.distributed as dist

from helpers import accel, amp, checkpoints, ddp, launch, sharding

REPO = Path(__file__).resolve().parent.parent
HOST = "lazy"  # the device type that plays the host
HOST_DISPATCH_KEY = "Lazy"
REFUSED = "No backend type associated with device type cpu"
# The namespaces of torch's collective ops: torch.distributed's own, and the functional ones DTensor's redistributions
# (FSDP2's full_tensor(), a DTensor's reshard) call. nccl refuses a CPU tensor in any of them.
COLLECTIVES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")


# ---- in each rank ------------------------------------------------------------------------------


def _refuse_host_tensors(folder: str) -> None:
    """In this rank: the default device becomes the host ("lazy"), and every c10d collective refuses a host tensor
    (instead of the lazy backend's fallback, which would run it on the CPU), noting the worker's call in
    `folder`/rank<r>.txt."""
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()
    for namespace in COLLECTIVES:
        library = torch.library.Library(namespace, "IMPL")
        for name in torch._C._dispatch_get_all_op_names():
            if name.startswith(namespace + "::"):
                library.impl(name.split("::")[1], _refusal(name, folder), HOST_DISPATCH_KEY)
        _KEPT.append(library)  # a Library's kernels live as long as it does
    torch.set_default_device(HOST)
    torch.save = _saving_host_tensors_as_cpu(torch.save)


def _saving_host_tensors_as_cpu(save):
    """torch.save, for host tensors too: the lazy backend's tensors have no storage to save (a CPU tensor's has)."""
    from torch.utils._pytree import tree_map

    def on_cpu(value):
        return value.cpu() if isinstance(value, torch.Tensor) and value.device.type == HOST else value

    def save_from_the_host(obj, *args, **kwargs):
        return save(tree_map(on_cpu, obj), *args, **kwargs)

    return save_from_the_host


_KEPT: list = []


def _refusal(op: str, folder: str):
    def refuse(*args, **kwargs):
        caller = _callers_line()
        with open(os.path.join(folder, f"rank{os.environ['RANK']}.txt"), "a") as f:
            f.write(f"{op} from {caller}\n")
        raise RuntimeError(f"{REFUSED}: {op} on a tensor that is not on this rank's device, from {caller}")

    return refuse


def _callers_line() -> str:
    """The innermost line of the stack outside torch and the Python library: the worker's, or a helper's."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "torch" not in frame.filename.split(os.sep) and "python3." not in frame.filename:
            return f"{os.path.basename(frame.filename)}:{frame.lineno} ({frame.name}: {(frame.line or '').strip()})"
    return "torch itself"


def _audited(fn, folder: str):
    """`fn` with its rank's host tensors refused (for `launch.launch` and `accel.launch` alike: any arguments)."""

    def run(*args):
        _refuse_host_tensors(folder)
        return fn(*args)

    return run


# ---- the launches ------------------------------------------------------------------------------


def _notebook_function(lesson: str, name: str):
    """Function `name` as the solution notebook of `lesson` defines it: its `def` alone, among the notebook's imports."""
    notebook = json.loads((REPO / "solutions" / lesson / f"{lesson}.ipynb").read_text())
    namespace: dict = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) or (isinstance(node, ast.FunctionDef) and node.name == name):
                exec(compile(ast.Module([node], []), f"{lesson}.ipynb {cell.get('id')}", "exec"), namespace)
    if name not in namespace:
        raise LookupError(f"{lesson}.ipynb defines no {name}")
    return namespace[name]


def _lesson2(name):
    return _notebook_function("02-ddp", name)


def _lesson4(name):
    return _notebook_function("04-accelerate-tpu", name)


def _lesson5(name):
    return _notebook_function("05-sharding", name)


def _saved_sharded_checkpoint(tmp) -> tuple:
    """Lesson 5 saves a sharded checkpoint on 2 ranks, then loads it on 3: the load's worker and arguments."""
    folder = str(tmp / "dcp")
    launch.launch(sharding.dcp_save_worker, 2, args=(SHARD, folder))
    return sharding.dcp_load_worker, (SHARD, folder)


def _converted_states(tmp) -> tuple:
    """Lesson 5 loads a full state converted for a plain, a DDP and an FSDP2 model: the worker and its arguments."""
    full = checkpoints.add_prefix(SHARD.model().state_dict())
    states = {kind: sharding.converted(full, kind) for kind in ("plain", "ddp", "fsdp")}
    return sharding.load_kinds_worker, (SHARD, states)


def _refusals(folder: Path) -> list[str]:
    return sorted(line for log in folder.glob("rank*.txt") for line in log.read_text().splitlines())


def _launch_audited(tmp_path, how, fn, n_procs, args=(), **kwargs):
    """Launch `fn` as its lesson does (`how`: "launch" or "accel"), host tensors refused: (the collectives refused,
    the launch's error or None)."""
    folder = tmp_path / "refused"
    folder.mkdir()
    kwargs.setdefault("timeout_s", 60)
    run = _audited(fn, str(folder))
    try:
        if how == "accel":
            accel.launch(run, n_procs, args, **kwargs)
        else:
            launch.launch(run, n_procs, args, **kwargs)
        error = None
    except launch.WorkerFailed as failed:
        error = failed
    return _refusals(folder), error


class Case(NamedTuple):
    how: str  # launched by "launch" (launch.launch) or by "accel" (accel.launch)
    n_procs: int
    worker_and_args: Callable  # tmp_path -> (the worker, its arguments): the notebooks are read when the case runs
    options: dict = {}
    fix: str | None = None  # the change it still needs


CFG = ddp.TrainConfig(epochs=1)
SHARD = sharding.ShardConfig()

CASES = {
    "02 step_time_worker": Case("launch", 2, lambda tmp: (ddp.step_time_worker, (16, 32, 8, 1))),
    "02 hello": Case("launch", 2, lambda tmp: (ddp.hello, ())),
    "02 allreduce_demo": Case("launch", 2, lambda tmp: (ddp.allreduce_demo, ())),
    # rank 1 fails on purpose in the lesson; alone, rank 0 shows what its all-reduce is given
    "02 broken_worker": Case("launch", 1, lambda tmp: (_lesson2("broken_worker"), ())),
    "02 train_worker": Case("launch", 2, lambda tmp: (ddp.train_worker, (CFG, False))),
    "02 uneven_worker": Case("launch", 2, lambda tmp: (ddp.uneven_worker, ([2, 2],))),  # the lesson's [3, 2] hangs
    "02 uneven_worker join": Case("launch", 2, lambda tmp: (ddp.uneven_worker, ([3, 2], True))),
    "02 loader_steps_worker": Case("launch", 2, lambda tmp: (ddp.loader_steps_worker, (11, _lesson2("make_loader")))),
    "02 manual_average_worker": Case("launch", 2, lambda tmp: (ddp.manual_average_worker,
                                                               (CFG, _lesson2("average_gradients")))),
    "02 accumulation_worker": Case("launch", 2, lambda tmp: (ddp.accumulation_worker,
                                                             (CFG, 4, _lesson2("accumulate_and_step"), 2))),
    "02 checkpoint_worker": Case("launch", 2, lambda tmp: (ddp.checkpoint_worker,
                                                           (CFG, str(tmp / "c.pt"), _lesson2("save_checkpoint"), 0.1))),
    "02 private_disk_worker": Case("launch", 2, lambda tmp: (_lesson2("private_disk_worker"), (CFG, str(tmp)))),
    "02 my_ddp_worker": Case("launch", 2, lambda tmp: (_lesson2("my_ddp_worker"), (ddp.TrainConfig(epochs=1, n_samples=32),)),
                             options={"init_process_group": False}),
    "03 amp_worker fp32": Case("launch", 2, lambda tmp: (amp.amp_worker, ("fp32", 2))),
    "03 amp_worker bf16": Case("launch", 2, lambda tmp: (amp.amp_worker, ("bf16", 2))),
    "04 train_worker": Case("accel", 2, lambda tmp: (accel.train_worker, (64, 16, 1))),
    "04 train_worker accumulating, bf16": Case("accel", 2, lambda tmp: (accel.train_worker, (64, 8, 1, 0.05, 0, "bf16", 2))),
    "04 gather_worker": Case("accel", 2, lambda tmp: (accel.gather_worker, (10, 3))),
    "04 checkpoint_worker": Case("accel", 2, lambda tmp: (accel.checkpoint_worker, (str(tmp),))),
    "04 my_accelerate_worker": Case("accel", 2, lambda tmp: (_lesson4("my_accelerate_worker"), (64, 16, 1, 0.05, 0))),
    "05 memory_worker": Case("launch", 2, lambda tmp: (sharding.memory_worker, (SHARD,))),
    "05 zero1_worker": Case("launch", 2, lambda tmp: (sharding.zero1_worker, (SHARD, _lesson5("zero1_step")))),
    "05 torch_zero_worker": Case("launch", 2, lambda tmp: (sharding.torch_zero_worker, (SHARD,))),
    "05 fsdp_tours_worker": Case("launch", 2, lambda tmp: (sharding.fsdp_tours_worker, (SHARD,))),
    "05 fsdp_observed_worker": Case("launch", 2, lambda tmp: (sharding.fsdp_observed_worker,
                                                               (_lesson5("my_fsdp_worker"), SHARD))),
    "05 dcp_load_worker": Case("launch", 3, _saved_sharded_checkpoint),
    "05 load_kinds_worker": Case("launch", 2, _converted_states),
}


@pytest.mark.parametrize("case", [
    pytest.param(case, id=name, marks=[pytest.mark.xfail(strict=True, reason=f"to fix: {case.fix}")] if case.fix else [])
    for name, case in CASES.items()])
def test_every_collective_of_the_lessons_workers_is_on_the_ranks_device(tmp_path, case):
    worker, args = case.worker_and_args(tmp_path)
    refused, error = _launch_audited(tmp_path, case.how, worker, case.n_procs, args, **case.options)
    assert refused == [], "collectives on host tensors (nccl refuses them):\n" + "\n".join(refused)
    assert error is None, f"the worker failed otherwise:\n{error}"


# ---- the emulation itself ----------------------------------------------------------------------


def _host_tensor_in_a_collective(rank, world_size):
    value = torch.ones(1)  # no device: the host's
    dist.all_reduce(value)
    return value


def _device_tensor_in_a_collective(rank, world_size):
    value = torch.ones(1, device=launch.device())
    dist.all_reduce(value)
    dist.barrier()
    return value


def _model_left_on_the_host(rank, world_size):
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(torch.nn.Linear(2, 2)).module.weight  # never moved to launch.device()


def test_a_host_tensor_is_refused_as_nccl_refuses_a_cpu_tensor(tmp_path):
    refused, error = _launch_audited(tmp_path, "launch", _host_tensor_in_a_collective, 2)
    line = _host_tensor_in_a_collective.__code__.co_firstlineno + 2
    # (the first rank refused stops the launch: the other may not get that far)
    assert refused and set(refused) == {f"c10d::allreduce_ from test_backend_behaviour.py:{line} "
                                        "(_host_tensor_in_a_collective: dist.all_reduce(value))"}
    assert REFUSED in str(error)


def _host_tensor_in_a_functional_collective(rank, world_size):
    import torch.distributed._functional_collectives as funcol

    return funcol.all_reduce(torch.ones(1), "sum", dist.group.WORLD)  # DTensor's and FSDP2's kind of collective


def test_a_host_tensor_in_a_functional_collective_is_refused_at_the_call(tmp_path):
    refused, error = _launch_audited(tmp_path, "launch", _host_tensor_in_a_functional_collective, 2)
    assert refused and all(line.startswith("_c10d_functional::all_reduce from test_backend_behaviour.py:")
                           for line in refused), refused
    assert REFUSED in str(error)


def test_a_model_left_on_the_host_is_refused_by_ddp(tmp_path):
    refused, error = _launch_audited(tmp_path, "launch", _model_left_on_the_host, 2)
    assert refused and error is not None and REFUSED in str(error)


def test_a_tensor_on_the_ranks_device_passes_and_comes_back_from_it(tmp_path):
    refused, error = _launch_audited(tmp_path, "launch", _device_tensor_in_a_collective, 2)
    assert refused == [] and error is None


def test_the_real_dispatch_of_a_group_without_a_cpu_backend_refuses_cpu_tensors():
    """What the emulation stands for: a group whose backend serves CUDA tensors only (gloo registered for the cuda
    device type, as nccl is) refuses a CPU tensor with nccl's words."""

    def worker(rank, world_size):
        dist.init_process_group("cuda:gloo")
        try:
            dist.all_reduce(torch.ones(1))
        except RuntimeError as error:
            return str(error)
        finally:
            dist.destroy_process_group()

    assert all(REFUSED in message for message in launch.launch(worker, 2, init_process_group=False))
