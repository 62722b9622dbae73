"""Small deterministic synthetic datasets, generated on the spot (nothing is downloaded)."""

import torch
from torch.utils.data import TensorDataset

from ._validate import positive_int


def regression(n_samples: int = 256, in_features: int = 32, out_features: int = 4, seed: int = 0) -> TensorDataset:
    """y = x @ W + noise, with W fixed by the seed: a target an MLP can actually learn."""
    positive_int("n_samples", n_samples)
    positive_int("in_features", in_features)
    positive_int("out_features", out_features)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_samples, in_features, generator=g)
    w = torch.randn(in_features, out_features, generator=g) / in_features**0.5
    y = x @ w + 0.05 * torch.randn(n_samples, out_features, generator=g)
    return TensorDataset(x, y)


def images(n_samples: int = 256, channels: int = 3, size: int = 16, n_classes: int = 10, seed: int = 0) -> TensorDataset:
    """Class-dependent noisy patterns of shape (channels, size, size) with integer labels."""
    positive_int("n_samples", n_samples)
    positive_int("channels", channels)
    positive_int("size", size, minimum=4)
    positive_int("n_classes", n_classes, minimum=2)
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(n_classes, channels, size, size, generator=g)
    labels = torch.randint(0, n_classes, (n_samples,), generator=g)
    x = prototypes[labels] + 0.5 * torch.randn(n_samples, channels, size, size, generator=g)
    return TensorDataset(x, labels)


def indexed(n_samples: int) -> TensorDataset:
    """Sample i is the number i: lets a lesson see exactly which samples went where."""
    positive_int("n_samples", n_samples)
    return TensorDataset(torch.arange(n_samples, dtype=torch.float32).unsqueeze(1))
