"""The endpoint exchange: the rows of a scored edge's far endpoint, fetched from the rank that
holds them, and their gradients sent back.

Where an edge's two endpoints live on different ranks (a partitioned full-graph run), the rank that
scores the edge needs the other endpoint's final embedding; its gradient goes back to that rank
after the decoder's backward. It is the halo exchange's problem once more, on the final layer and
for the endpoints a rank's edges name (train edges and this epoch's negatives, or the fixed
evaluation edges), in p - 1 rounds, one per peer (:class:`~gnntrain.tasks.link_prediction.rank.
PairRounds`): per round, the counts and one all-to-all of the requested node ids (kind
``endpoint_ids``), one of their rows (``endpoint_fwd``) and, in training, one of their gradients
back (``endpoint_bwd``). Per epoch, with R_r the distinct endpoints rank r requests from others, d
the embedding width, b the dtype's bytes and p the world size, the ledger counts
Σ_r (8 R_r + 8 (p - 1)²) id bytes and Σ_r R_r d b bytes each way (docs/design.md, "Link
prediction").
"""

from __future__ import annotations

from typing import List, Tuple

import torch

from gnntrain.comm.accounting import Phase


class EndpointExchange:
    """Who holds which node's final row (learned once, in the setup phase), and the per-epoch
    fetch of the rows a rank's edges name."""

    def __init__(self, comm, owned_ids: torch.Tensor, num_nodes: int):
        self.comm, self.num_nodes = comm, int(num_nodes)
        self.owned_ids = owned_ids.to(torch.int64).cpu()
        self._owner = self._position = None

    def _tables(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(owner, position) of every node: the rank that holds it and its row there, learned on
        first use (setup phase: every rank's owned ids, to every rank)."""
        if self._owner is None:
            comm, p = self.comm, self.comm.world_size
            n = int(self.owned_ids.numel())
            owner = torch.full((self.num_nodes,), -1, dtype=torch.int32)
            position = torch.zeros(self.num_nodes, dtype=torch.int64)
            with comm.ledger.in_phase(Phase.setup):
                counts = comm.exchange_counts([n] * p, "setup")
                ids = comm.all_to_all(self.owned_ids.repeat(p), [n] * p, counts, "setup")
            for rank, chunk in enumerate(torch.split(ids, counts)):
                owner[chunk] = rank
                position[chunk] = torch.arange(chunk.numel())
            self._owner, self._position = owner, position
        return self._owner, self._position

    def owner_of(self, ids: torch.Tensor) -> torch.Tensor:
        """The rank that holds each node id (int32)."""
        return self._tables()[0][ids]

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The position of each owned node id among this rank's owned rows."""
        return self._tables()[1][ids]

    def fetch(
        self, owned_rows: torch.Tensor, wanted: torch.Tensor
    ) -> Tuple[torch.Tensor, "PendingGrad"]:
        """The rows of the distinct node ids ``wanted`` (none owned here) from their owners
        (``owned_rows``: this rank's rows, in the order of its owned ids), in ``wanted``'s order,
        and the handle that sends their gradients back. A collective: every rank calls it."""
        comm, p = self.comm, self.comm.world_size
        owners = self.owner_of(wanted).to(torch.int64)
        order = torch.argsort(owners, stable=True)
        asked = wanted[order]
        ask_counts = torch.bincount(owners, minlength=p).tolist()
        give_counts = comm.exchange_counts(ask_counts, "endpoint_ids")
        device = owned_rows.device  # the ids travel where the rows do (NCCL moves device memory)
        requested = comm.all_to_all(asked.to(device), ask_counts, give_counts, "endpoint_ids")
        local = self.rows(requested.cpu()).to(device)
        sent = owned_rows.index_select(0, local)
        got = comm.all_to_all(sent, give_counts, ask_counts, "endpoint_fwd")
        rows = torch.empty_like(got)
        rows[order.to(got.device)] = got
        return rows, PendingGrad(comm, order, local, ask_counts, give_counts)


class PendingGrad:
    """Sends the fetched rows' gradients back to their owners and adds them into the owners'
    gradient of their own rows."""

    def __init__(self, comm, order, local, ask_counts: List[int], give_counts: List[int]):
        self.comm, self.order, self.local = comm, order, local
        self.ask_counts, self.give_counts = ask_counts, give_counts

    def send_back(self, grad_fetched: torch.Tensor, grad_owned: torch.Tensor) -> None:
        """``grad_fetched``: the gradient of each fetched row (in ``wanted``'s order); adds the
        gradients other ranks send for this rank's rows into ``grad_owned``."""
        by_owner = grad_fetched[self.order.to(grad_fetched.device)]
        back = self.comm.all_to_all(by_owner, self.ask_counts, self.give_counts, "endpoint_bwd")
        grad_owned.index_add_(0, self.local, back)
