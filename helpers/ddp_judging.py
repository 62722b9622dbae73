"""What is wrong with a student's DDP code: the verdicts of lesson 2's hidden tests, each holding what the code
did to helpers.ddp_reference (None when nothing is wrong, else a sentence naming the mistake), and the plain
records a hidden test collects in the student's kernel for the judge to read in a process of its own.
"""

from __future__ import annotations

import math
import re

import torch
from torch.utils.data import DataLoader, DistributedSampler

from . import checkpoints, compare, data
from ._validate import function, positive_int
from .ddp_reference import TrainConfig, large_batch_reference, reference_train, same_state
from .language import say


# ---- sharding the data ---------------------------------------------------------------------------


def loader_problem(make_loader, n_samples: int, world_size: int, batch_size: int) -> str | None:
    """What is wrong with `make_loader(dataset, world_size, rank, batch_size)` on `data.indexed(n_samples)`,
    judged against torch's DistributedSampler (None when nothing is): every rank a DataLoader of
    batches of at most `batch_size`, the same share of ceil(n_samples / world_size) distinct samples
    (as many as DistributedSampler gives), as many batches as DistributedSampler's loader, and every
    sample on some rank. Any order and any padding are accepted."""
    record = loader_batches(make_loader, n_samples, world_size, batch_size)
    return loader_batches_problem(record, n_samples, world_size, batch_size)


def loader_batches(make_loader, n_samples: int, world_size: int, batch_size: int) -> list[dict]:
    """What `make_loader(dataset, world_size, rank, batch_size)` yields on `data.indexed(n_samples)`, rank by
    rank, as plain data for `loader_batches_problem` (a hidden test collects it in the student's kernel and
    judges it elsewhere). Per rank: {"loader": its type's name, "is_dataloader": bool, "batches": [[the batch's
    length, [the sample numbers in it]], ...], "not_tensor": None, or the type's name of the first batch that
    does not hold the dataset's tensors}. The record ends at the first rank whose loader is no DataLoader or
    yields such a batch."""
    function("make_loader", make_loader)
    positive_int("n_samples", n_samples)
    positive_int("world_size", world_size)
    positive_int("batch_size", batch_size)
    dataset = data.indexed(n_samples)
    record = []
    for rank in range(world_size):
        loader = make_loader(dataset, world_size, rank, batch_size)
        entry = {"loader": type(loader).__name__, "is_dataloader": isinstance(loader, DataLoader), "batches": [],
                 "not_tensor": None}
        record.append(entry)
        if not entry["is_dataloader"]:
            break
        for batch in loader:
            x = batch[0] if isinstance(batch, (list, tuple)) else batch
            if not isinstance(x, torch.Tensor):
                entry["not_tensor"] = type(x).__name__
                break
            entry["batches"].append([len(x), [int(v) for v in x.flatten()]])
        if entry["not_tensor"] is not None:
            break
    return record


def _is_loader_record(record, world_size: int) -> bool:
    """Whether `record` has the shape `loader_batches` gives for `world_size` ranks."""
    if type(record) is not list or not 1 <= len(record) <= world_size:
        return False
    for i, entry in enumerate(record):
        if type(entry) is not dict or set(entry) != {"loader", "is_dataloader", "batches", "not_tensor"}:
            return False
        if (type(entry["loader"]) is not str or type(entry["is_dataloader"]) is not bool
                or not (entry["not_tensor"] is None or type(entry["not_tensor"]) is str)
                or type(entry["batches"]) is not list):
            return False
        for batch in entry["batches"]:
            if (type(batch) is not list or len(batch) != 2 or type(batch[0]) is not int or type(batch[1]) is not list
                    or not all(type(v) is int for v in batch[1])):
                return False
        if not entry["is_dataloader"] and (entry["batches"] or entry["not_tensor"] is not None):
            return False
        ends = not entry["is_dataloader"] or entry["not_tensor"] is not None
        if ends and i < len(record) - 1:  # only the last rank can end the record early
            return False
    return len(record) == world_size or ends


