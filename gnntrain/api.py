"""gnntrain from Python: compose, plan, run, and train on a graph you hold in memory.

    import gnntrain.api as gt
    # data: a PyG Data, a DGL graph, or arrays
    result = gt.train(data, ["mode=partition", "train.epochs=100"])
    result.summary["accuracy"], result.run_dir
    model = result.model()          # a torch.nn.Module: model(data) -> logits

The same entry the CLI takes: overrides are Hydra's (``key=value``, ``group=option``), the plan is
validated as ``gnntrain plan`` validates it, and the run writes what ``gnntrain run`` writes
(plan.yaml, metrics.jsonl, summary.json, model.pt, model.yaml) into ``run_dir``.
"""

from __future__ import annotations

import datetime
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

__all__ = ["RunResult", "cli", "compose", "ingest_graph", "load_model", "plan", "run", "train"]


@dataclass
class RunResult:
    summary: Dict[str, Any]
    run_dir: Path
    plan: Any  # gnntrain.sizing.RunPlan

    @property
    def status(self) -> str:
        return str(self.summary.get("status"))

    @property
    def losses(self):
        return self.summary.get("losses", [])

    @property
    def accuracy(self) -> Dict[str, float]:
        return self.summary.get("accuracy", {})

    def model(self):
        """The trained model as a plain ``torch.nn.Module`` (:func:`load_model`)."""
        return load_model(self.run_dir)


