"""Step 3 = step 2 - mp.spawn + torchrun: the launcher starts the processes and sets
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; init_process_group reads them.

    torchrun --standalone --nproc_per_node=2 -m helpers.ddp_scripts.step3_torchrun
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
    world_size = int(os.environ["WORLD_SIZE"])
    use_gpu = torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
    dist.init_process_group("nccl" if use_gpu else "gloo", timeout=timedelta(seconds=60))  # env:// from torchrun
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(threads_per_rank(int(os.environ["LOCAL_WORLD_SIZE"])))  # this machine's ranks share its cores

    dataset = common.dataset(args.seed)
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)  # rank and world size from the group
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = DDP(common.model(args.seed).to(device), device_ids=[device.index] if use_gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
    if args.save and rank == 0:
        torch.save(model.module.state_dict(), args.save)
    common.summary("torchrun", rank, world_size, loss.item(), model.module)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
