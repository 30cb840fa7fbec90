"""Notebook 12's data and model: a small regression dataset and a two-layer MLP, in float64, made the same
wherever they are made (a notebook, an engine, a torchrun script's ranks), so that runs can be compared exactly."""

from __future__ import annotations


def regression(n: int, features: int = 6, seed: int = 0):
    """A small regression dataset of `n` samples (float64), the same wherever it is made."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    w = torch.randn(features, 1, generator=g, dtype=torch.float64)
    return torch.utils.data.TensorDataset(x, torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=g, dtype=x.dtype))


def small_model(features: int = 6, hidden: int = 16, seed: int = 0):
    """A two-layer MLP in float64, the same initial weights wherever it is made."""
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)).double()
