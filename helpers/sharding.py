"""Sharding (lesson 5: ZeRO and FSDP2) under one name: `from helpers import sharding` reaches all of it as
`sharding.<name>`.

The code lives in one module per concept:
  sharding_reference  what a sharded run must equal, in one process: ShardConfig, the single-process Adam
                      reference, the shard a rank holds, ZeRO's bytes, resharding, state dicts between kinds
  sharding_workers    what each rank runs: the memory ledger, ZeRO-1 by hand and torch's, FSDP2, checkpoints
  sharding_judging    what is wrong with a student's ZeRO-1 or FSDP2 run: the verdicts of the lesson's hidden tests
"""

from .sharding_judging import fsdp_problem, zero1_problem  # noqa: F401
from .sharding_reference import (  # noqa: F401
    GRAD_BYTES, KINDS, PARAM_BYTES, STATE_BYTES, ShardConfig, converted, flat_shard, local_shape, named_module_model,
    reference_adam, reshard, same_state, shard_rows, shard_state, step_traffic, zero_bytes)
from .sharding_workers import (  # noqa: F401
    MODES, accelerate_plugin_worker, dcp_load_worker, dcp_save_worker, device_mesh, fsdp_observed_worker,
    fsdp_tour_worker, fsdp_tours_worker, full_state, load_kinds_worker, memory_worker, shard_model, torch_zero_worker, zero1_worker)
