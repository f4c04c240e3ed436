"""Which edges a link-prediction split holds out: one seeded draw over the graph's edges in
canonical order, shared by ``gnntrain ingest --edge-split`` (held out at ingest) and
``task.edge_split`` (held out at load), so both hold out the same edges for the same fractions and
seed."""

from __future__ import annotations

from typing import Sequence, Tuple

import torch

from gnntrain.errors import PlanError

HELD_OUT = ("val", "test")  # the splits whose edges link prediction holds out and scores


def draw_sides(
    num_items: int, fractions: Sequence[float], seed: int, what: str = "edges"
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train, val, test) positions among ``num_items`` canonically ordered edges, each sorted: a
    seeded permutation cut at round(f_val · m) and round(f_test · m) from its end."""
    m = int(num_items)
    order = torch.randperm(m, generator=torch.Generator().manual_seed(int(seed)))
    n_val, n_test = (int(round(float(f) * m)) for f in fractions[1:])
    n_train = m - n_val - n_test
    if n_train <= 0:
        raise PlanError(
            "task.edge_split",
            f"{list(fractions)} leaves no train edges of the graph's {m} {what}.",
            "give the train side more of the edges, e.g. task.edge_split=[0.85,0.05,0.1]",
        )
    train, val, test = (torch.sort(s).values for s in torch.split(order, [n_train, n_val, n_test]))
    return train, val, test
