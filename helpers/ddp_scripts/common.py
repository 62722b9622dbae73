"""What every step of the series shares: the data, the model, the command line, the summary line."""

import argparse
import hashlib
import json
import os
import sys

import torch

from helpers import data, models
from helpers.launch import free_port  # noqa: F401  (step2_spawn picks its port with it)


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


def dataset(seed):
    return data.regression(256, 16, 2, seed=seed)


def model(seed):
    return models.seeded(models.MLP, seed, in_features=16, hidden=32, out_features=2)


def summary(step, rank, world_size, loss, model):
    """One JSON line per process: the final loss and a fingerprint of the weights."""
    weights = torch.cat([p.detach().cpu().flatten() for p in model.parameters()])
    line = json.dumps({"step": step, "rank": rank, "world_size": world_size, "loss": round(loss, 6),
                       "weights_sha256": hashlib.sha256(weights.numpy().tobytes()).hexdigest()[:16]})
    sys.stdout.flush()
    os.write(1, (line + "\n").encode())  # one write: lines of several ranks never interleave

