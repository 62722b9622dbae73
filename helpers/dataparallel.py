"""nn.DataParallel, real on >= 2 CUDA GPUs and faithfully emulated on virtual CPU devices otherwise.

Both wrappers *are* `nn.DataParallel` subclasses and run torch's own `DataParallel.forward`
(scatter -> replicate -> parallel_apply -> gather). The emulation swaps only the data movement
that torch implements for CUDA alone:

* scatter:   torch's `scatter_kwargs`, whose per-tensor step is `tensor.chunk(n_devices, dim)`
             (the rule of torch/csrc/cuda/comm.cpp); chunks for devices >= 1 are copies.
* replicate: torch's `replicate`, with a broadcast whose backward *sums* the replicas'
             gradients onto device 0 with torch's own `comm.reduce_add_coalesced` (what
             ReduceAddCoalesced calls on GPUs: each device flattens its replica's gradients into one
             buffer per <= 10 MiB chunk, the buffers are summed on device 0, and the sum is cut into
             views that become `.grad`); only its `reduce_add` (NCCL's reduce) is swapped for a CPU sum.
* parallel_apply: one Python thread per replica, like torch's, carrying grad mode and
             whether autocast is on into each thread, but not autocast's dtype (torch's
             behaviour: replicas compute in the device's default autocast dtype). The virtual
             devices share the caller's CPU threads: each replica thread computes with
             `replica_threads(torch.get_num_threads(), n_replicas)` intra-op threads (1 on a
             2-core machine), so the emulation never runs more compute threads than the caller
             asked for. (Without this every replica thread built an OpenMP team as large as the
             caller's each step; on 2 cores their spin-waiting workers competed with the caller's
             backward, and the backward phase of a 32-64-4 MLP measured 10-90 ms instead of 0.4 ms.)
* gather:    `torch.cat` on device 0, unsqueezing scalars exactly like torch's Gather.

Every forward appends a `StepRecord` (chunk sizes, seconds per phase) to `model.steps`.
"""

from __future__ import annotations

import importlib
import math
import threading
import time
import warnings
import weakref
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from unittest import mock

import torch
from torch import nn
from torch._utils import ExceptionWrapper

# the modules themselves (torch.nn.parallel re-exports functions under the same names)
replicate_module = importlib.import_module("torch.nn.parallel.replicate")
scatter_gather = importlib.import_module("torch.nn.parallel.scatter_gather")
comm = importlib.import_module("torch.nn.parallel.comm")

from . import compare
from ._saved import saved_bytes
from ._validate import positive_int
from .language import message, say

PHASES = (message("scatter"), message("replicate"), message("forward"), message("gather"), message("backward"))


def split_sizes(batch_size: int, n_devices: int) -> list[int]:
    """Rows each device gets when DataParallel splits `batch_size` rows over `n_devices` devices.

    torch scatters with `tensor.chunk(n_devices)`: every chunk has ceil(N / k) rows, the last one
    what is left, and devices beyond the last chunk get nothing (10 over 3 -> [4, 4, 2], 6 over 4 -> [2, 2, 2]).
    """
    positive_int("batch_size", batch_size)
    positive_int("n_devices", n_devices)
    rows = math.ceil(batch_size / n_devices)
    full, rest = divmod(batch_size, rows)
    return [rows] * full + ([rest] if rest else [])


def split_indices(batch_size: int, n_devices: int) -> list[list[int]]:
    """Which sample indices of the batch each device receives (contiguous slices, in order)."""
    out, start = [], 0
    for size in split_sizes(batch_size, n_devices):
        out.append(list(range(start, start + size)))
        start += size
    return out


