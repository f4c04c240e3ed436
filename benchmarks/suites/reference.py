"""The `reference` suite: mode=single against DGL's own GCN example loop on Cora."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.harness import (
    SHARED,
    SuiteResult,
    compose,
    dgl_python,
    in_fresh_process,
    in_other_python,
)
from benchmarks.registry import suite


def dgl_example_epoch_times(epochs: int) -> tuple:
    """DGL's examples/pytorch/gcn/train.py training loop, as published (GraphConv)."""
    import dgl
    import dgl.nn as dglnn
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from dgl.data import CoraGraphDataset

    from gnntrain.data import resolve_cache_dir
    from gnntrain.data.farm import link_farm, source_stamp
    from gnntrain.data.loaders import DGL_DATASETS

    cache = resolve_cache_dir(compose([])) / "bench-dgl-example"
    folder = DGL_DATASETS["cora"].folder()
    link_farm(SHARED / folder, cache / folder, source_stamp(SHARED / folder))
    g = CoraGraphDataset(raw_dir=str(cache), verbose=False)[0]
    g = dgl.add_self_loop(dgl.remove_self_loop(g))
    features, labels = g.ndata["feat"], g.ndata["label"]
    train_mask, test_mask = g.ndata["train_mask"], g.ndata["test_mask"]

    class GCN(nn.Module):
        def __init__(self, in_size, hid_size, out_size):
            super().__init__()
            self.layers = nn.ModuleList(
                [
                    dglnn.GraphConv(in_size, hid_size, activation=F.relu),
                    dglnn.GraphConv(hid_size, out_size),
                ]
            )
            self.dropout = nn.Dropout(0.5)

        def forward(self, g, h):
            for i, layer in enumerate(self.layers):
                if i != 0:
                    h = self.dropout(h)
                h = layer(g, h)
            return h

    torch.manual_seed(0)
    model = GCN(features.shape[1], 16, 7)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=5e-4)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        model.train()
        logits = model(g, features)
        loss = F.cross_entropy(logits[train_mask], labels[train_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    model.eval()
    with torch.no_grad():
        acc = float((model(g, features).argmax(1)[test_mask] == labels[test_mask]).float().mean())
    return times, acc


def gnntrain_single_epoch_times(epochs: int, tmp: str) -> tuple:
    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    cfg = compose(
        [
            "dataset=cora",
            f"data_dir={SHARED}",
            "mode=single",
            f"train.epochs={epochs}",
            f"train.eval_every={epochs}",
            "train.progress=false",
        ]
    )
    s = run_training(build_plan(cfg), Path(tmp))
    return s["epoch_time_s"], s["accuracy"]["test"]


@suite("reference")
def suite_reference(quick: bool) -> SuiteResult:
    import tempfile

    if dgl_python() is None:
        raise SystemExit("the reference suite runs DGL's example on the DGL stack: make venv-dgl")
    reps, epochs = (3, 100) if quick else (5, 200)
    base, ours, accs = [], [], {"dgl_example": [], "gnntrain_single": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):  # interleaved repetitions
            t, a = in_other_python(dgl_python(), dgl_example_epoch_times, epochs)  # the DGL stack
            base.append(statistics.median(t[5:]))
            accs["dgl_example"].append(a)
            t, a = in_fresh_process(gnntrain_single_epoch_times, epochs, str(Path(tmp) / str(rep)))
            ours.append(statistics.median(t[5:]))
            accs["gnntrain_single"].append(a)
    ratio = statistics.median(ours) / statistics.median(base)
    return SuiteResult(
        title="reference: mode=single vs DGL's GCN example (Cora, 2-layer GCN, hidden 16, 200 "
        "epochs)",
        columns=[
            "candidate",
            "median epoch (ms)",
            "min-max (ms)",
            "test acc (median)",
            "ratio",
            "goal",
        ],
        rows=[
            [
                "DGL example loop (baseline)",
                f"{statistics.median(base) * 1e3:.3f}",
                f"{min(base) * 1e3:.3f}-{max(base) * 1e3:.3f}",
                f"{statistics.median(accs['dgl_example']):.3f}",
                "1.000",
                "",
            ],
            [
                "gnntrain mode=single",
                f"{statistics.median(ours) * 1e3:.3f}",
                f"{min(ours) * 1e3:.3f}-{max(ours) * 1e3:.3f}",
                f"{statistics.median(accs['gnntrain_single']):.3f}",
                f"{ratio:.3f}",
                "<= 1.05 " + ("(met)" if ratio <= 1.05 else "(MISSED)"),
            ],
        ],
        notes=f"{reps} interleaved repetitions x {epochs} epochs, each side in a fresh process: "
        f"DGL's example on "
        "the DGL stack (.venv-dgl), gnntrain on the default stack; per repetition the median epoch "
        "time "
        "(forward+backward+step, first 5 epochs dropped); table gives the median over repetitions.",
    )
