"""Regression targets for a generated graph (``dataset.regression_targets``): T real values per
node, y_t(v) = μ[c(v), t] + ⟨x_v, w_t⟩ / √F + 0.25 ε, with μ drawn per class and target, w per
feature and target, ε standard normal noise, all seeded from the dataset's seed. A GNN that
aggregates homophilous neighbours recovers the class term better than the node's own features,
as it does the labels."""

from __future__ import annotations

import torch

NOISE = 0.25


def synthetic_targets(
    labels: torch.Tensor, features: torch.Tensor, num_targets: int, seed: int
) -> torch.Tensor:
    """float32 (N, num_targets) targets of the nodes with ``labels`` and ``features``."""
    gen = torch.Generator().manual_seed(int(seed) + 0x7A46)
    classes = int(labels.max()) + 1 if labels.numel() else 1
    t, f = int(num_targets), int(features.shape[1])
    class_mean = torch.randn(classes, t, generator=gen, dtype=torch.float64)
    weights = torch.randn(f, t, generator=gen, dtype=torch.float64) / max(1.0, f**0.5)
    noise = torch.randn(labels.numel(), t, generator=gen, dtype=torch.float64)
    targets = class_mean[labels.clamp(min=0)] + NOISE * noise
    for lo in range(0, labels.numel(), 1 << 16):  # features in blocks: a mapped graph stays mapped
        hi = min(labels.numel(), lo + (1 << 16))
        targets[lo:hi] += features[lo:hi].to(torch.float64) @ weights
    return targets.to(torch.float32)
