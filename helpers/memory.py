"""Per-device memory of one DataParallel training step.

On the CPU emulation the report is a ledger built from the tensors each virtual device holds
during the step (an upper bound on its peak: every row is counted as if alive at once). Its
gradient rows follow torch's backward (`Broadcast.backward` -> `ReduceAddCoalesced` ->
`comm.reduce_add_coalesced`, which the emulation runs): every device holding a replica holds that
replica's "gradients" and, while they are reduced, a "flattened gradients" copy of them
(`_flatten_dense_tensors`, one buffer per <= 10 MiB chunk; plus the zeros autograd hands the
reduction for parameters that need no gradient); device 0 also holds the "reduced gradients", the
sum, whose views become `.grad`.
With real GPUs it is `torch.cuda.max_memory_allocated` per device, which also counts cuBLAS's
workspace on each device (8 MiB; 32 MiB on Hopper GPUs). Both carry their `source`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._saved import saved_bytes
from .dataparallel import EmulatedDataParallel, TimedDataParallel, _tensors
from .language import message, say
from . import refusal

CATEGORIES = (  # the ledger's rows, shown in the notebook's language (`say`)
    message("parameters"),
    message("gradients"),
    message("flattened gradients"),
    message("reduced gradients"),
    message("optimizer state"),
    message("activations"),
    message("inputs"),
    message("outputs"),
    message("gathered outputs"),
    message("loss"),
)
EMULATED = message("emulated on CPU (ledger of the tensors each virtual device holds)")
MEASURED = message("measured on CUDA (torch.cuda.max_memory_allocated per device, including cuBLAS's workspace: 8 MiB, "
                   "32 MiB on Hopper)")


@dataclass
class MemoryReport:
    per_device: list[dict[str, int]]  # bytes by category, one dict per device
    source: str

    @property
    def emulated(self) -> bool:
        return self.source in (EMULATED, say(EMULATED))

    def totals(self) -> list[int]:
        return [sum(rows.values()) for rows in self.per_device]

    @property
    def primary_extra_bytes(self) -> int:
        """Bytes device 0 holds beyond the busiest other device."""
        totals = self.totals()
        return totals[0] - max(totals[1:], default=totals[0])

    @property
    def imbalance_ratio(self) -> float:
        totals = self.totals()
        others = max(totals[1:], default=totals[0])
        return totals[0] / others if others else float("inf")

    def table(self) -> str:
        names = list(self.per_device[0])
        total = say("total")
        width = max(len(say(n)) for n in names + [total])
        head = " " * width + "".join(f"{say('device {i}', i=i):>14}" for i in range(len(self.per_device)))
        rows = [f"{say(n):<{width}}" + "".join(f"{d[n]:>14,}" for d in self.per_device) for n in names]
        rows.append(f"{total:<{width}}" + "".join(f"{t:>14,}" for t in self.totals()))
        return "\n".join([say("bytes per device, {source}", source=say(self.source)), head, *rows])

    def __str__(self) -> str:
        return self.table()


def _nbytes(tensors) -> int:
    return sum(t.nbytes for t in tensors)


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages under `tensors` (views of one buffer count it once)."""
    storages = {}
    for t in tensors:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(_nbytes(_tensors(state)) for state in optimizer.state.values())


@refusal.reference
def measure_step(model: nn.DataParallel, optimizer: torch.optim.Optimizer, inputs, targets, loss_fn) -> MemoryReport:
    """Run one training step (zero_grad, forward, loss, backward, step) and report memory per device."""
    if not isinstance(model, (EmulatedDataParallel, TimedDataParallel)):
        raise ValueError(say("model must come from helpers.dataparallel.make_data_parallel"))
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(say("optimizer must be a torch.optim.Optimizer, got {kind}", kind=type(optimizer).__name__))
    if not callable(loss_fn):
        raise ValueError(say("loss_fn must be callable"))
    if len(model.device_ids) < 2 and model.emulated:
        raise ValueError(say("model: the ledger needs >= 2 device_ids (on one device DataParallel is a plain call)"))
    if isinstance(model, TimedDataParallel):
        return _measure_cuda(model, optimizer, inputs, targets, loss_fn)
    return _measure_emulated(model, optimizer, inputs, targets, loss_fn)


def _train_step(model, optimizer, inputs, targets, loss_fn):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss


