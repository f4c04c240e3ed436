"""The `volume` and `mop_volume` suites: measured communication bytes per epoch of every mode beside
the papers' closed forms, and MoP's all-to-all volume as the number of ranks grows."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import SuiteResult, compose
from benchmarks.registry import suite

VOLUME_PAPER = {
    "partition": "sparsity-aware: volume = METIS total volume x f; 'on some graphs communication "
    "drops to almost "
    "zero'",
    "mop": "volume constant in m: N(m-1)/m (d_0 + 4 sum d_l)",
    "hongtu": "Table 8: P2P + RU cuts host->device rows by 25-71% (m*n = 32-128)",
}


@suite("volume")
# over the function budget: one table: every mode at p = 2, 4, 8 beside its closed form
def suite_volume(quick: bool) -> SuiteResult:  # noqa: PLR0915
    """Measured bytes per epoch of every mode at p = 2, 4, 8 on one power-law graph, each beside
    its paper's closed form (computed here from the partition, not read from the mode) and the
    paper's headline claim."""
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

    n, width = (20000, 64) if quick else (100000, 128)
    b = 4  # float32
    graph = [
        "dataset=rmat",
        f"dataset.num_nodes={n}",
        f"dataset.num_edges={4 * n}",
        f"dataset.feat_dim={width}",
        "model=sage",
        f"model.hidden={width}",
        "train.epochs=1",
        "train.eval_every=100",
        "train.progress=false",
        "comm_timeout_s=900",
    ]
    cfg0 = compose(graph)
    data = load_dataset(cfg0)
    src, dst = data.src.numpy(), data.dst.numpy()
    # 2-layer SAGE, D = d_0 = d_1: layer 1 aggregates its D-wide input (no gradient), layer 2
    # narrows to the classes and so aggregates H.W (DGL's SAGEConv order), forward and backward: D +
    # 2c per row.
    dims = model_dims(width, width, data.num_classes, 2)
    shape = describe_model(model_family("sage"), dims, b)
    moved = list(shape.widths) + list(shape.grad_widths)
    per_row = sum(moved) * b
    rows, sparse_ratio_p8 = [], None
    mib = lambda x: f"{x / 2**20:.2f}"

    graphs = {tuple(graph): data}
    plan_check = {}  # the last run's "plan's bytes per epoch = measured" cell

    def add(p, mode, variant, measured, formula, ratio="", claim=""):
        same = "yes" if measured == formula else f"NO ({mib(formula)})"
        rows.append(
            [
                str(p),
                mode,
                variant,
                mib(measured),
                mib(formula),
                same,
                plan_check["cell"],
                ratio,
                claim,
            ]
        )

    with tempfile.TemporaryDirectory() as tmp:

        def run(p, extra, base=graph):
            cfg = compose(base + [f"hardware.ranks_per_node={p}"] + extra)
            plan = build_plan(cfg)
            s = run_training(
                plan, Path(tmp) / f"{p}-{len(base)}-{'-'.join(extra)}".replace("/", "_")
            )
            if tuple(base) not in graphs:
                graphs[tuple(base)] = load_dataset(cfg)
            stated, measured = (
                plan_epoch_bytes(cfg, plan, graphs[tuple(base)]),
                s["comm_bytes"]["per_epoch"],
            )
            plan_check["cell"] = (
                "yes" if stated == measured else f"NO (plan {stated}, measured {measured})"
            )
            return s["comm_bytes"]["by_kind"], s

        for p in (2, 4, 8):
            part, _ = partition_graph(
                src, dst, data.num_nodes, p, cfg0.partitioner, data.content_hash
            )
            table = rows_per_pair(part.inverse[src], part.inverse[dst], part.offsets)
            cover = {a: int(np.sum(table[a])) for a in ("pre", "post", "hybrid")}
            # partition mode: oblivious all-gathers every other rank's rows, sparse sends NnzCols
            # rows
            k, _ = run(p, ["mode=partition", "mode.comm=oblivious"])
            oblivious = k.get("allgather", 0) + k.get("reduce_scatter", 0)
            add(p, "partition", "oblivious (all-gather)", oblivious, (p - 1) * n * per_row)
            k, _ = run(p, ["mode=partition", "mode.comm=sparse"])
            sparse = k.get("halo_fwd", 0) + k.get("halo_bwd", 0)
            ratio = sparse / oblivious
            goal = ""
            if p == 8:
                sparse_ratio_p8 = ratio
                goal = "goal <= 0.25x oblivious at p=8 " + (
                    "(met)" if ratio <= 0.25 else "(MISSED)"
                )
            add(
                p,
                "partition",
                "sparse (NnzCols halo)",
                sparse,
                part.metrics.total_volume * per_row,
                f"{ratio:.3f}x oblivious",
                goal or VOLUME_PAPER["partition"],
            )
            # SuperGCN: rows per pair under pre / post / hybrid (minimum vertex cover), then int2
            measured = {}
            for aggregation in ("pre", "post", "hybrid"):
                k, _ = run(p, ["mode=supergcn", "mode.bits=32", f"mode.aggregation={aggregation}"])
                measured[aggregation] = k.get("halo_fwd", 0) + k.get("halo_bwd", 0)
                ratio = measured["pre"] / measured[aggregation]
                claim = ""
                if aggregation == "hybrid":
                    claim = (
                        "goal >= 1.3x fewer than pre "
                        + ("(met)" if ratio >= 1.3 else "(MISSED)")
                        + "; paper 1.52x on mag240M"
                    )
                add(
                    p,
                    "supergcn",
                    f"{aggregation} fp32 ({cover[aggregation]} rows)",
                    measured[aggregation],
                    cover[aggregation] * per_row,
                    f"pre / this = {ratio:.3f}",
                    claim,
                )
            k, _ = run(
                p,
                [
                    "mode=supergcn",
                    "mode.bits=2",
                    "mode.aggregation=hybrid",
                    "mode.quantize_backward=true",
                ],
            )
            int2 = k.get("halo_fwd", 0) + k.get("halo_bwd", 0) + k.get("quant_params", 0)
            ratio = measured["hybrid"] / int2
            int2_form = cover["hybrid"] * sum(row_bytes(w, 2, b, "bfloat16") for w in moved)
            add(
                p,
                "supergcn",
                "hybrid int2 (+ bf16 scale/zero)",
                int2,
                int2_form,
                f"fp32 / int2 = {ratio:.2f}",
                f"goal >= 15x ({'met' if ratio >= 15 else 'MISSED'}: 16w/(w+16) per "
                f"row of width w, {16 * width / (width + 16):.2f} at D={width}, "
                f"{16 * dims[-1] / (dims[-1] + 16):.2f} at c={dims[-1]}); paper 15.5x at D~768",
            )
            # MoP: column <-> row relayouts, constant in m
            k, _ = run(p, ["mode=mop"])
            mop = k.get("all_to_all_fwd", 0) + k.get("all_to_all_bwd", 0)
            form = n * (p - 1) // p * (width + 4 * width) * b
            add(
                p,
                "mop",
                "all-to-all relayouts",
                mop,
                form,
                f"bytes / ((m-1)/m) = {mib(mop * p / (p - 1))}",
                VOLUME_PAPER["mop"],
            )
            # HongTu: host->device rows per layer with and without dedup (m*n = 32 chunks in all)
            h2d = {}
            for dedup in ("none", "p2p+reuse"):
                k, s = run(p, ["mode=hongtu", f"mode.chunks={32 // p}", f"mode.dedup={dedup}"])
                report = s["mode_report"]
                h2d[dedup] = (
                    report["measured_gather_rows_per_layer"]["h2d"],
                    report["rows_per_layer"]["ori" if dedup == "none" else "ru"],
                    k.get("h2d", 0),
                    plan_check["cell"],
                )
            cut = 1 - h2d["p2p+reuse"][0] / h2d["none"][0]
            for dedup, (measured_rows, formula_rows, nbytes, stated) in h2d.items():
                rows.append(
                    [
                        str(p),
                        "hongtu",
                        f"{dedup}: h2d rows/layer (h2d MiB/epoch {mib(nbytes)})",
                        str(measured_rows),
                        str(formula_rows),
                        "yes" if measured_rows == formula_rows else "NO",
                        stated,
                        f"{cut:.1%} fewer rows" if dedup != "none" else "V_ori",
                        ""
                        if dedup == "none"
                        else "goal >= 25% fewer (#7) "
                        + ("(met)" if cut >= 0.25 else "(MISSED)")
                        + "; "
                        + VOLUME_PAPER["hongtu"],
                    ]
                )
        # the sparse/oblivious ratio depends on density: the same comparison at p = 8 on a denser
        # R-MAT
        dense = [o for o in graph if not o.startswith("dataset.num_edges=")] + [
            f"dataset.num_edges={10 * n}"
        ]
        dense_data = load_dataset(compose(dense))
        dense_part, _ = partition_graph(
            dense_data.src.numpy(),
            dense_data.dst.numpy(),
            dense_data.num_nodes,
            8,
            cfg0.partitioner,
            dense_data.content_hash,
        )
        label = (
            f" [denser: {dense_data.num_edges} edges, avg degree {dense_data.num_edges / n:.1f}]"
        )
        k, _ = run(8, ["mode=partition", "mode.comm=oblivious"], dense)
        oblivious = k.get("allgather", 0) + k.get("reduce_scatter", 0)
        add(8, "partition", "oblivious" + label, oblivious, 7 * n * per_row)
        k, _ = run(8, ["mode=partition", "mode.comm=sparse"], dense)
        sparse = k.get("halo_fwd", 0) + k.get("halo_bwd", 0)
        add(
            8,
            "partition",
            "sparse" + label,
            sparse,
            dense_part.metrics.total_volume * per_row,
            f"{sparse / oblivious:.3f}x oblivious",
            "goal <= 0.25x oblivious at p=8 "
            + ("(met)" if sparse / oblivious <= 0.25 else "(MISSED)"),
        )
    return SuiteResult(
        title=f"communication volume per epoch, every mode, p = 2/4/8 (R-MAT {data.num_nodes} "
        f"nodes, "
        f"{data.num_edges} directed edges, METIS, 2-layer SAGE, D = {width}, float32)",
        columns=[
            "p",
            "mode",
            "variant",
            "measured MiB/epoch (hongtu: rows)",
            "closed form",
            "= closed form",
            "plan = measured",
            "ratio",
            "goal / paper's claim",
        ],
        rows=rows,
        extra={"sparse_over_oblivious_p8": sparse_ratio_p8},
        notes="One training epoch per row (bytes do not vary by epoch); measured = the ledger's "
        "bytes summed over "
        "ranks (partition: halo_fwd + halo_bwd or allgather + reduce_scatter; supergcn adds "
        "quant_params; "
        "mop: all_to_all_fwd + bwd); the gradient all-reduce is left out everywhere. 'plan = "
        "measured' "
        "compares every byte of the epoch, all-reduce included, with the figure `gnntrain plan` "
        "states "
        "(its estimate, or once the graph is partitioned its graph report). Closed forms, "
        "computed here from the partition: oblivious (p-1) N W b; sparse = METIS total volume x W "
        "b; "
        "supergcn = vertex-cover rows (pre / post / hybrid) x W b, int2: (w/4 + 4) bytes per row "
        "of "
        "each width w in W; mop N (m-1)/m (d_0 + 4 d_1) b; hongtu V_ori / V_ru (notes/hongtu.md) "
        "per "
        "layer, host->device, with m*n = 32 chunks. W = D + 2c: layer 1 aggregates its D-wide "
        "input "
        "features (no gradient), layer 2 narrows to c classes and so aggregates H.W, c wide, "
        "forward "
        "and backward (DGL SAGEConv's order). The int2 ratio misses 15x because the c-wide rows "
        "carry "
        "the same 4 B scale/zero point as the D-wide ones. "
        "The last two rows repeat sparse vs oblivious at p = 8 on a denser R-MAT: the ratio grows "
        "with "
        "density (more of each block's columns are non-empty), so the 0.25x goal is met on one "
        "graph "
        "and not the other.",
    )