def loader_batches_problem(record: list, n_samples: int, world_size: int, batch_size: int) -> str | None:
    """What is wrong with the loaders that `loader_batches(make_loader, n_samples, world_size, batch_size)`
    recorded (None when nothing is): `loader_problem`'s verdict, from the record alone. Raises ValueError
    when `record` is not such a record."""
    positive_int("n_samples", n_samples)
    positive_int("world_size", world_size)
    positive_int("batch_size", batch_size)
    if not _is_loader_record(record, world_size):
        raise ValueError(say("record must be what loader_batches returns for {world_size} ranks",
                             world_size=world_size))
    dataset = data.indexed(n_samples)
    share = len(DistributedSampler(dataset, num_replicas=world_size, rank=0, shuffle=False))
    n_batches = len(DataLoader(dataset, batch_size=batch_size,
                               sampler=DistributedSampler(dataset, num_replicas=world_size, rank=0, shuffle=False)))
    shards = []
    for rank, entry in enumerate(record):
        if not entry["is_dataloader"]:
            return say("rank {rank}: make_loader returned a {loader}, not a DataLoader", rank=rank,
                       loader=entry['loader'])
        rows = []
        for size, values in entry["batches"]:
            if size > batch_size:
                return say("rank {rank}: a batch of {size} samples, more than batch_size={batch_size}", rank=rank,
                           size=size, batch_size=batch_size)
            rows += values
        if entry["not_tensor"] is not None:
            return say("rank {rank}: a batch holds a {kind}, not the dataset's tensors", rank=rank,
                       kind=entry['not_tensor'])
        if len(rows) != len(set(rows)):
            return say("rank {rank} sees a sample twice in one epoch", rank=rank)
        shards.append((rows, len(entry["batches"])))
    counts = [len(rows) for rows, _ in shards]
    if len(set(counts)) > 1:
        return say("the ranks get different numbers of samples ({counts}): their gradients would not weigh alike",
                   counts=counts)
    if counts[0] != share:
        return say("each rank gets {count} of the {n_samples} samples over {world_size} ranks: every rank must "
                   "get the same share, n_samples / world_size rounded up", count=counts[0], n_samples=n_samples,
                   world_size=world_size)
    if any(batches != n_batches for _, batches in shards):
        return say("{batches} batches per rank: expected the batches of {share} samples at batch_size={batch_size}",
                   batches=[b for _, b in shards], share=share, batch_size=batch_size)
    missing = set(range(n_samples)) - {i for rows, _ in shards for i in rows}
    if missing:
        return say("samples on no rank: {missing} of the {n_samples}", missing=len(missing), n_samples=n_samples)
    return None


# ---- saving a checkpoint -------------------------------------------------------------------------


def checkpoint_problem(ranks: list, cfg: TrainConfig) -> str | None:
    """What is wrong with the results of `checkpoint_worker` (None when nothing is): rank 0, and only
    rank 0, wrote the file; every rank loaded a clean state dict (the plain model's keys) holding the
    trained weights, which are one SGD step on the global batch (`large_batch_reference`) on every rank."""
    if not isinstance(cfg, TrainConfig):
        raise ValueError(say("cfg must be a TrainConfig, got {kind}", kind=type(cfg).__name__))
    fields = {"rank": int, "trained": None, "loaded": None, "wrote": bool}  # what it loaded is judged below
    if type(ranks) is not list or not ranks or not all(compare.is_record(r, fields) for r in ranks):
        raise ValueError(say("ranks must be the list of checkpoint_worker's results"))
    writers = [r["rank"] for r in ranks if r["wrote"]]
    if 0 not in writers:
        return say("rank 0 did not write the checkpoint")
    if writers != [0]:
        return say("ranks {writers} all wrote the checkpoint: only rank 0 may write it (the others race it for "
                   "the same file)", writers=writers)
    keys = list(cfg.model().state_dict())
    for r in ranks:
        loaded = r["loaded"]
        problem = _state_dict_problem(loaded, keys, say("what the checkpoint holds"),
                                      say("a plain model cannot load it (save the model inside DDP)"))
        if problem:
            return problem
        if not same_state(loaded, r["trained"]):
            return say("rank {rank} loaded weights that differ from the trained ones", rank=r['rank'])
    reference = large_batch_reference(cfg, len(ranks), 1)["state"]
    for r in ranks:
        if not same_state(r["trained"], reference):
            return say("rank {rank}'s weights changed while it saved: saving must leave the model as it is",
                       rank=r['rank'])
    return None