def _measure_emulated(model, optimizer, inputs, targets, loss_fn) -> MemoryReport:
    measure = {"activations": {}}
    model._measure = measure
    try:
        loss = _train_step(model, optimizer, inputs, targets, loss_fn)
    finally:
        model._measure = None
    module = model.module
    param_bytes = _nbytes(module.parameters()) + _nbytes(module.buffers())
    trainable_bytes = _nbytes(p for p in module.parameters() if p.requires_grad)
    n_replicas = len(measure["outputs"])
    per_device = []
    for d in range(len(model.device_ids)):
        rows = dict.fromkeys(CATEGORIES, 0)
        if d < n_replicas:
            rows["parameters"] = param_bytes
            rows["activations"] = measure["activations"][d]
            rows["outputs"] = measure["outputs"][d]
            rows["gradients"] = trainable_bytes  # each replica's own, computed on its device
            # reduce_add_coalesced flattens each device's gradients into a buffer of their own (measured in
            # the emulation's backward, which runs torch's reduce_add_coalesced)
            rows["flattened gradients"] = measure.get("flattened gradients", {}).get(d, 0)
            if d == 0:
                # ReduceAddCoalesced builds the sum on device 0 while replica 0's gradients are alive; only
                # device 0 keeps it: .grad are views of the flat sum (counted once per storage, so a frozen
                # parameter's zeros count when they share it)
                rows["reduced gradients"] = _storage_bytes(p.grad for p in module.parameters() if p.grad is not None)
                rows["optimizer state"] = optimizer_state_bytes(optimizer)
                rows["inputs"] = _nbytes(_tensors(inputs)) + _nbytes(_tensors(targets))
                rows["gathered outputs"] = measure["gathered"]
                rows["loss"] = loss.nbytes
            else:
                rows["inputs"] = _nbytes(measure["inputs"][d])
        per_device.append(rows)
    return MemoryReport(per_device, say(EMULATED))


def _measure_cuda(model, optimizer, inputs, targets, loss_fn) -> MemoryReport:
    for d in model.device_ids:
        torch.cuda.reset_peak_memory_stats(d)
    _train_step(model, optimizer, inputs, targets, loss_fn)
    for d in model.device_ids:
        torch.cuda.synchronize(d)
    per_device = [{PEAK_ALLOCATED: torch.cuda.max_memory_allocated(d)} for d in model.device_ids]
    return MemoryReport(per_device, say(MEASURED))


PEAK_ALLOCATED = message("peak allocated")  # CUDA's one figure per device, shown in the notebook's language
ALLREDUCE_BUCKETS = message("all-reduce buckets")
DDP_CATEGORIES = ("parameters", "gradients", ALLREDUCE_BUCKETS, "optimizer state", "activations", "inputs",
                  "outputs", "loss")


def ddp_rank_bytes(ddp_model, optimizer: torch.optim.Optimizer, inputs, targets, loss_fn=None) -> dict[str, int]:
    """Bytes one DDP rank holds in a forward + backward on its own batch (call it on every rank:
    backward all-reduces). On CUDA: {"peak allocated": ...}; on the CPU, a ledger like DataParallel's."""
    if not isinstance(ddp_model, nn.parallel.DistributedDataParallel):
        raise ValueError(say("ddp_model must be a DistributedDataParallel, got {kind}", kind=type(ddp_model).__name__))
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(say("optimizer must be a torch.optim.Optimizer, got {kind}", kind=type(optimizer).__name__))
    loss_fn = loss_fn or nn.functional.mse_loss
    module = ddp_model.module
    if inputs.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(inputs.device)
        loss_fn(ddp_model(inputs), targets).backward()
        torch.cuda.synchronize(inputs.device)
        return {PEAK_ALLOCATED: torch.cuda.max_memory_allocated(inputs.device)}
    params = list(module.parameters())
    with saved_bytes(params + [inputs]) as saved:  # the forward, as for a DataParallel replica
        outputs = ddp_model(inputs)
    loss = loss_fn(outputs, targets)
    loss.backward()
    info = ddp_model._get_ddp_logging_data()
    buckets = 0 if info.get("gradient_as_bucket_view") else sum(int(b) for b in str(info["bucket_sizes"]).split(",") if b.strip())
    return {
        "parameters": _nbytes(params) + _nbytes(module.buffers()),
        "gradients": _nbytes(p.grad for p in params if p.grad is not None),
        ALLREDUCE_BUCKETS: buckets,
        "optimizer state": optimizer_state_bytes(optimizer),
        "activations": saved["bytes"],
        "inputs": _nbytes([inputs, targets]),
        "outputs": outputs.nbytes,
        "loss": loss.nbytes,
    }
