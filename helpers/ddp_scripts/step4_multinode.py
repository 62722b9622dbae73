"""Step 4 = step 3 on several machines: LOCAL_RANK picks the device on this machine, RANK is global;
rank 0 writes the checkpoint, everyone waits at a barrier, then every rank loads it onto its own device.

On each of two machines (node_rank 0 and 1; MASTER is node 0's address):
    torchrun --nnodes=2 --node_rank=$NODE_RANK --nproc_per_node=2 \\
             --rdzv_backend=c10d --rdzv_endpoint=$MASTER:29500 --rdzv_id=course -m helpers.ddp_scripts.step4_multinode
On one machine, pretending to be two: run the same command twice with MASTER=127.0.0.1.
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers.ddp_scripts import common


def main():
    args = common.parse_args(__doc__)
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    use_gpu = torch.cuda.device_count() >= local_world
    dist.init_process_group("nccl" if use_gpu else "gloo", timeout=timedelta(seconds=60))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if use_gpu else torch.device("cpu")  # local, not global, rank
    if use_gpu:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, os.cpu_count() // local_world))

    dataset = common.dataset(args.seed)
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = DDP(common.model(args.seed).to(device), device_ids=[local_rank] if use_gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()

    checkpoint = args.save or "checkpoint.pt"
    if rank == 0:
        torch.save(model.module.state_dict(), checkpoint)  # no "module." prefix
    dist.barrier()  # nobody reads the file before rank 0 has written it
    model.module.load_state_dict(torch.load(checkpoint, map_location=device, weights_only=True))
    common.summary("multinode", rank, world_size, loss.item(), model.module)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
