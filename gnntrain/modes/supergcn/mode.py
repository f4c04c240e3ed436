"""``mode=supergcn``: pre/post/hybrid aggregated halo exchange with int2/4/8
stochastic quantization and label propagation (SuperGCN paper, §2 "Distributed-level Optimizations";
docs/design.md#supergcn).

Layout: 1D partition parallelism, one block of rows per rank (as in ``mode=partition``, whose
exchange machinery this mode shares: ``halo.py``). Per layer and rank i (SuperGCN §2, "Subgraph
construction based on a hybrid of Pre- and Post-aggregation"; docs/design.md#supergcn):

* local edges (both ends in block i) aggregate straight from i's rows;
* for every sender j the cut edges j→i are split by a vertex cover of their
  bipartite graph (``partition/cover.py``): sources in the cover travel raw
  and are *post*-aggregated by i, the other edges are *pre*-aggregated by j
  into one partial sum per destination. Rows per pair = |cover|.

The exchange starts asynchronously and the local aggregation runs while it
is in flight (``mode.overlap``, SuperGCN §2 "Overview of the SuperGCN", step 5); with it, backward's
exchange overlaps the local aggregation's backward too (an extension; docs/design.md#supergcn).

Both halves are sparse products: the sender builds its outgoing rows as
``S_j · H_j`` (S_j selects post rows and sums pre edges, each source row
scaled by its source factor), and the receiver adds a local adjacency over
``H_i`` to a remote one over the received rows, both scaled by the
destination factor. Edge weights are the model's global-degree weights
kept as factors (models/norm.py), so every product is an unweighted SpMM and
SAGE's mean is exactly "exchange partial sums, divide by the global
in-degree". Backward runs the same path in reverse.

On the CPU the received rows are post-aggregated into the local product by a sorted, clustered
index_add (``models/post_aggregation.py``; SuperGCN §2, "Optimizing Index_add operator"), in the
native C build where it loads, and coded and decoded by its one-pass quantiser
(``models/_native_halo.c``); both give the torch formulas' bits.

With ``bits < 32`` the exchanged rows (and with ``quantize_backward`` their gradients) are coded per
row by ``comm/quantize.py`` (SuperGCN §2, "Quantization of communication to Int2"). Label
propagation (SuperGCN §2, same part; analysed in §3, Lemma 3 and Eq. (5)) adds a learnable label
embedding to the input features of a fixed random subset of training nodes, which the loss then
leaves out.
"""

from __future__ import annotations

from gnntrain.modes.base import RankShard
from gnntrain.modes.spec import Capabilities, Layout, ModeSpec, register_mode
from gnntrain.modes.supergcn.config import SuperGCNConfig
from gnntrain.modes.supergcn.cost import SuperGCNPlanner
from gnntrain.modes.supergcn.prepare import prepare
from gnntrain.modes.supergcn.strategy import SuperGCNStrategy


def strategy(mode: SuperGCNPlanner, shard: RankShard, ctx, model, optimizer) -> SuperGCNStrategy:
    return SuperGCNStrategy(shard, ctx, mode.settings, mode.options, mode.bits, model, optimizer)


SUPERGCN = register_mode(
    ModeSpec(
        name="supergcn",
        options=SuperGCNConfig,
        planner=SuperGCNPlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            needs_restructurable=False,  # exchanges whatever a layer hands its aggregation
            parts_from_csr=True,
            models_rule="SuperGCN pre-aggregates weighted sums of source rows at the sender; GAT's "
            "attention weights "
            "depend on both endpoints' features, so they cannot be summed before the exchange.",
            auto_variants=(
                {"aggregation": "hybrid", "bits": 32},
                {"aggregation": "pre", "bits": 32},
                {"aggregation": "hybrid", "bits": 8},
                {"aggregation": "hybrid", "bits": 2},
            ),
            exact_layouts=(Layout(3, (("bits", 32),)),),
        ),
    )
)
