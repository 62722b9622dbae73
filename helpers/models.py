"""Small models shared by all lessons."""

import torch
from torch import nn

from ._validate import positive_int
from .language import say


class MLP(nn.Sequential):
    """Linear -> ReLU blocks; `depth` hidden layers of width `hidden`."""

    def __init__(self, in_features: int = 32, hidden: int = 64, out_features: int = 4, depth: int = 2):
        positive_int("in_features", in_features)
        positive_int("hidden", hidden)
        positive_int("out_features", out_features)
        positive_int("depth", depth)
        layers, width = [], in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, out_features))
        super().__init__(*layers)


class SmallCNN(nn.Module):
    """Two conv blocks and a linear classifier, for (channels, size, size) images."""

    def __init__(self, channels: int = 3, n_classes: int = 10, width: int = 16, size: int = 16):
        super().__init__()
        positive_int("channels", channels)
        positive_int("n_classes", n_classes, minimum=2)
        positive_int("width", width)
        positive_int("size", size, minimum=4)
        if size % 4:
            raise ValueError(say("size must be a multiple of 4 (two 2x2 poolings), got {size}", size=size))
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(2 * width * (size // 4) ** 2, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def seeded(model_fn, seed: int = 0, **kwargs) -> nn.Module:
    """Build a model with a fixed initialisation, so two runs start from the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_fn(**kwargs)


def n_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
