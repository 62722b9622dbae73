"""Lesson 2's scripts, a tutorial series: each step is the previous one plus one idea.

    python -m helpers.ddp_scripts.step1_single                                   # one process
    python -m helpers.ddp_scripts.step2_spawn --world-size 2                     # + DDP via mp.spawn
    torchrun --standalone --nproc_per_node=2 -m helpers.ddp_scripts.step3_torchrun   # + torchrun
    torchrun --nnodes=2 --node_rank=N --nproc_per_node=2 --rdzv_backend=c10d \\
             --rdzv_endpoint=HOST:29500 --rdzv_id=course -m helpers.ddp_scripts.step4_multinode
    sbatch slurm_multinode.sbatch                                                # the same on SLURM
"""
