"""DistributedDataParallel (lesson 2) under one name: `from helpers import ddp` reaches all of it as `ddp.<name>`.

The code lives in one module per concept:
  ddp_workers    what each rank runs (importable, so mp.spawn and torchrun can start it): the lesson's workers
                 and a reusable DDP trainer
  ddp_reference  what a DDP run must equal, in one process: TrainConfig, the single-process reference trainings,
                 same_state, and the lesson's arithmetic
  ddp_measure    what a DDP step costs: seconds and memory per rank, next to DataParallel's
  ddp_judging    what is wrong with a student's answer: the verdicts of the lesson's hidden tests
"""

from .ddp_judging import (  # noqa: F401
    checkpoint_failure, checkpoint_problem, last_error_line, loader_batches, loader_batches_problem, loader_problem,
    share_worker_problem, worker_problem)
from .ddp_measure import dataparallel_step_time, step_time_worker  # noqa: F401
from .ddp_reference import (  # noqa: F401
    TrainConfig, dataparallel_device0_bytes, global_batch, large_batch_reference, linear_scaled_lr, reference_train,
    ring_allreduce_bytes, same_state, shard_indices)
from .ddp_workers import (  # noqa: F401
    accumulation_worker, allreduce_demo, checkpoint_worker, count_allreduces, hello, hello_spawn, loader_steps_worker,
    manual_average_worker, rank_share, recording_writes, share_worker, spawned_stderr, train_worker, uneven_worker,
    wrap)
