"""HyScale's performance model (§V): predicted stage times per iteration."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnntrain.config.schema import option_value
from gnntrain.modes.hyscale.batches import initial_shares


def frontier_sizes(
    batch: float, fanouts: Sequence[int], num_nodes: int, avg_degree: float
) -> List[Tuple[float, float]]:
    """Expected (src rows, edges) per layer, input side first, for ``batch`` seeds:
    k_eff = min(fanout, d̄) edges per row; new rows as balls into N bins."""
    out = []
    n = float(batch)
    for fanout in reversed(list(fanouts)):
        k = avg_degree if fanout < 0 else min(float(fanout), avg_degree)
        edges = n * k
        src = n + (num_nodes - n) * (1.0 - math.exp(-edges / max(1, num_nodes)))
        out.append((min(float(num_nodes), src), edges))
        n = min(float(num_nodes), src)
    return out[::-1]


def predict_times(
    ctx, hw, options, threads, shares: Optional[Sequence[float]] = None
) -> Dict[str, Any]:
    """HyScale-GNN §V, eqs. 6–13, per iteration, from the hardware profile.

    T_load = Σ_i |V0_i|·f0·S / BW_mem; T_trans = max over accelerators |V0_i|·f0·S / BW_pcie;
    T_sync = 2·(model bytes) / BW_pcie; T_prop = max_i T_trainer,i + T_sync with eqs. 10–12
    (⊕ = sum); T_exec = max(T_load, T_trans, T_prop). T_samp is measured, not modelled (the
    paper profiles it offline), so it is left out of the predicted T_exec. ``threads``: the training
    threads of a CPU trainer, or one count per trainer; ``shares``: the split (default: the initial
    ``mode.shares`` or equal).
    """
    cpu, acc = int(options.cpu_trainers), int(options.accel_trainers)
    trainers = cpu + acc
    shares = tuple(shares) if shares is not None else initial_shares(options, trainers)
    per_rank = list(threads) if isinstance(threads, (list, tuple)) else [int(threads)] * trainers
    slow = [float(x) for x in options.slowdown] or [1.0] * trainers
    batch = min(int(options.batch_size), ctx.train_nodes or int(options.batch_size))
    s = ctx.dtype_bytes
    avg_degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
    on_gpu = str(option_value(hw.device)) == "cuda"
    v0, t_load, t_trans, trainer_s, loads, transfers = [], 0.0, 0.0, [], [], []
    for i, share in enumerate(shares):
        layers = frontier_sizes(batch * share, options.fanouts, ctx.num_nodes, avg_degree)
        rows0 = layers[0][0]
        v0.append(rows0)
        loads.append(rows0 * ctx.feat_dim * s / (float(hw.host_mem_gbps) * 1e9))
        t_load += loads[-1]
        gpu = on_gpu and i >= cpu
        transfers.append(rows0 * ctx.feat_dim * s / (float(hw.h2d_gbps) * 1e9) if i >= cpu else 0.0)
        t_trans = max(t_trans, transfers[-1])
        bw = float(hw.device_mem_gbps if gpu else hw.host_mem_gbps) * 1e9
        macs = float(hw.device_gmacs if gpu else hw.core_gmacs * per_rank[i]) * 1e9
        dst_rows = [r for r, _ in layers[1:]] + [batch * share]
        agg = [e * d_in * s / bw for (_, e), d_in in zip(layers, ctx.comm_widths)]
        upd = [n * a * b / macs for n, a, b in zip(dst_rows, ctx.dims[:-1], ctx.dims[1:])]
        forward = sum(agg) + sum(upd)
        backward = upd[0] + sum(agg[1:]) + sum(upd[1:])
        trainer_s.append((forward + backward) * slow[i])  # mode.slowdown emulates a slower device
    t_sync = 2 * ctx.param_bytes / (float(hw.h2d_gbps) * 1e9)
    t_prop = max(trainer_s) + t_sync
    return {
        "T_load_s": t_load,
        "T_trans_s": t_trans,
        "T_sync_s": t_sync,
        "T_prop_s": t_prop,
        "T_exec_s": max(t_load, t_trans, t_prop),
        "V0_per_trainer": [round(v, 1) for v in v0],
        "T_trainer_s": trainer_s,
        "T_load_per_trainer_s": loads,
        "T_trans_per_trainer_s": transfers,
        "batch_per_trainer": [batch * sh for sh in shares],
    }


def per_seed_costs(model: Dict[str, Any]) -> Dict[str, List[float]]:
    """Seconds per seed of each trainer's train, transfer and load stages, from
    :func:`predict_times` (linear in the trainer's seeds: what the initial split and DRM's
    proportional rule assume)."""

    def per(values):
        return [v / b if b > 0 else 0.0 for v, b in zip(values, model["batch_per_trainer"])]

    return {
        "train": per(model["T_trainer_s"]),
        "transfer": per(model["T_trans_per_trainer_s"]),
        "load": per(model["T_load_per_trainer_s"]),
        "sync_s": model["T_sync_s"],
    }


def trainer_cost(costs: Dict[str, Any], samp_per_seed: Sequence[float]) -> List[float]:
    """Seconds per seed of each trainer in the pipeline: its slowest stage (§V eq. 6 per
    trainer)."""
    return [
        max(s, t, tr, ld)
        for s, t, tr, ld in zip(samp_per_seed, costs["train"], costs["transfer"], costs["load"])
    ]


def model_shares(
    costs: Dict[str, Any], samp_per_seed: Sequence[float], min_share: float
) -> Tuple[float, ...]:
    """HyScale §III-B/§V: the initial workload split from the performance model. Each trainer's
    share ∝ 1 / its per-seed time (T_samp measured, the rest predicted), so every trainer's slowest
    stage takes the same time; floored at ``min_share`` like DRM's rule."""
    from gnntrain.modes.hyscale.drm import floor_shares

    cost = trainer_cost(costs, samp_per_seed)
    if not all(c > 0 for c in cost):
        return tuple(1.0 / len(cost) for _ in cost)
    rate = [1.0 / c for c in cost]
    return floor_shares([r / sum(rate) for r in rate], min_share)


def model_iteration_s(
    costs: Dict[str, Any],
    samp_per_seed: Sequence[float],
    shares: Sequence[float],
    batch: int,
    pipelined: bool = True,
) -> Dict[str, float]:
    """The model's per-iteration stage times for ``shares`` of a global ``batch``. Pipelined
    (prefetch, §IV-B): eq. 6, the slowest stage, T_exec = max(T_samp, T_load, T_trans, T_prop).
    Serial (prefetch off): each trainer samples, loads, copies and trains in turn, then all sync:
    T_exec = max_i Σ_stages + T_sync."""
    b = [batch * s for s in shares]
    t_samp = max(x * n for x, n in zip(samp_per_seed, b))
    t_load = sum(x * n for x, n in zip(costs["load"], b))
    t_trans = max(x * n for x, n in zip(costs["transfer"], b))
    t_prop = max(x * n for x, n in zip(costs["train"], b)) + costs["sync_s"]
    serial = max(
        n * (sp + tr + tf + ld)
        for n, sp, tr, tf, ld in zip(
            b, samp_per_seed, costs["train"], costs["transfer"], costs["load"]
        )
    )
    t_exec = max(t_samp, t_load, t_trans, t_prop) if pipelined else serial + costs["sync_s"]
    return {
        "T_samp_s": t_samp,
        "T_load_s": t_load,
        "T_trans_s": t_trans,
        "T_prop_s": t_prop,
        "T_exec_s": t_exec,
    }
