"""Link prediction's part of the run plan: the split's sizes and the endpoint exchange's bytes per
epoch, estimated from sizes alone (the exact figure needs the partition and the negatives: the
run's ``summary.json`` counts it, and ``tests/test_link_prediction.py`` checks it against the
closed form of :mod:`gnntrain.tasks.link_prediction.exchange`)."""

from __future__ import annotations

import math

from gnntrain.tasks.base import TaskPlan, TaskSizes
from gnntrain.tasks.link_prediction.config import check_options


def expected_distinct(draws: float, population: float) -> float:
    """The expected number of distinct items among ``draws`` uniform draws from ``population``."""
    if population <= 0:
        return 0.0
    return population * -math.expm1(-draws / population)


def plan(options, sizes: TaskSizes) -> TaskPlan:
    """Train edges ≈ the train fraction of the undirected edges; a rank scores 1/p of them with
    ``num_negatives`` negatives each, and requests the distinct far endpoints that other ranks
    hold: modelled as uniform draws over the (p - 1)/p of the nodes it does not hold (an upper
    estimate for a partition that keeps neighbours together; negatives are uniform by design)."""
    check_options(options)
    n, p, k = sizes.num_nodes, sizes.world_size, int(options.num_negatives)
    train_edges = int(float(options.edge_split[0]) * sizes.num_edges / 2)
    details = {
        "decoder": str(options.decoder),
        "train edges (est.)": train_edges,
        "negatives": f"{k} {options.negatives} per train edge, drawn per epoch",
        "evaluation": f"{options.eval_negatives} fixed negatives per val/test edge; "
        f"MRR, Hits@{','.join(str(h) for h in options.hits_at)}, AUC",
    }
    if p <= 1:
        return TaskPlan(details=details)
    per_rank_draws = train_edges / p * (1 + k)
    remote = expected_distinct(per_rank_draws, n * (p - 1) / p) * p
    row_bytes = sizes.output_width * sizes.dtype_bytes
    by_kind = {
        "endpoint_ids": int(8 * remote + 8 * p * (p - 1) ** 2),
        "endpoint_fwd": int(remote * row_bytes),
        "endpoint_bwd": int(remote * row_bytes),
    }
    details["endpoint exchange bytes"] = sum(by_kind.values())
    return TaskPlan(details=details, comm_by_kind=by_kind)
