"""Step 4 = step 3 on several machines: RANK is global, the GPU is this machine's (LOCAL_RANK on
separate machines; `common.device_plan` also keeps two "nodes" on one machine off each other's GPUs);
rank 0 writes the checkpoint, everyone waits at a barrier, then every rank loads it onto its own device.
That last step assumes that `--save` is on a filesystem every node sees (NFS, Lustre, ...); without one,
broadcast the state from rank 0 (`dist.broadcast_object_list`) or let each node's LOCAL_RANK 0 save a copy.

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
from helpers.hardware import threads_per_rank


def main():
    args = common.parse_args(__doc__)
    # gloo first: every machine can speak it, and the ranks must first learn who shares a machine
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    backend, gpu = common.device_plan(common.gather_machines(), rank)
    if backend == "nccl":
        device = torch.device("cuda", gpu)  # this machine's GPU number: LOCAL_RANK on real separate machines
        torch.cuda.set_device(device)
        group = dist.new_group(backend="nccl")  # DDP's all-reduces go over NCCL
    else:
        device, group = torch.device("cpu"), None
        torch.set_num_threads(threads_per_rank(int(os.environ["LOCAL_WORLD_SIZE"])))

    dataset = common.dataset(args.seed)
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = DDP(common.model(args.seed).to(device), device_ids=[gpu] if gpu is not None else None, process_group=group)
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
