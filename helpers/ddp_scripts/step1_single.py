"""Step 1: one process, one device. Every later step is this file plus one idea.

    python -m helpers.ddp_scripts.step1_single
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from helpers.ddp_scripts import common


def main():
    args = common.parse_args(__doc__)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = common.dataset(args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))
    model = common.model(args.seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
    if args.save:
        torch.save(model.state_dict(), args.save)
    common.summary("single", 0, 1, loss.item(), model)


if __name__ == "__main__":
    main()