def _state_dict_problem(state, keys: list, what: str, prefix_hint: str) -> str | None:
    """What is wrong with `state` as a state dict with exactly `keys` (None when nothing is)."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        return say("{what} is a {kind}, not a state dict of tensors", what=what, kind=type(state).__name__)
    if list(state) != keys:
        if list(state) == [checkpoints.PREFIX + k for k in keys]:
            return say("the keys of {what} start with 'module.': {hint}", what=what, hint=prefix_hint)
        return say("the keys of {what} are not the model's state dict keys", what=what)
    return None


def last_error_line(error: BaseException) -> str:
    """The line of a failed rank's traceback that names the exception (not the rank's stderr)."""
    if not isinstance(error, BaseException):
        raise ValueError(say("error must be an exception, got {kind}", kind=type(error).__name__))
    from .launch import THIS_RANKS_STDERR

    text = getattr(error, "details", str(error))
    for marker in {THIS_RANKS_STDERR, say(THIS_RANKS_STDERR)}:  # in English, or in the language of the ranks
        text = text.split("\n" + marker)[0]
    text = text.strip()
    lines = text.splitlines()
    # the exception's own line: unindented `package.Name: message` (its message may run on below it)
    named = [line for line in lines if re.match(r"[A-Za-z_][\w.]*: ", line)]
    return named[-1] if named else lines[-1] if lines else type(error).__name__


def checkpoint_failure(error: BaseException) -> str:
    """A readable reason for a failed checkpoint launch: the failing rank's exception and what it suggests."""
    line = last_error_line(error)
    rank = getattr(error, "rank", "?")
    if "UnpicklingError" in line or "Weights only load failed" in line:
        hint = say("the file is not a plain state dict of tensors")
    elif any(s in line for s in ("FileNotFoundError", "No such file", "PytorchStreamReader", "EOFError", "zip archive")):
        hint = say("a rank read the file before rank 0 had finished writing it")
    elif "imed out" in line:
        hint = say("a rank waited for a partner that never came (a barrier that not every rank reaches?)")
    else:
        hint = raised_where(error) or say("its traceback names no line of your code")
    return say("rank {rank} failed: {line} ({hint})", rank=rank, line=line, hint=hint)


def raised_where(error: BaseException) -> str:
    """Where a failed rank raised: the last frame of its traceback, as "raised in FUNCTION: CODE" ("" if none)."""
    frames = re.findall(r'File "[^"]*", line \d+, in (\S+)\n[ \t]+(\S[^\n]*)', getattr(error, "details", ""))
    return say("raised in {function}: {code}", function=frames[-1][0], code=frames[-1][1].strip()) if frames else ""


# ---- a complete DDP worker -----------------------------------------------------------------------


