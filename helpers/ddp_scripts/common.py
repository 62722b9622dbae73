"""What every step of the series shares: the data, the model, the command line, the summary line."""

import argparse
import hashlib
import json
import os
import socket
import sys

import torch

from helpers.ddp import TrainConfig


def parse_args(description, world_size=False):
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    if world_size:
        parser.add_argument("--world-size", type=int, default=2, help="processes to start")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16, help="per process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default=None, help="where rank 0 writes the final checkpoint")
    return parser.parse_args()


def device_plan(machines: list[tuple[str, int]], rank: int) -> tuple[str, int | None]:
    """(backend, GPU index) for `rank`, given every rank's (host name, GPUs on that host).

    nccl only when every machine has a GPU for each of its ranks; a rank's GPU is its position
    among the ranks on its machine. On separate machines that is LOCAL_RANK; when several
    torchruns share one machine (two "nodes" on localhost), LOCAL_RANK would put two ranks on one
    GPU, which NCCL refuses.
    """
    if not 0 <= rank < len(machines):
        raise ValueError(f"rank must be in [0, {len(machines)}), got {rank}")
    ranks_per_host: dict[str, int] = {}
    for host, _ in machines:
        ranks_per_host[host] = ranks_per_host.get(host, 0) + 1
    if not all(gpus >= ranks_per_host[host] for host, gpus in machines):
        return "gloo", None
    host = machines[rank][0]
    return "nccl", [h for h, _ in machines[: rank + 1]].count(host) - 1


def gather_machines() -> list[tuple[str, int]]:
    """Every rank's (host name, GPU count), over the default (gloo) process group."""
    import torch.distributed as dist

    machines = [None] * dist.get_world_size()
    dist.all_gather_object(machines, (socket.gethostname(), torch.cuda.device_count()))
    return [tuple(m) for m in machines]


def dataset(seed):
    return TrainConfig(seed=seed).dataset()  # the notebook's data: its reference run checks these scripts


def model(seed):
    return TrainConfig(seed=seed).model()


def summary(step, rank, world_size, loss, model):
    """One JSON line per process: the final loss and a fingerprint of the weights."""
    print_line({"step": step, "rank": rank, "world_size": world_size, "loss": round(loss, 6),
                "weights_sha256": fingerprint(model.parameters())})


def fingerprint(tensors) -> str:
    """16 hex digits that differ as soon as one weight differs by one bit."""
    weights = torch.cat([t.detach().cpu().flatten() for t in tensors])
    return hashlib.sha256(weights.numpy().tobytes()).hexdigest()[:16]


def print_line(record: dict) -> None:
    sys.stdout.flush()
    os.write(1, (json.dumps(record) + "\n").encode())  # one write: lines of several ranks never interleave

