"""Link prediction's decoders: a score for an edge from its two endpoints' final embeddings
(``task.decoder``). Each takes embeddings of matching (or broadcastable) shapes ``(..., d)`` and
returns one logit per pair, shape ``(...)``; the logit's sigmoid is the edge's probability."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn


class DotDecoder(nn.Module):
    r"""s(u, v) = h_u · h_v (the inner-product decoder of Kipf & Welling, Variational Graph
    Auto-Encoders, 2016, §2; PyG's link prediction example). No parameters."""

    def forward(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        return (h_u * h_v).sum(dim=-1)


class DistMultDecoder(nn.Module):
    r"""s(u, v) = Σ_i h_u[i] · r[i] · h_v[i] with one learned diagonal relation r (Yang et al.,
    Embedding Entities and Relations for Learning and Inference in Knowledge Bases, ICLR 2015,
    §3.3, for a graph of one relation). r starts at ones, i.e. at the dot decoder."""

    def __init__(self, dim: int):
        super().__init__()
        self.relation = nn.Parameter(torch.ones(dim))

    def forward(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        return (h_u * self.relation * h_v).sum(dim=-1)


class MLPDecoder(nn.Module):
    r"""s(u, v) = w_2ᵀ ReLU(W_1 (h_u ⊙ h_v) + b_1) + b_2: an MLP over the Hadamard product of
    the endpoints (the ``LinkPredictor`` of OGB's link property prediction examples)."""

    def __init__(self, dim: int, hidden: Optional[int] = None):
        super().__init__()
        hidden = int(hidden or dim)
        self.hidden = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(h_u * h_v))).squeeze(-1)


def build_decoder(name: str, dim: int, seed: int, dtype: torch.dtype) -> nn.Module:
    """The decoder ``name`` over embeddings of width ``dim``, its weights drawn from a generator
    seeded from the run's seed alone (identical on every rank, whatever the world size)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) + 0x5EED)
        decoder = {"dot": DotDecoder, "distmult": DistMultDecoder, "mlp": MLPDecoder}[name]
        module = decoder() if name == "dot" else decoder(int(dim))
    return module.to(dtype)