def worker_problem(ranks: list, cfg: TrainConfig, world_size: int) -> str | None:
    """What is wrong with the results of a complete DDP worker (None when nothing is): each returns
    {"state": clean state dict, "mean_loss": float}; the weights agree exactly between ranks and equal
    `reference_train`'s, with set_epoch numbering the epochs from 0 or from 1; mean_loss is the mean over the
    ranks of the last batch's loss, which is that reference's last loss (every rank's last batch has the same
    size under DistributedSampler)."""
    if not isinstance(ranks, list) or not ranks:
        raise ValueError(say("ranks must be the non-empty list of the worker's results"))
    if not isinstance(cfg, TrainConfig):
        raise ValueError(say("cfg must be a TrainConfig, got {kind}", kind=type(cfg).__name__))
    positive_int("world_size", world_size)
    if not all(compare.is_record(r, {"state": None, "mean_loss": None}) for r in ranks):
        return say("return a dict with the keys 'state' and 'mean_loss' (and no others)")
    keys = list(cfg.model().state_dict())
    for r in ranks:
        problem = _state_dict_problem(r["state"], keys, say("the returned 'state'"),
                                      say("return the clean state dict of the model inside DDP"))
        if problem:
            return problem
    if not all(same_state(r["state"], ranks[0]["state"], atol=0) for r in ranks):
        return say("the ranks end with different weights: are the gradients averaged (the model wrapped in DDP)?")
    reference = next((ref for ref in _numbered_references(cfg, world_size) if same_state(ranks[0]["state"], ref["state"])),
                     None)
    if reference is None:
        if cfg.epochs > 1 and cfg.set_epoch:
            import dataclasses

            forgot = reference_train(dataclasses.replace(cfg, set_epoch=False), world_size)
            if same_state(ranks[0]["state"], forgot["state"]):
                return say("the weights equal a run that never calls set_epoch: call sampler.set_epoch(epoch) every "
                           "epoch")
        return say("the weights differ from one process trained on the same global batches: check the sampler, the "
                   "batch size, the learning rate, zero_grad, the loss and set_epoch (the same epoch on every rank, "
                   "numbered from 0 or from 1)")
    losses = [r["mean_loss"] for r in ranks]
    not_floats = [v for v in losses if type(v) is not float]
    if not_floats:
        return say("mean_loss must be a float, got {kind}", kind=type(not_floats[0]).__name__)
    if not all(math.isfinite(v) for v in losses):
        return say("mean_loss is not a finite number")
    if any(v != losses[0] for v in losses):
        return say("the ranks return different mean_loss values: all-reduce the loss")
    if not compare.same_values(losses[0], float(reference["losses"][-1]), atol=1e-5, rtol=1e-5):
        return say("mean_loss is not the mean over the ranks of the last batch's loss")
    return None


def _numbered_references(cfg: TrainConfig, world_size: int):
    """reference_train with set_epoch's epochs numbered from 0, then from 1 (computed when asked for)."""
    if not cfg.set_epoch:
        yield reference_train(cfg, world_size)
        return
    for first in (0, 1):
        yield reference_train(cfg, world_size, list(range(first, first + cfg.epochs)))


def share_worker_problem(records: list, cfg: TrainConfig, world_size: int) -> str | None:
    """What is wrong with a complete DDP worker run under `share_worker` (None when nothing is): every rank left the
    process group (step 5), and `worker_problem` on the results. Each rank had cfg's samples only where its own
    sampler takes them (helpers.ddp_workers.rank_share): weights equal to the reference say that the ranks trained
    on their shares and averaged their gradients."""
    if not isinstance(cfg, TrainConfig):
        raise ValueError(say("cfg must be a TrainConfig, got {kind}", kind=type(cfg).__name__))
    positive_int("world_size", world_size)
    fields = {"result": None, "left_group": bool}
    if type(records) is not list or len(records) != world_size or not all(compare.is_record(r, fields) for r in records):
        return say("expected a result from each of the {world_size} ranks", world_size=world_size)
    staying = [rank for rank, r in enumerate(records) if not r["left_group"]]
    if staying:
        return say("step 5: rank {rank} was still in the process group when the worker returned: leave it "
                   "(dist.destroy_process_group())", rank=staying[0])
    return worker_problem([r["result"] for r in records], cfg, world_size)
