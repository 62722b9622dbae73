"""Count the bytes autograd saves for backward (the activations), one storage counted once."""

from contextlib import contextmanager

import torch


@contextmanager
def saved_bytes(excluded_tensors=()):
    """Yields a dict whose "bytes" entry holds, on exit, what was saved inside the block.

    Tensors in `excluded_tensors` (parameters, the input batch) are not activations and are
    skipped. The hooks are thread-local: enter this in the thread that runs the forward.
    """
    excluded = {t.untyped_storage().data_ptr() for t in excluded_tensors}
    seen: dict[int, int] = {}
    result = {"bytes": 0}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in excluded:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield result
    result["bytes"] = sum(seen.values())
