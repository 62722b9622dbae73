"""Step 2 = step 1 + DDP started by mp.spawn: one process per device, each with its own shard.

    python -m helpers.ddp_scripts.step2_spawn --world-size 2

New: a process group (gloo on CPU, nccl on GPUs), a DistributedSampler with set_epoch, the DDP
wrapper, and mp.spawn to start the processes. `worker` must be importable: spawn starts fresh
interpreters that look it up by name.
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers.ddp_scripts import common
from helpers.hardware import threads_per_rank
from helpers.launch import free_port


def worker(rank, world_size, args, port):
    use_gpu = torch.cuda.device_count() >= world_size
    dist.init_process_group("nccl" if use_gpu else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    device = torch.device("cuda", rank) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(threads_per_rank(world_size))  # the cores this process may use, shared out

    dataset = common.dataset(args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = DDP(common.model(args.seed).to(device), device_ids=[rank] if use_gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()  # DDP all-reduces (averages) the gradients here
            optimizer.step()
    if args.save and rank == 0:
        torch.save(model.module.state_dict(), args.save)
    common.summary("spawn", rank, world_size, loss.item(), model.module)
    dist.destroy_process_group()


if __name__ == "__main__":
    args = common.parse_args(__doc__, world_size=True)
    mp.spawn(worker, args=(args.world_size, args, free_port()), nprocs=args.world_size)
