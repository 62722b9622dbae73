"""Lesson 4's script: lesson 2's training loop in Accelerate, for `accelerate launch` or `torchrun`.

With GPUs:        accelerate launch --multi_gpu --num_processes 2 -m helpers.accelerate_script
On CPUs, either:  accelerate launch --multi_gpu --num_processes 2 -m helpers.accelerate_script
             or:  ACCELERATE_USE_CPU=true torchrun --standalone --nproc_per_node=2 -m helpers.accelerate_script
(`accelerate launch --cpu --num_processes 2` starts a single process.)
Each process prints one JSON line.
"""

import os

from helpers import accel
from helpers.ddp_scripts.common import fingerprint, print_line


def main():
    result = accel.train_worker()
    print_line({"rank": int(os.environ.get("RANK", 0)), "distributed_type": result["distributed_type"],
                "num_processes": result["num_processes"], "loss": round(result["losses"][-1], 6),
                "weights_sha256": fingerprint(result["state"].values())})


if __name__ == "__main__":
    main()
