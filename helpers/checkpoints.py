"""Checkpoints that load anywhere: clean (unprefixed) state dicts from wrapped or plain models.

A DataParallel/DistributedDataParallel wrapper keeps the model as `wrapper.module`, so its
state_dict keys gain a `module.` prefix that a plain model does not expect.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import torch
from torch import nn

from .language import say

PREFIX = "module."


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside any stack of DataParallel / DistributedDataParallel wrappers."""
    if not isinstance(model, nn.Module):
        raise ValueError(say("model must be an nn.Module, got {kind}", kind=type(model).__name__))
    while isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        model = model.module
    return model


def _check_state_dict(state_dict) -> None:
    if not isinstance(state_dict, Mapping):
        raise ValueError(say("state_dict must be a mapping of names to tensors, got {kind}",
                             kind=type(state_dict).__name__))


def strip_prefix(state_dict: Mapping, prefix: str = PREFIX) -> OrderedDict:
    """Drop `prefix` from every key, but only when every key has it (a layer may be named `module`)."""
    _check_state_dict(state_dict)
    if state_dict and all(k.startswith(prefix) for k in state_dict):
        return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items())
    return OrderedDict(state_dict)


def add_prefix(state_dict: Mapping, prefix: str = PREFIX) -> OrderedDict:
    _check_state_dict(state_dict)
    return OrderedDict((prefix + k, v) for k, v in state_dict.items())


def clean_state_dict(model: nn.Module) -> OrderedDict:
    """What `model.module.state_dict()` gives for a wrapped model, and `state_dict()` for a plain one."""
    return unwrap(model).state_dict()


def load_clean(model: nn.Module, state_dict: Mapping, strict: bool = True):
    """Load a checkpoint saved from a wrapped or a plain model into a wrapped or a plain model.

    The prefix is stripped only when the keys do not already fit (a layer may be named `module`).
    """
    _check_state_dict(state_dict)
    target = unwrap(model)
    if set(state_dict) != set(target.state_dict()):
        state_dict = strip_prefix(state_dict)
    return target.load_state_dict(state_dict, strict=strict)


def save(model: nn.Module, path) -> None:
    torch.save(clean_state_dict(model), path)


def load(model: nn.Module, path, map_location="cpu"):
    return load_clean(model, torch.load(path, map_location=map_location, weights_only=True))
