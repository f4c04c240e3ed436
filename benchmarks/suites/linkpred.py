"""The `linkpred` suite (#56, must-show 2): link prediction's accuracy and epoch time against a
plain PyG loop, side by side in one run, on Cora and CiteSeer.

The peer is PyG's own example (examples/link_pred.py in pyg-team/pytorch_geometric): GCNConv(f, 128)
-> ReLU -> GCNConv(128, 64), a dot decoder, RandomLinkSplit(num_val=0.05, num_test=0.1,
is_undirected=True, add_negative_train_samples=False), a fresh ``negative_sampling`` per epoch with
as many negatives as positives, BCEWithLogits, Adam lr 0.01, 100 epochs, test AUC (sklearn) at the
best validation AUC. gnntrain trains the same stack with ``task=link_prediction`` in
``mode=single`` and ``mode=partition`` p=4. A fourth candidate runs PyG's loop on gnntrain's own
split and scores it under gnntrain's evaluation protocol, so that a difference in AUC can be told
apart from a difference in protocol.

Every candidate runs in a fresh interpreter, interleaved over seeds, on the graph gnntrain loads
(the same features and edges on every side), with 2 intra-op threads.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from benchmarks.harness import SHARED, SuiteResult, compose, in_other_python
from benchmarks.registry import suite

THREADS = 2
DATASETS = ("cora", "citeseer")
EDGE_SPLIT = (0.85, 0.05, 0.10)
HIDDEN, EMBEDDING, LR = 128, 64, 0.01
AUC_MARGIN, TIME_RATIO = 0.01, 0.8  # the goals: AUC >= PyG's - 0.01, epoch <= 0.8x PyG's

CANDIDATES = {
    "pyg": "plain PyG loop (PyG's examples/link_pred.py: RandomLinkSplit, its negatives; baseline)",
    "pyg-gsplit": "PyG's loop on gnntrain's split, scored by gnntrain's protocol (like for like)",
    "single": "gnntrain mode=single",
    "partition": "gnntrain mode=partition p=4",
}


def _graph(dataset: str) -> List[str]:
    return [f"dataset={dataset}", f"data_dir={SHARED}"]


def _gnntrain_overrides(dataset: str, mode: str, seed: int, epochs: int) -> List[str]:
    """The PyG example's hyperparameters where gnntrain has them: 2 GCN layers, hidden 128, output
    64, no dropout, no weight decay, lr 0.01, one uniform negative per positive, dot decoder."""
    modes = {
        "single": ["mode=single"],
        "partition": ["mode=partition", "hardware.ranks_per_node=4"],
    }
    return _graph(dataset) + [
        "task=link_prediction",
        "task.decoder=dot",
        f"task.embedding_dim={EMBEDDING}",
        "task.negatives=uniform",
        "task.num_negatives=1",
        f"task.edge_split=[{','.join(str(f) for f in EDGE_SPLIT)}]",
        f"task.split_seed={seed}",
        "model=gcn",
        "model.layers=2",
        f"model.hidden={HIDDEN}",
        "model.dropout=0",
        f"train.lr={LR}",
        "train.weight_decay=0",
        f"train.epochs={epochs}",
        "train.eval_every=1",
        f"train.seed={seed}",
        "train.progress=false",
        *modes[mode],
    ]


def _pick(val: List[float], test: List[float]) -> float:
    """The test AUC of the first epoch with the best validation AUC (the PyG example's rule)."""
    best = max(range(len(val)), key=lambda i: (val[i], -i))
    return test[best]


def run_gnntrain(dataset: str, mode: str, seed: int, epochs: int) -> dict:
    """gnntrain ``mode`` (single | partition) in this fresh interpreter: its per-epoch val/test AUC
    (metrics.jsonl) and epoch times (summary.json: the train step only, evaluation excluded)."""
    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    with tempfile.TemporaryDirectory() as tmp:
        plan = build_plan(compose(_gnntrain_overrides(dataset, mode, seed, epochs)))
        summary = run_training(plan, Path(tmp))
        records = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").open()]
    val = [r["val_auc"] for r in records if "val_auc" in r]
    test = [r["test_auc"] for r in records if "test_auc" in r]
    return {
        "val_auc": val,
        "test_auc": test,
        "best_val_test_auc": _pick(val, test),
        "last_test_auc": summary["metrics"]["test"]["auc"],
        "epoch_time_s": summary["epoch_time_s"],
        "epoch_time_median_s": summary["epoch_time_median_s"],
        "kernel": plan.kernel,
        "threads_per_rank": plan.threads_per_rank,
        "partitioner": plan.partitioner,
    }


class _Net:
    """PyG's example model: GCNConv(f, 128) -> ReLU -> GCNConv(128, 64), a dot decoder."""

    def __init__(self, in_channels: int):
        import torch
        from torch_geometric.nn import GCNConv

        self.conv1, self.conv2 = GCNConv(in_channels, HIDDEN), GCNConv(HIDDEN, EMBEDDING)
        self.params = list(self.conv1.parameters()) + list(self.conv2.parameters())
        self.optimizer = torch.optim.Adam(self.params, lr=LR)

    def train(self, mode: bool) -> None:
        self.conv1.train(mode)
        self.conv2.train(mode)

    def encode(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    @staticmethod
    def decode(z, pairs):
        return (z[pairs[0]] * z[pairs[1]]).sum(dim=-1)


def _train_step(net: _Net, x, mp_edges, positives) -> float:
    """One epoch of PyG's example (what is timed): forward, a fresh negative_sampling with as many
    negatives as positives, BCEWithLogits over both, backward, Adam step."""
    import torch
    from torch_geometric.utils import negative_sampling

    net.train(True)
    net.optimizer.zero_grad()
    z = net.encode(x, mp_edges)
    negatives = negative_sampling(
        edge_index=mp_edges,
        num_nodes=x.shape[0],
        num_neg_samples=positives.size(1),
        method="sparse",
    )
    pairs = torch.cat([positives, negatives], dim=-1)
    labels = torch.cat([torch.ones(positives.size(1)), torch.zeros(negatives.size(1))])
    loss = torch.nn.functional.binary_cross_entropy_with_logits(net.decode(z, pairs), labels)
    loss.backward()
    net.optimizer.step()
    return float(loss)


def _auc(net: _Net, x, mp_edges, pairs, labels) -> float:
    import torch
    from sklearn.metrics import roc_auc_score

    net.train(False)
    with torch.no_grad():
        scores = net.decode(net.encode(x, mp_edges), pairs).sigmoid()
    return float(roc_auc_score(labels.numpy(), scores.numpy()))


def _pyg_splits(dataset: str, seed: int, own_split: bool):
    """(x, train (message-passing edges, positives), val and test (message-passing edges, pairs,
    labels)) of the graph gnntrain loads: RandomLinkSplit's (test's message passing holds the
    validation edges too), or with ``own_split`` gnntrain's split (message passing over the train
    edges only; each held-out edge against its first fixed negative, as gnntrain's AUC)."""
    import torch
    import torch_geometric.transforms as T
    from torch_geometric.data import Data

    from gnntrain.data import load_dataset
    from gnntrain.tasks.link_prediction.split import split_edges

    cfg = compose(_gnntrain_overrides(dataset, "single", seed, 1))
    data = load_dataset(cfg)
    x, n = data.features, data.num_nodes
    if not own_split:
        split = T.RandomLinkSplit(
            num_val=EDGE_SPLIT[1],
            num_test=EDGE_SPLIT[2],
            is_undirected=True,
            add_negative_train_samples=False,
        )
        train, val, test = split(Data(x=x, edge_index=torch.stack([data.src, data.dst])))
        held = [(d.edge_index, d.edge_label_index, d.edge_label) for d in (val, test)]
        return x, (train.edge_index, train.edge_label_index), held[0], held[1]
    # gnntrain's split as its task draws it (the same seed and number of fixed negatives)
    task = cfg.task
    ours, mp_src, mp_dst = split_edges(
        data.src, data.dst, n, task.edge_split, seed, int(task.eval_negatives), False
    )
    mp = torch.stack([mp_src, mp_dst])
    held = []
    for name in ("val", "test"):
        a, b, _ = getattr(ours, name)
        negative = ours.negatives(name)  # the fixed negatives gnntrain scores these edges against
        pairs = torch.stack([torch.cat([a, a]), torch.cat([b, negative[:, 0]])])
        held.append((mp, pairs, torch.cat([torch.ones(a.numel()), torch.zeros(a.numel())])))
    return x, (mp, torch.stack(ours.train)), held[0], held[1]


def run_pyg(dataset: str, seed: int, epochs: int, own_split: bool) -> dict:
    """PyG's example loop in this fresh interpreter: per-epoch val/test AUC and the train step's
    seconds (evaluation not timed, as gnntrain's epoch time leaves it out)."""
    import torch

    torch.set_num_threads(THREADS)
    torch.manual_seed(seed)
    x, (mp, positives), val, test = _pyg_splits(dataset, seed, own_split)
    net = _Net(x.shape[1])
    times, vals, tests = [], [], []
    for _ in range(epochs):
        start = time.perf_counter()
        _train_step(net, x, mp, positives)
        times.append(time.perf_counter() - start)
        vals.append(_auc(net, x, *val))
        tests.append(_auc(net, x, *test))
    return {
        "val_auc": vals,
        "test_auc": tests,
        "best_val_test_auc": _pick(vals, tests),
        "last_test_auc": tests[-1],
        "epoch_time_s": times,
        "epoch_time_median_s": statistics.median(times),
        "counts": [int(positives.size(1)), int(val[1].size(1)), int(test[1].size(1))],
    }


def _run(candidate: str, dataset: str, seed: int, epochs: int) -> dict:
    """One candidate in a fresh interpreter of this stack (rank processes may start below it)."""
    python = Path(sys.executable)
    if candidate.startswith("pyg"):
        return in_other_python(python, run_pyg, dataset, seed, epochs, candidate == "pyg-gsplit")
    return in_other_python(python, run_gnntrain, dataset, candidate, seed, epochs)


def _spread(values: List[float], scale: float = 1.0, fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(min(values) * scale)}-{fmt.format(max(values) * scale)}"


def _rows(dataset: str, runs: Dict[str, List[dict]]) -> List[List[str]]:
    """The dataset's rows: each candidate's mean test AUC (at the best val epoch) and median epoch
    time over seeds, with the ratios and goals against the PyG loop."""
    auc = {c: statistics.mean(r["best_val_test_auc"] for r in rs) for c, rs in runs.items()}
    last = {c: statistics.mean(r["last_test_auc"] for r in rs) for c, rs in runs.items()}
    epoch = {c: statistics.median(r["epoch_time_median_s"] for r in rs) for c, rs in runs.items()}
    rows = []
    for c, rs in runs.items():
        is_ours = c in ("single", "partition")
        auc_goal = time_goal = ""
        if is_ours:
            met = auc[c] >= auc["pyg"] - AUC_MARGIN
            auc_goal = f">= {auc['pyg'] - AUC_MARGIN:.3f} " + ("(met)" if met else "(MISSED)")
        if c == "single":
            met = epoch[c] <= TIME_RATIO * epoch["pyg"]
            time_goal = f"<= {TIME_RATIO} " + ("(met)" if met else "(MISSED)")
        elif c == "partition":
            time_goal = "(not a goal: 4 ranks on 2 cores)"
        rows.append(
            [
                dataset,
                CANDIDATES[c],
                f"{auc[c]:.4f}",
                _spread([r["best_val_test_auc"] for r in rs]),
                f"{last[c]:.4f}",
                f"{auc[c] - auc['pyg']:+.4f}" if c != "pyg" else "",
                f"{auc[c] - auc['pyg-gsplit']:+.4f}" if is_ours else "",
                auc_goal,
                f"{epoch[c] * 1e3:.1f}",
                _spread([r["epoch_time_median_s"] for r in rs], 1e3, "{:.1f}"),
                f"{epoch[c] / epoch['pyg']:.2f}",
                time_goal,
            ]
        )
    return rows


@suite("linkpred")
def suite_linkpred(quick: bool) -> SuiteResult:
    """Issue #56's accuracy and speed comparison: PyG's link-prediction example against gnntrain's
    task=link_prediction (single and partition p=4) on Cora and CiteSeer, seeds interleaved."""
    seeds, epochs = ((0,), 20) if quick else ((0, 1, 2), 100)
    runs: Dict[Tuple[str, str], List[dict]] = {(d, c): [] for d in DATASETS for c in CANDIDATES}
    for seed in seeds:  # interleaved: every candidate of every dataset once per seed
        for dataset in DATASETS:
            for candidate in CANDIDATES:
                print(f"  linkpred: {dataset} {candidate} seed {seed}", flush=True)
                runs[(dataset, candidate)].append(_run(candidate, dataset, seed, epochs))
    rows: List[List[str]] = []
    for dataset in DATASETS:
        rows += _rows(dataset, {c: runs[(dataset, c)] for c in CANDIDATES})
    single = runs[(DATASETS[0], "single")][0]
    part = runs[(DATASETS[0], "partition")][0]
    counts = {d: runs[(d, "pyg")][0]["counts"] for d in DATASETS}
    return SuiteResult(
        title=f"linkpred: gnntrain task=link_prediction vs PyG's link-prediction example (2-layer "
        f"GCN hidden {HIDDEN}, output {EMBEDDING}, dot decoder, split {list(EDGE_SPLIT)}, "
        f"{epochs} epochs, lr {LR}, {len(seeds)} seed(s), {THREADS} threads, float32)",
        columns=[
            "graph",
            "candidate",
            "test AUC at best val (mean)",
            "min-max over seeds",
            "test AUC, last epoch (mean)",
            "vs PyG loop",
            "vs PyG on gnntrain's split",
            "AUC goal",
            "median epoch (ms)",
            "min-max over seeds (ms)",
            "time vs PyG",
            "time goal",
        ],
        rows=rows,
        notes=_notes(seeds, epochs, single, part, counts),
        extra={
            "runs": {
                f"{d}/{c}": [
                    {k: v for k, v in r.items() if k not in ("val_auc", "test_auc")} for r in rs
                ]
                for (d, c), rs in runs.items()
            }
        },
    )


def _notes(seeds, epochs: int, single: dict, part: dict, counts: Dict[str, list]) -> str:
    sizes = "; ".join(
        f"{d}: {c[0]} train positives, {c[1]} / {c[2]} val / test pairs (half negatives)"
        for d, c in counts.items()
    )
    return (
        f"Every candidate runs in a fresh interpreter of the default stack, seeds {list(seeds)} "
        "interleaved (each seed runs every candidate of both graphs before the next), on the graph "
        "gnntrain loads from the DGL copies (row-normalised features, as PyG's NormalizeFeatures; "
        "symmetric, no self-loops): the PyG loop gets it as a Data(x, edge_index). Test AUC: the "
        "test AUC of the epoch with the best validation AUC, the same rule on every side (gnntrain "
        "from metrics.jsonl, evaluated every epoch; PyG's example means this, though its script "
        "assigns best_val, not best_val_auc, so as published it keeps the last epoch's: the "
        "'last epoch' column), mean over seeds. The sides' protocols differ: the PyG loop splits "
        "with RandomLinkSplit (its own seeded split; test's message passing holds the validation "
        "edges too) and scores each split's positives against as many negatives drawn by "
        "negative_sampling (which avoids known edges); gnntrain splits with task.split_seed=seed, "
        "passes messages over the train edges only for both splits, and its AUC takes each "
        "held-out positive against its first fixed negative (a uniform node, not filtered; "
        "gnntrain/tasks/link_prediction/rank.py). The 'PyG on gnntrain's split' row trains PyG's "
        "loop on gnntrain's split and scores it by gnntrain's protocol, like for like. Train "
        f"negatives: PyG's negative_sampling per epoch (seeded by torch.manual_seed(seed)); "
        "gnntrain's counter-hashed uniform draw per (seed, epoch, edge). Sizes (PyG's split): "
        f"{sizes}. Epoch time: the train step only on both sides (zero_grad, the full-graph "
        "forward, drawing the negatives, the loss, backward, Adam's step; gnntrain's also its "
        "gradient all-reduce), evaluation excluded (gnntrain's summary.json epoch_time_median_s; "
        f"PyG's timed the same way around its train()), the median over all {epochs} epochs, then "
        f"the median over seeds. Threads: PyG {THREADS} (torch.set_num_threads); gnntrain single "
        f"{single['threads_per_rank']} (its plan), kernel {single['kernel']}; partition p=4: "
        f"{part['threads_per_rank']} thread per rank, 4 ranks sharing the 2 cores over gloo, "
        f"partitioner {part['partitioner']}: it is exact (the same AUC up to float rounding) and "
        "its time goal is not stated (the epoch time column says what 4 ranks on 2 cores cost). "
        "What each side caches: gnntrain builds its normalised CSR (self-loops, degree scales) "
        "once per run; PyG's GCNConv as the example builds it (cached=False) recomputes gcn_norm "
        "(self-loops, degrees) in every forward, and negative_sampling checks the drawn pairs "
        "against the edge set each epoch. Neither side keeps A·x of the inputs here (the first "
        "layer narrows, so both multiply by the weights first). gnntrain multiplies the fixed, "
        "sparse input features by the first layer's weights as a sparse product "
        "(gnntrain/models/sparse_inputs.py, kept as CSR once per run); PyG's GCNConv multiplies "
        "them dense."
    )
