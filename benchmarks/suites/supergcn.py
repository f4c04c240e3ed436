"""The SuperGCN suites: `supergcn_volume` (rows per pair, int2 vs fp32 bytes), `supergcn_accuracy`
(int2 and label propagation on Cora) and `supergcn_lp` (when label propagation helps, #23)."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.harness import SHARED, SuiteResult, compose
from benchmarks.registry import suite


@suite("supergcn_volume")
def suite_supergcn_volume(quick: bool) -> SuiteResult:
    """SuperGCN rows per pair (pre / post / hybrid) and int2 vs fp32 halo bytes on a power-law
    graph."""
    import tempfile

    import numpy as np

    from gnntrain.data import load_dataset
    from gnntrain.launch import run_training
    from gnntrain.models.registry import describe_model, model_family
    from gnntrain.modes.supergcn import row_bytes
    from gnntrain.partition import partition_graph
    from gnntrain.partition.cover import rows_per_pair
    from gnntrain.plan import build_plan
    from gnntrain.sizing import model_dims

    n = 20000 if quick else 100000

    def config(width, p):
        return [
            "dataset=rmat",
            f"dataset.num_nodes={n}",
            f"dataset.num_edges={10 * n}",
            f"dataset.feat_dim={width}",
            f"model.hidden={width}",
            "model=gin",
            "train.epochs=2",
            "train.progress=false",
            "kernel=torch",
            "comm_timeout_s=600",
            "mode=supergcn",
            "mode.aggregation=hybrid",
            "mode.quantize_backward=true",
            f"hardware.ranks_per_node={p}",
        ]

    rows = []
    data = None
    with tempfile.TemporaryDirectory() as tmp:
        for width, p in [(128, 2), (128, 4), (128, 8), (256, 8)]:
            cfg = compose(config(width, p))
            data = load_dataset(cfg)
            part, _ = partition_graph(
                data.src.numpy(),
                data.dst.numpy(),
                data.num_nodes,
                p,
                cfg.partitioner,
                data.content_hash,
                None,
            )
            start = time.perf_counter()
            table = rows_per_pair(
                part.inverse[data.src.numpy()], part.inverse[data.dst.numpy()], part.offsets
            )
            cover_s = (time.perf_counter() - start) / 3
            pre, post, hybrid = (int(np.sum(table[a])) for a in ("pre", "post", "hybrid"))
            halo = {}
            for bits in (32, 2):
                s = run_training(
                    build_plan(compose(config(width, p) + [f"mode.bits={bits}"])),
                    Path(tmp) / f"{width}-{p}-{bits}",
                )
                k = s["comm_bytes"]["by_kind"]
                halo[bits] = (k.get("halo_fwd", 0) + k.get("halo_bwd", 0), k.get("quant_params", 0))
            fp32, (int2, params) = halo[32][0], halo[2]
            # closed form: rows x (forward: both layers, backward: layer 2 only) x bytes per row;
            # GIN aggregates its input in every layer, so every exchanged row is D wide
            dims = model_dims(width, width, data.num_classes, 2)
            shape = describe_model(model_family("gin"), dims, 4)
            moved = list(shape.widths) + list(shape.grad_widths)
            formula32 = hybrid * sum(row_bytes(w, 32, 4, "bfloat16") for w in moved)
            formula2 = (
                hybrid * sum(row_bytes(w, 2, 4, "bfloat16") - 4 for w in moved),
                hybrid * len(moved) * 4,
            )
            ratio = fp32 / (int2 + params)
            rows.append(
                [
                    str(p),
                    str(width),
                    str(pre),
                    str(post),
                    str(hybrid),
                    f"{pre / hybrid:.2f}",
                    ">= 1.3 " + ("(met)" if pre / hybrid >= 1.3 else "(MISSED)"),
                    f"{cover_s:.2f}",
                    f"{fp32 / 2**20:.2f}",
                    f"{(int2 + params) / 2**20:.3f}",
                    f"{ratio:.2f}",
                    ">= 15 " + ("(met)" if ratio >= 15 else "(MISSED)"),
                    "yes" if (fp32, int2, params) == (formula32, *formula2) else "NO",
                ]
            )
    return SuiteResult(
        title=f"SuperGCN on R-MAT ({data.num_nodes} nodes, {data.num_edges} directed edges), "
        f"METIS, 2-layer GIN, "
        "float32",
        columns=[
            "p",
            "width D",
            "pre rows",
            "post rows",
            "hybrid rows",
            "pre / hybrid",
            "goal",
            "cover time per variant (s)",
            "fp32 halo MiB/epoch",
            "int2 halo + params MiB/epoch",
            "fp32 / int2",
            "goal",
            "bytes = closed form",
        ],
        rows=rows,
        notes="Rows are summed over all (sender, receiver) pairs per layer; the graph is symmetric "
        "so pre = post "
        "(both equal the sparsity-aware NnzCols volume). Halo bytes are halo_fwd + halo_bwd (+ "
        "quant_params "
        "for int2) over all ranks, per epoch, hybrid aggregation, halo gradients quantized too. "
        "int2 row = "
        "D/4 packed bytes + 4 bytes of bfloat16 (scale, zero point): the ratio is 16D/(D+16) = "
        "14.2 at "
        "D = 128 (15.1 at D = 256), so the 15x goal is missed at D = 128 by construction and met "
        "from "
        "D = 240 on; the paper's 15.5x is at D = 768. Closed form: hybrid rows x (2 forward layers "
        "+ 1 backward) x bytes per row. GIN, because it aggregates every layer's D-wide input, so "
        "every row "
        "is D wide as in the 16D/(D+16) form; gnntrain's SAGE projects the last layer to the "
        "classes first "
        "(DGL SAGEConv's order), whose narrow rows pay the same 4 B of scale/zero point (the "
        "volume "
        "suite shows that case).",
    )


@suite("supergcn_accuracy")
def suite_supergcn_accuracy(quick: bool) -> SuiteResult:
    """Cora, 3-layer SAGE (hidden 256, dropout 0.5), 2 ranks: int2 vs fp32, with and without label
    propagation."""
    import statistics
    import tempfile

    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    epochs, seeds = (30, 2) if quick else (100, 3)
    base = [
        "dataset=cora",
        f"data_dir={SHARED}",
        "model=sage",
        "model.layers=3",
        "model.hidden=256",
        f"train.epochs={epochs}",
        "train.progress=false",
        "mode=supergcn",
        "hardware.ranks_per_node=2",
    ]
    acc, times = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):  # interleaved: every variant once per seed
            for lp in (0.0, 0.25):
                for bits in (32, 2):
                    s = run_training(
                        build_plan(
                            compose(
                                base
                                + [
                                    f"mode.bits={bits}",
                                    f"mode.label_propagation={lp}",
                                    f"train.seed={seed}",
                                ]
                            )
                        ),
                        Path(tmp) / f"{seed}-{lp}-{bits}",
                    )
                    acc.setdefault((lp, bits), []).append(s["accuracy"]["test"])
                    times.setdefault((lp, bits), []).append(s["epoch_time_median_s"])
    rows = []
    ref = statistics.mean(acc[(0.0, 32)])
    for (lp, bits), values in acc.items():
        mean = statistics.mean(values)
        goal = ""
        if bits == 2:
            same_lp = statistics.mean(acc[(lp, 32)])
            goal = "within 1.0 pp of fp32 " + (
                "(met)" if abs(mean - same_lp) <= 0.01 else "(MISSED)"
            )
        rows.append(
            [
                f"{lp}",
                str(bits),
                f"{100 * mean:.2f}",
                f"{100 * min(values):.1f}-{100 * max(values):.1f}",
                f"{100 * (mean - ref):+.2f}",
                f"{1000 * statistics.median(times[(lp, bits)]):.0f}",
                goal,
            ]
        )
    return SuiteResult(
        title=f"SuperGCN accuracy on Cora, 3-layer SAGE, hidden 256, dropout 0.5, {epochs} epochs, "
        f"2 ranks, "
        f"mean over {seeds} seeds",
        columns=[
            "label propagation",
            "bits",
            "test acc (%)",
            "min-max",
            "vs fp32 without LP (pp)",
            "median epoch (ms)",
            "goal",
        ],
        rows=rows,
        notes="int2 quantizes halo rows and halo gradients (per-row min/max, stochastic rounding, "
        "bfloat16 "
        "parameters). Label propagation turns 25% of Cora's 140 training nodes into label inputs, "
        "so the "
        "loss sees 105: on a graph this small that costs accuracy, unlike the paper's large "
        "graphs. On one "
        "machine over loopback the int2 epoch is slower than fp32: coding costs more than the "
        "bytes it saves.",
    )


@suite("supergcn_lp")
def suite_supergcn_lp(quick: bool) -> SuiteResult:
    """When label propagation helps (#23): SuperGCN's LP rate swept on Cora (5% of nodes labelled,
    informative features) and on a csbm graph with half its nodes labelled and weak features, fp32
    (exact LP), beside the share of test nodes that have a label input among their in-neighbours."""
    import statistics
    import tempfile

    import torch

    from gnntrain.data import load_dataset
    from gnntrain.launch import run_training
    from gnntrain.modes.supergcn import label_propagation_rows
    from gnntrain.plan import build_plan

    epochs, seeds = (30, 1) if quick else (100, 2)
    rates = (0.0, 0.25, 0.5) if quick else (0.0, 0.1, 0.25, 0.5, 0.75)
    graphs = {
        "cora (140 train labels, 5%)": ["dataset=cora", f"data_dir={SHARED}"],
        "csbm 20k (50% train labels, feature_snr 0.5)": [
            "dataset=csbm",
            "dataset.num_nodes=20000",
            "dataset.avg_degree=10",
            "dataset.train_fraction=0.5",
            "dataset.val_fraction=0.1",
            "dataset.test_fraction=0.4",
            "dataset.feature_snr=0.5",
        ],
    }
    model = [
        "model=sage",
        "model.layers=3",
        "model.hidden=128",
        f"train.epochs={epochs}",
        "train.progress=false",
        "mode=supergcn",
        "mode.bits=32",
        "hardware.ranks_per_node=2",
        "kernel=torch",
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for g, (name, graph) in enumerate(graphs.items()):
            data = load_dataset(compose(graph))
            src, dst = data.src, data.dst
            base = None
            for rate in rates:
                accs, reach = [], []
                for seed in range(seeds):
                    s = run_training(
                        build_plan(
                            compose(
                                graph
                                + model
                                + [f"mode.label_propagation={rate}", f"train.seed={seed}"]
                            )
                        ),
                        Path(tmp) / f"{g}-{rate}-{seed}",
                    )
                    accs.append(s["accuracy"]["test"])
                    if rate > 0:
                        inputs = label_propagation_rows(data.masks["train"], rate, seed)
                        touched = torch.zeros(data.num_nodes, dtype=torch.bool)
                        touched[dst[inputs[src]]] = True
                        test = data.masks["test"]
                        reach.append(float((touched & test).sum()) / float(test.sum()))
                mean = statistics.mean(accs)
                base = mean if base is None else base
                loss_nodes = int(data.masks["train"].sum()) - int(
                    round(rate * int(data.masks["train"].sum()))
                )
                rows.append(
                    [
                        name,
                        f"{rate:g}",
                        f"{100 * mean:.2f}",
                        f"{100 * (mean - base):+.2f}",
                        f"{loss_nodes:,}",
                        f"{100 * statistics.mean(reach):.1f}" if reach else "0.0",
                    ]
                )
    return SuiteResult(
        title=f"SuperGCN label propagation rate, 3-layer SAGE hidden 128, fp32, {epochs} epochs, 2 "
        f"ranks, "
        f"mean over {seeds} seeds",
        columns=[
            "graph",
            "LP rate",
            "test acc (%)",
            "vs no LP (pp)",
            "train nodes left in the loss",
            "test nodes with a label-input in-neighbour (%)",
        ],
        rows=rows,
        notes="LP turns a fixed share of the training nodes into label inputs (a learnt label "
        "embedding added "
        "to their features) and takes them out of the loss. It helps where many neighbours of the "
        "evaluated nodes carry a label input and the features alone are weak; it hurts where "
        "labels "
        "are scarce, so that the inputs reach few test nodes while the loss loses supervision "
        "(Cora). "
        "The paper's gains are on graphs of the second kind at scale (ogbn-products, papers100M).",
    )