def pieces_problem(pieces, x: torch.Tensor, n_devices: int) -> str | None:
    """What is wrong with `pieces`, the inputs a model ran on for one DataParallel forward of the batch `x` over
    `n_devices` devices (None when nothing is): it must run exactly once on each device's rows, the contiguous
    pieces of torch's chunk split (`split_sizes`), in any order (DataParallel's replica threads start and
    finish in any order). Pieces are compared exactly (same dtype, shape and values)."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        raise ValueError(say("x must be a batch: a tensor with at least one dimension"))
    expected = list(x.split(split_sizes(len(x), n_devices)))
    if type(pieces) is not list or not all(type(p) is torch.Tensor for p in pieces):
        return say("the model's inputs were not tensors")
    left = list(range(len(expected)))
    for piece in pieces:
        match = next((i for i in left if compare.same_tensor(piece, expected[i])), None)
        if match is None:
            if any(compare.same_tensor(piece, e) for e in expected):
                return say("the model ran more than once on one device's rows: run it once per device")
            return say("the model ran on rows that are no device's piece: split the batch as DataParallel does "
                       "(contiguous pieces, torch's chunk rule)")
        left.remove(match)
    if left:
        return say("the model never ran on some device's rows: run it once on each device's piece")
    return None


_CHUNK_FORBIDDEN = message(
    "work out the rule yourself: torch.chunk and the course's split helpers are off limits here")
_forbidden_message = _CHUNK_FORBIDDEN
# The operators that split by torch.chunk's rule. They are refused in torch's dispatcher, where every route ends:
# torch.chunk, Tensor.chunk, torch._C._VariableFunctions.chunk, torch.ops.aten.chunk, any alias of them, C++
# callers and other threads alike.
_CHUNK_OPS = ("chunk", "unsafe_chunk")
_refusing = {"library": None, "depth": 0}


def _refusal(*args, **kwargs):
    raise AssertionError(say(_forbidden_message))


@contextmanager
def chunk_forbidden(message: str = _CHUNK_FORBIDDEN):
    """Inside this block aten's chunk operators (`torch.chunk`, `Tensor.chunk`, `torch.ops.aten.chunk`, however
    reached, in any thread) and this module's `split_sizes`/`split_indices` raise AssertionError(message), however
    they were imported (the helpers' code is swapped, not only their names). Exercise 1 asks for the split rule
    without them."""
    global _forbidden_message
    if not isinstance(message, str) or not message:
        raise ValueError(say("message must be a non-empty str, got {message!r}", message=message))
    helpers = (split_sizes, split_indices)
    codes = [f.__code__ for f in helpers]
    saved, _forbidden_message = _forbidden_message, message
    try:
        _refuse_chunk_ops()
        for f in helpers:
            f.__code__ = _refusal.__code__
        yield
    finally:
        for f, code in zip(helpers, codes):
            f.__code__ = code
        _allow_chunk_ops()
        _forbidden_message = saved


def _refuse_chunk_ops() -> None:
    """Registers _refusal as the chunk operators' kernel for every backend (nested blocks share one registration).
    torch warns once that an operator's kernel is overridden; a cell that writes to stderr scores nothing."""
    _refusing["depth"] += 1
    if _refusing["library"] is not None:
        return
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in _CHUNK_OPS:
            library.impl(op, _refusal, "CompositeImplicitAutograd")
    _refusing["library"] = library


def _allow_chunk_ops() -> None:
    _refusing["depth"] = max(0, _refusing["depth"] - 1)
    if _refusing["depth"] == 0 and _refusing["library"] is not None:
        _refusing["library"]._destroy()
        _refusing["library"] = None


@dataclass
class StepRecord:
    """One forward (and its backward) through a DataParallel wrapper."""

    chunk_sizes: list[int]
    seconds: dict[str, float] = field(default_factory=dict)
    replica_forward_seconds: list[float] = field(default_factory=list)
    _backward_start: float | None = None
    _backward_end: float | None = None

    @property
    def backward_seconds(self) -> float | None:
        if self._backward_start is None or self._backward_end is None:
            return None
        return self._backward_end - self._backward_start

    def phase_seconds(self) -> dict[str, float]:
        phases = {name: self.seconds.get(name, 0.0) for name in PHASES[:-1]}
        phases["backward"] = self.backward_seconds or 0.0
        return phases


class _StepRecorder:
    """Times torch's four DataParallel phases; mixed into both wrappers."""

    emulated = False
    _measure: dict | None = None  # set by helpers.memory while it measures one step

    def _init_recorder(self) -> None:
        self.steps: list[StepRecord] = []
        self._open: StepRecord | None = None
        me = weakref.ref(self)  # the hooks live on the module's parameters: do not keep the wrapper alive

        def grad_accumulated(_param):
            wrapper = me()
            if wrapper is not None and wrapper._last_backward_step is not None:
                wrapper._last_backward_step._backward_end = wrapper._clock()

        for p in self.module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(grad_accumulated)

    _last_backward_step: StepRecord | None = None

    @property
    def primary_device(self) -> torch.device:
        """Where the training loop must put each batch: device_ids[0]."""
        return torch.device("cpu") if self.emulated else torch.device("cuda", self.device_ids[0])

    def _clock(self) -> float:
        if not self.emulated and torch.cuda.is_available():
            for d in self.device_ids:  # synchronize() alone waits for the current device only
                torch.cuda.synchronize(d)
        return time.perf_counter()

    @contextmanager
    def _phase(self, name: str):
        start = self._clock()
        yield
        if self._open is not None:
            self._open.seconds[name] = self._clock() - start

    def scatter(self, inputs, kwargs, device_ids):
        with self._phase("scatter"):
            scattered = super().scatter(inputs, kwargs, device_ids)
        sizes = [_leading_size(chunk, self.dim) for chunk in scattered[0]] if scattered[0] else []
        self._open.chunk_sizes = sizes
        return scattered

    def replicate(self, module, device_ids):
        with self._phase("replicate"):
            return super().replicate(module, device_ids)

    def parallel_apply(self, replicas, inputs, kwargs):
        with self._phase("forward"):
            return super().parallel_apply(replicas, inputs, kwargs)

    def gather(self, outputs, output_device):
        with self._phase("gather"):
            gathered = super().gather(outputs, output_device)
        step = self._open
        for t in _tensors(gathered):
            if t.requires_grad:
                t.register_hook(lambda grad, step=step: self._backward_started(step))
        return gathered

    def _backward_started(self, step: StepRecord) -> None:
        if step._backward_start is None:
            step._backward_start = self._clock()
        self._last_backward_step = step

    def forward(self, *inputs, **kwargs):
        self._open = StepRecord(chunk_sizes=[])
        self.steps.append(self._open)
        try:
            return super().forward(*inputs, **kwargs)
        finally:
            self._open = None

    def phase_totals(self, last: int | None = None) -> dict[str, float]:
        """Seconds per phase summed over the recorded steps (the last `last` ones if given)."""
        steps = self.steps[-last:] if last else self.steps
        totals = dict.fromkeys(PHASES, 0.0)
        for step in steps:
            for name, seconds in step.phase_seconds().items():
                totals[name] += seconds
        return totals


class TimedDataParallel(_StepRecorder, nn.DataParallel):
    """The real `nn.DataParallel` (needs >= 1 CUDA device), with per-phase timings."""

    def __init__(self, module: nn.Module, device_ids=None, output_device=None, dim: int = 0):
        if not torch.cuda.is_available():
            raise ValueError(say("device_ids: the real nn.DataParallel needs CUDA devices; use emulate=True on this "
                                 "machine"))
        nn.DataParallel.__init__(self, module, device_ids, output_device, dim)
        self._init_recorder()

    @property
    def label(self) -> str:
        return say("real nn.DataParallel on CUDA devices {ids}", ids=self.device_ids)


class EmulatedDataParallel(_StepRecorder, nn.DataParallel):
    """`nn.DataParallel` on virtual CPU devices: torch's own forward, emulated data movement."""

    emulated = True

    def __init__(self, module: nn.Module, device_ids=(0, 1), output_device=None, dim: int = 0):
        nn.Module.__init__(self)  # nn.DataParallel.__init__ turns itself off when there is no CUDA
        device_ids = _check_device_ids(device_ids)
        if output_device is None:
            output_device = device_ids[0]
        if output_device not in device_ids:
            raise ValueError(say("output_device must be one of device_ids {device_ids}, got {output_device!r}",
                                 device_ids=device_ids, output_device=output_device))
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise ValueError(say("dim must be an int, got {dim!r}", dim=dim))
        for t in list(module.parameters()) + list(module.buffers()):
            if t.device.type != "cpu":
                raise ValueError(say("module: the emulation runs on the CPU, found a tensor on {device}",
                                     device=t.device))
        self.module = module
        self.device_ids = device_ids
        self.output_device = output_device
        self.dim = dim
        self.src_device_obj = torch.device("cpu")
        self._init_recorder()

    @property
    def label(self) -> str:
        return say("emulated nn.DataParallel on {n} virtual CPU devices", n=len(self.device_ids))

    def scatter(self, inputs, kwargs, device_ids):
        with _virtual_collectives():
            scattered_inputs, scattered_kwargs = super().scatter(inputs, kwargs, device_ids)
        if self._measure is not None:
            self._measure["inputs"] = [
                list(_tensors(args)) + list(_tensors(kw)) for args, kw in zip(scattered_inputs, scattered_kwargs)
            ]
        return scattered_inputs, scattered_kwargs

    def replicate(self, module, device_ids):
        with _virtual_collectives(self._measure):
            replicas = super().replicate(module, device_ids)
        if self._measure is not None:
            self._measure["replica_tensors"] = [
                [t for m in r.modules() for t in (*m._former_parameters.values(), *m._buffers.values()) if t is not None]
                for r in replicas
            ]
        return replicas

    def parallel_apply(self, replicas, inputs, kwargs):
        with self._phase("forward"):
            results, seconds = _threaded_apply(replicas, inputs, kwargs, self._measure)
        self._open.replica_forward_seconds = seconds
        if self._measure is not None:
            self._measure["outputs"] = [sum(t.nbytes for t in _tensors(r)) for r in results]
        return results

    def gather(self, outputs, output_device):
        with _virtual_collectives():
            gathered = super().gather(outputs, output_device)
        if self._measure is not None:
            self._measure["gathered"] = sum(t.nbytes for t in _tensors(gathered))
        return gathered


def make_data_parallel(module: nn.Module, device_ids=None, *, emulate: bool | None = None) -> nn.DataParallel:
    """One line for every machine: the real nn.DataParallel on >= 2 GPUs, the CPU emulation otherwise.

    `emulate=None` decides from the hardware: the real wrapper when at least two GPUs exist and
    every listed device is one of them, the emulation otherwise (look at `.label`);
    `emulate=True` forces the emulation, `emulate=False` the real wrapper.
    """
    if emulate not in (None, True, False):
        raise ValueError(say("emulate must be None, True or False, got {emulate!r}", emulate=emulate))
    gpus = torch.cuda.device_count()
    ids = _check_device_ids(device_ids) if device_ids is not None else list(range(gpus)) if gpus >= 2 else [0, 1]
    if emulate is None:
        emulate = gpus < 2 or max(ids) >= gpus
    if emulate:
        return EmulatedDataParallel(module, device_ids=ids)
    if max(ids) >= gpus:
        raise ValueError(say("device_ids {ids}: only {gpus} CUDA devices exist", ids=ids,
                             gpus=torch.cuda.device_count()))
    return TimedDataParallel(module.to(f"cuda:{ids[0]}"), device_ids=ids)


def _check_device_ids(device_ids) -> list[int]:
    ids = list(device_ids) if isinstance(device_ids, (list, tuple, range)) else None
    if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
        raise ValueError(say("device_ids must be a non-empty list of non-negative ints, got {device_ids!r}",
                             device_ids=device_ids))
    if len(set(ids)) != len(ids):
        raise ValueError(say("device_ids must not repeat a device, got {ids}", ids=ids))
    return ids


def _leading_size(chunk, dim: int) -> int:
    tensors = list(_tensors(chunk))
    return tensors[0].size(dim) if tensors else 0


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


# ---- the emulated collectives -------------------------------------------------------------


class _VirtualScatter:
    @staticmethod
    def apply(target_gpus, chunk_sizes, dim, tensor):
        chunks = tensor.chunk(len(target_gpus), dim)  # the rule of torch/csrc/cuda/comm.cpp scatter
        # device 0 keeps a view of the batch already there; the others receive copies
        return tuple(c if i == 0 else c.clone() for i, c in enumerate(chunks))


class _VirtualGather:
    @staticmethod
    def apply(target_device, dim, *outputs):
        if dim == 0 and all(t.dim() == 0 for t in outputs):
            warnings.warn(
                "Was asked to gather along dimension 0, but all input tensors were scalars; "
                "will instead unsqueeze and return a vector."
            )
            outputs = tuple(t.view(1) for t in outputs)
        # torch's gather copies into one buffer, untouched by the caller's autocast (whose dtype may differ)
        with torch.autocast("cpu", enabled=False):
            return torch.cat(outputs, dim)


class _VirtualBroadcast(torch.autograd.Function):
    """Device 0 shares the original tensors, the others get copies; backward sums onto device 0.

    Like torch's Broadcast: copies of tensors that need no gradient are not differentiable (autograd then hands
    backward zeros for them), and backward is `comm.reduce_add_coalesced` over every device's gradients."""

    @staticmethod
    def forward(ctx, n_devices, measure, *tensors):
        ctx.n_inputs = len(tensors)
        ctx.measure = measure
        outputs = tuple(t if d == 0 else t.clone() for d in range(n_devices) for t in tensors)
        frozen = [o for i, o in enumerate(outputs) if not ctx.needs_input_grad[2 + i % len(tensors)]]
        ctx.mark_non_differentiable(*frozen)
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        n = ctx.n_inputs
        per_device = [grads[i : i + n] for i in range(0, len(grads), n)]
        flat_bytes: list[list[int]] = []  # per chunk, per device: the flat buffer reduce_add_coalesced made
        with _cpu_reduce_add(flat_bytes):
            summed = comm.reduce_add_coalesced(per_device, 0)
        if ctx.measure is not None:
            # alive on each device while it reduces: the zeros autograd made for outputs that need no gradient,
            # and the flat buffers (the previous chunk's is still referenced while the next one is built)
            needs = ctx.needs_input_grad[2:]
            zeros = [sum(g.nbytes for g, need in zip(device, needs) if not need) for device in per_device]
            for d in range(len(per_device)):
                sizes = [0] + [chunk[d] for chunk in flat_bytes]
                peak = max(a + b for a, b in zip(sizes, sizes[1:])) if flat_bytes else 0
                rows = ctx.measure.setdefault("flattened gradients", {})
                rows[d] = max(rows.get(d, 0), zeros[d] + peak)
        return (None, None, *summed)


@contextmanager
def _cpu_reduce_add(flat_bytes: list):
    """torch's `comm.reduce_add` (NCCL's reduce onto device 0) for virtual devices: device 0's flat buffer plus the
    others', in a new tensor (what NCCL writes into `torch.empty_like`). Records each device's flat buffer: its
    bytes when `_flatten_dense_tensors` made one, 0 when it only viewed a one-tensor chunk, or when a single device
    takes part (then its flat buffer is the result itself)."""

    def reduce_add(inputs, destination=None):
        flat_bytes.append([0 if len(inputs) == 1 or t._base is not None else t.nbytes for t in inputs])
        if len(inputs) == 1:
            return inputs[0]
        result = inputs[0] + inputs[1]
        for other in inputs[2:]:
            result.add_(other)
        return result

    with _collectives_lock, mock.patch.object(comm, "reduce_add", reduce_add):
        yield


def _virtual_broadcast_coalesced_reshape(tensors, devices, detach=False, measure=None):
    if not tensors:
        return []
    if detach:
        return [[t if d == 0 else t.detach().clone() for t in tensors] for d in range(len(devices))]
    copies = _VirtualBroadcast.apply(len(devices), measure, *tensors)
    n = len(tensors)
    return [list(copies[i : i + n]) for i in range(0, len(copies), n)]


_collectives_lock = threading.RLock()


@contextmanager
def _virtual_collectives(measure: dict | None = None):
    """Point torch's scatter/gather/replicate code at the virtual-device collectives (`measure`: where the
    broadcast's backward records its reduction buffers, while helpers.memory measures a step)."""

    def broadcast(tensors, devices, detach=False):
        return _virtual_broadcast_coalesced_reshape(tensors, devices, detach, measure)

    with _collectives_lock, mock.patch.object(scatter_gather, "Scatter", _VirtualScatter), mock.patch.object(
        scatter_gather, "Gather", _VirtualGather
    ), mock.patch.object(replicate_module, "_broadcast_coalesced_reshape", broadcast):
        yield


def replica_threads(cpu_threads: int, n_replicas: int) -> int:
    """Intra-op threads each replica thread of the emulation computes with: the caller's `cpu_threads`
    shared out among the `n_replicas` virtual devices, at least one each (2 threads, 2 replicas -> 1 each).

    The virtual devices share the machine's cores, so each one gets its share instead of an OpenMP team
    as large as the caller's: on a 2-core machine two replicas with two threads each were four busy threads
    plus spin-waiting workers on two cores.
    """
    positive_int("cpu_threads", cpu_threads)
    positive_int("n_replicas", n_replicas)
    return max(1, cpu_threads // n_replicas)


def _threaded_apply(replicas, inputs, kwargs, measure):
    """torch's parallel_apply, one thread per virtual device, minus the CUDA streams.

    Like torch, only grad mode and whether autocast is on cross into the threads; autocast's
    dtype is thread-local and does not. Each thread enters `autocast(enabled=...)` without a
    dtype, so replicas compute in the device type's default: on real GPUs fp16, even under a
    bf16 autocast (pytorch#125186); in this CPU emulation the CPU default, bf16. A single
    replica runs in the caller's thread, as in torch, and keeps the caller's dtype.
    """
    grad_enabled = torch.is_grad_enabled()
    autocast_on = torch.is_autocast_enabled("cpu")
    results: list = [None] * len(replicas)
    seconds = [0.0] * len(replicas)
    caller_threads = torch.get_num_threads()
    threaded = len(replicas) > 1
    per_replica = replica_threads(caller_threads, len(replicas))

    def work(i, module, args, kw):
        start = time.perf_counter()
        if threaded:
            # torch.set_num_threads is process-wide as well as per thread: the caller restores its count after join
            torch.set_num_threads(per_replica)
        torch.set_grad_enabled(grad_enabled)
        try:
            with torch.autocast("cpu", enabled=autocast_on):
                if measure is None:
                    meter = nullcontext({})
                else:  # parameters and the input chunk have rows of their own in the ledger
                    meter = saved_bytes(measure["replica_tensors"][i] + measure["inputs"][i])
                with meter as saved:
                    if not isinstance(args, (list, tuple)):
                        args = (args,)
                    results[i] = module(*args, **kw)
                if measure is not None:
                    measure["activations"][i] = saved["bytes"]
        except Exception:
            results[i] = ExceptionWrapper(where=f"in replica {i} on virtual device {i}")
        seconds[i] = time.perf_counter() - start

    jobs = list(enumerate(zip(replicas, inputs, kwargs)))
    if len(jobs) == 1:
        work(0, *jobs[0][1])
    else:
        threads = [threading.Thread(target=work, args=(i, m, a, k)) for i, (m, a, k) in jobs]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            torch.set_num_threads(caller_threads)
    for r in results:
        if isinstance(r, ExceptionWrapper):
            r.reraise()
    return results, seconds