def plan_epoch_bytes(cfg, plan, data) -> int:
    """The bytes per epoch `gnntrain plan` states for ``plan``: the mode's estimate where the graph
    does not change it, else the figure the mode's graph report derives from the (cached)
    partition."""
    from gnntrain.partition import partition_graph
    from gnntrain.plan import build_mode

    if plan.comm_per_epoch and plan.comm_per_epoch.get("per_epoch_bytes") is not None:
        return int(plan.comm_per_epoch["per_epoch_bytes"])
    part, _ = partition_graph(
        data.src.numpy(),
        data.dst.numpy(),
        data.num_nodes,
        plan.num_parts,
        cfg.partitioner,
        data.content_hash,
    )
    return int(build_mode(cfg).graph_report(data, part, plan)["bytes per epoch"]["total"])


@suite("mop_volume")
def suite_mop_volume(quick: bool) -> SuiteResult:
    """MoP's all-to-all bytes stay within the (m-1)/m factor while partition halo bytes grow with
    m."""
    import tempfile

    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    n = 5000 if quick else 20000
    graph = [
        "dataset=rmat",
        f"dataset.num_nodes={n}",
        f"dataset.num_edges={8 * n}",
        "dataset.feat_dim=64",
        "model.hidden=64",
        "train.epochs=2",
        "train.progress=false",
        "kernel=torch",
        "comm_timeout_s=600",
    ]
    rows, base = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for m in (2, 4, 8):
            kinds = {}
            for mode in ("mop", "partition"):
                s = run_training(
                    build_plan(compose(graph + [f"mode={mode}", f"hardware.ranks_per_node={m}"])),
                    Path(tmp) / f"{mode}-{m}",
                )
                kinds[mode] = s["comm_bytes"]["by_kind"]
            mop = kinds["mop"]["all_to_all_fwd"] + kinds["mop"]["all_to_all_bwd"]
            halo = kinds["partition"].get("halo_fwd", 0) + kinds["partition"].get("halo_bwd", 0)
            base.setdefault("mop", mop / ((2 - 1) / 2))
            rows.append(
                [
                    str(m),
                    f"{mop / 2**20:.2f}",
                    f"{(m - 1) / m:.3f}",
                    f"{mop / base['mop']:.3f}",
                    f"{halo / 2**20:.2f}",
                ]
            )
    return SuiteResult(
        title=f"MoP vs partition feature traffic as m grows (R-MAT, {n} nodes, 2-layer GCN, "
        f"features 64, hidden 64)",
        columns=[
            "m",
            "MoP all-to-all MiB/epoch",
            "(m-1)/m",
            "MoP bytes / (N*(d0+4*sum d)*b)",
            "partition halo MiB/epoch",
        ],
        rows=rows,
        notes="MoP's volume is N(m-1)/m (d_0 + 4 sum_l d_l) elements: the ratio column equals "
        "(m-1)/m. "
        "Partition mode's halo volume follows the cut, which grows with the number of parts.",
    )
