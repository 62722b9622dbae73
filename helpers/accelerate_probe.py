"""What `Accelerator(cpu=True)` runs on, asked in a process of its own with exactly the variables given.

Accelerate (USE_TORCH_XLA, ACCELERATE_*) and torch_xla (PJRT_DEVICE) read their variables once, when they
are imported. This module imports neither, so a process forked from one that imported torch and this module
(`helpers.accel`'s probe server) is still fresh for them: each probe imports them anew, after its variables
are set.
"""

import os

from ._validate import str_dict


def device(env: dict) -> str:
    """Set this process's environment to `env`, then import Accelerate: "cpu DistributedType.NO",
    "xla:0 DistributedType.XLA", ..."""
    str_dict("env", env)
    os.environ.clear()
    os.environ.update(env)
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    return f"{accelerator.device} {accelerator.distributed_type}"
