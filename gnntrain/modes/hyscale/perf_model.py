"""HyScale's performance model (§V): predicted stage times per iteration."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

from gnntrain.config.schema import option_value
from gnntrain.modes.hyscale.batches import initial_shares


def frontier_sizes(batch: float, fanouts: Sequence[int], num_nodes: int,
                   avg_degree: float) -> List[Tuple[float, float]]:
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


def predict_times(ctx, hw, options, threads: int) -> Dict[str, Any]:
    """HyScale-GNN §V, eqs. 6–13, per iteration, from the hardware profile.

    T_load = Σ_i |V0_i|·f0·S / BW_mem; T_trans = max over accelerators |V0_i|·f0·S / BW_pcie;
    T_sync = 2·(model bytes) / BW_pcie; T_prop = max_i T_trainer,i + T_sync with eqs. 10–12
    (⊕ = sum); T_exec = max(T_load, T_trans, T_prop). T_samp is measured, not modelled (the
    paper profiles it offline), so it is left out of the predicted T_exec.
    """
    cpu, acc = int(options.cpu_trainers), int(options.accel_trainers)
    trainers = cpu + acc
    shares = initial_shares(options, trainers)
    batch = min(int(options.batch_size), ctx.train_nodes or int(options.batch_size))
    s = ctx.dtype_bytes
    avg_degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
    on_gpu = str(option_value(hw.device)) == "cuda"
    v0, t_load, t_trans, trainer_s = [], 0.0, 0.0, []
    for i, share in enumerate(shares):
        layers = frontier_sizes(batch * share, options.fanouts, ctx.num_nodes, avg_degree)
        rows0 = layers[0][0]
        v0.append(rows0)
        t_load += rows0 * ctx.feat_dim * s / (float(hw.host_mem_gbps) * 1e9)
        gpu = on_gpu and i >= cpu
        if i >= cpu:
            t_trans = max(t_trans, rows0 * ctx.feat_dim * s / (float(hw.h2d_gbps) * 1e9))
        bw = float(hw.device_mem_gbps if gpu else hw.host_mem_gbps) * 1e9
        macs = float(hw.device_gmacs if gpu else hw.core_gmacs * threads) * 1e9
        dst_rows = [r for r, _ in layers[1:]] + [batch * share]
        agg = [e * d_in * s / bw for (_, e), d_in in zip(layers, ctx.comm_widths)]
        upd = [n * a * b / macs for n, a, b in zip(dst_rows, ctx.dims[:-1], ctx.dims[1:])]
        forward = sum(agg) + sum(upd)
        backward = upd[0] + sum(agg[1:]) + sum(upd[1:])
        trainer_s.append(forward + backward)
    t_sync = 2 * ctx.param_bytes / (float(hw.h2d_gbps) * 1e9)
    t_prop = max(trainer_s) + t_sync
    return {"T_load_s": t_load, "T_trans_s": t_trans, "T_sync_s": t_sync, "T_prop_s": t_prop,
            "T_exec_s": max(t_load, t_trans, t_prop), "V0_per_trainer": [round(v, 1) for v in v0]}