def cli(
    args: Sequence[str],
    cwd: Optional[Path] = None,
    timeout: Optional[float] = None,
    env: Optional[Dict[str, str]] = None,
):
    """``gnntrain ARGS`` in a process of its own (this interpreter's ``gnntrain`` entry point, or
    ``python -m gnntrain``), output captured: a ``subprocess.CompletedProcess``. ``env`` adds to
    this process's environment."""
    import os
    import subprocess
    import sys

    exe = Path(sys.executable).parent / "gnntrain"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "gnntrain"]
    return subprocess.run(
        command + [str(a) for a in args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def compose(overrides: Sequence[str] = (), config_dir: Optional[str] = None):
    """The composed, schema-checked run config for ``overrides`` (as ``gnntrain run`` composes
    it)."""
    from gnntrain.launch.compose import compose as compose_config

    return compose_config(overrides, config_dir)


def compose_or_error(overrides: Sequence[str] = ()):
    """:func:`compose`, with a bad override (unknown option or group, a value of the wrong type)
    raised as one GnnTrainError line, the line ``gnntrain run`` prints for it."""
    from gnntrain.errors import GnnTrainError
    from gnntrain.launch.compose import config_error

    try:
        return compose(overrides)
    except GnnTrainError:
        raise
    except Exception as exc:
        message = config_error(exc)
        if message is None:
            raise
        raise GnnTrainError(message) from None


def plan(overrides: Sequence[str] = ()):
    """The validated run plan (mode=auto resolved); raises a GnnTrainError naming the offending
    option."""
    from gnntrain.auto import resolve_plan

    return resolve_plan(compose(overrides))


def run(overrides: Sequence[str] = (), run_dir: Optional[Path] = None) -> RunResult:
    """Plan and train; the run's files go to ``run_dir`` (default
    ``outputs/api/<time>-<mode>-<dataset>``)."""
    from gnntrain.launch import run_training

    the_plan = plan(list(overrides))
    if run_dir is None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f")
        run_dir = Path("outputs") / "api" / f"{stamp}-{the_plan.mode}-{the_plan.dataset}"
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    the_plan.write_yaml(run_dir / "plan.yaml")
    summary = run_training(the_plan, run_dir)
    return RunResult(summary, run_dir, the_plan)


def _arrays_of(graph, targets=None) -> Dict[str, Any]:
    """edge_index, features, labels, masks and regression targets (``targets``: an array, or "y"
    for the graph's own y) of a PyG Data, a DGL graph or a dict of arrays."""
    from gnntrain.data.ingest import graph_arrays

    masks = ("train_mask", "val_mask", "test_mask")
    if isinstance(graph, dict):
        get = lambda *keys: next((graph[k] for k in keys if graph.get(k) is not None), None)
        arrays = {
            "edge_index": get("edge_index", "edges"),
            "features": get("features", "x", "feat"),
            "labels": get("labels", "y", "label"),
            "masks": {m: graph[m] for m in masks if graph.get(m) is not None},
        }
        targets = targets if targets is not None else graph.get("targets")
    else:
        try:
            found = graph_arrays(graph)
        except TypeError:
            raise TypeError(
                f"train() takes a PyG Data, a DGL graph or a dict of arrays, not "
                f"{type(graph).__name__}"
            ) from None
        arrays = {
            "edge_index": found["edge_index"],
            "features": found["x"],
            "labels": found["y"],
            "masks": {m: found[m] for m in masks if found[m] is not None},
        }
    if isinstance(targets, str) and targets == "y":  # the graph's own y holds the targets
        arrays["targets"], arrays["labels"] = arrays["labels"], None
    elif targets is not None:
        arrays["targets"] = targets
    # no labels: a graph for link prediction or node regression (node classification on it is
    # refused at plan time in one line)
    missing = [k for k in ("edge_index", "features") if arrays[k] is None]
    if missing:
        raise ValueError(f"the graph has no {', '.join(missing)} (give edge_index and features/x)")
    return arrays


def _link_split(graph) -> Tuple[Any, Optional[Dict[str, Any]]]:
    """(the graph to ingest, its held-out link prediction edges or None) of a PyG link split: the
    (train, val, test) Data triple ``RandomLinkSplit`` returns (the train Data's edge_index passes
    messages; each split's positive ``edge_label_index`` is scored), or a Data with
    ``train_pos_edge_index`` and ``val_pos_edge_index``/``test_pos_edge_index``."""
    from gnntrain.data.edge_split import HELD_OUT

    if isinstance(graph, (tuple, list)) and len(graph) == 3:
        train_data, val_data, test_data = graph
        if all(hasattr(d, "edge_label_index") for d in (val_data, test_data)):
            held = {}
            for name, d in (("val", val_data), ("test", test_data)):
                label = getattr(d, "edge_label", None)
                held[name] = (
                    d.edge_label_index if label is None else d.edge_label_index[:, label > 0]
                )
            return train_data, held
    if getattr(graph, "train_pos_edge_index", None) is not None:
        arrays = {
            "edge_index": graph.train_pos_edge_index,
            "x": getattr(graph, "x", None),
            "y": getattr(graph, "y", None),
        }
        held = {
            name: getattr(graph, f"{name}_pos_edge_index")
            for name in HELD_OUT
            if getattr(graph, f"{name}_pos_edge_index", None) is not None
        }
        return arrays, held
    return graph, None


def ingest_graph(
    graph, out: Optional[Path] = None, cache_dir: Optional[Path] = None, targets=None, **options
) -> Path:
    """Write an in-memory graph in the on-disk format; returns its folder.

    Without ``out`` it goes to ``<cache_dir>/ingested/<content digest>`` and is reused when the same
    graph comes again. ``options`` are :class:`gnntrain.data.ingest.IngestOptions` fields
    (symmetrize, split, seed, ...). Regression targets (task=node_regression): ``targets``, an
    (N,) or (N, T) array with NaN where a node has none, or ``"y"``: the graph's own ``y`` holds
    them (then it has no labels, and the masks are drawn among the nodes with a target). A ``y``
    is never taken for targets unasked: a float ``y`` stays labels, refused where not whole."""
    from gnntrain.data import resolve_cache_dir
    from gnntrain.data.ingest import ingest_arrays

    graph, held_out = _link_split(graph)
    arrays = _arrays_of(graph, targets)
    options["targets"] = arrays.get("targets")
    if held_out:  # link prediction's given split: stored with the graph, trained as given
        options["held_out_edges"] = held_out
    if out is not None:
        ingest_arrays(
            Path(out),
            arrays["edge_index"],
            arrays["features"],
            arrays["labels"],
            arrays["masks"],
            **options,
        )
        return Path(out)
    root = resolve_cache_dir({"cache_dir": str(cache_dir) if cache_dir else None}) / "ingested"
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f"incoming-{datetime.datetime.now().strftime('%H%M%S%f')}"
    summary = ingest_arrays(
        staging,
        arrays["edge_index"],
        arrays["features"],
        arrays["labels"],
        arrays["masks"],
        **options,
    )
    final = root / summary["digest"]
    if final.exists():
        shutil.rmtree(staging)
    else:
        staging.rename(final)
    return final


def train(
    graph,
    overrides: Sequence[str] = (),
    run_dir: Optional[Path] = None,
    ingest_options: Optional[Dict[str, Any]] = None,
    task: Optional[str] = None,
) -> RunResult:
    """Train on ``graph`` (a PyG Data, a DGL graph, or a dict with edge_index, features/x, labels/y
    and optional train/val/test masks) with gnntrain overrides, e.g. ``["mode=partition",
    "model=sage"]``.

    The graph is ingested once (symmetrised, self-loops and repeats dropped, masks drawn 0.6/0.2/0.2
    when none are given; ``ingest_options`` changes that) and trained as ``dataset=files``. For
    ``task=node_regression`` among the overrides, the graph's ``y`` holds the targets unless
    ``ingest_options={"targets": t}`` gives them (:func:`ingest_graph`). ``task`` is the same as the
    override ``task=...``. For link prediction, a PyG link split (``RandomLinkSplit``'s (train,
    val, test) triple, or a Data with ``train_pos_edge_index``) keeps its own held-out edges;
    any other graph's edges are split by ``task.edge_split``."""
    overrides = list(overrides)
    if task is not None and not any(o.startswith("task=") for o in overrides):
        overrides.append(f"task={task}")
    ingest_options = dict(ingest_options or {})
    if "task=node_regression" in overrides and ingest_options.get("targets") is None:
        ingest_options["targets"] = "y"
    cache = next((o.split("=", 1)[1] for o in overrides if o.startswith("cache_dir=")), None)
    folder = ingest_graph(graph, cache_dir=Path(cache) if cache else None, **ingest_options)
    return run(["dataset=files", f"dataset.path={folder}"] + overrides, run_dir)


def load_model(run_dir: Path):
    """The model a run trained, as a ``torch.nn.Module``: ``model(data)`` or ``model(x,
    edge_index)`` -> logits; ``model.embeddings(data, layer=k)`` -> hidden representations."""
    from gnntrain.models.export import load_trained_model

    return load_trained_model(Path(run_dir))
