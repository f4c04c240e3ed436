"""``gnntrain predict RUN_DIR``: a trained run's predictions or embeddings for every node, computed
with the run's own mode and world size (docs/design.md#predict).

The run's composed config is read back from its ``plan.yaml`` and composed again through Hydra (so
the schema checks it), with the user's overrides on top: ``dataset=files dataset.path=OTHER``
predicts on another graph with the same feature width. Groups the user names are taken from the
user, the rest from the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

from gnntrain.artifact import ArtifactError, read_sealed_text
from gnntrain.errors import GnnTrainError

GROUPS = ("dataset", "model", "mode", "partitioner", "hardware", "task")
EXTENSIONS = {"parquet": ".parquet", "npy": ".npy"}  # per output format


def _split_overrides(overrides: List[str]) -> Tuple[Dict[str, str], List[str]]:
    groups, values = {}, []
    for item in overrides:
        key, _, value = item.partition("=")
        if not _:
            raise GnnTrainError(
                f"predict: {item!r} is not an override (key=value or group=option)."
            )
        if key in GROUPS:
            groups[key] = value
        else:
            values.append(item)
    return groups, values


def predict_config(run_dir: Path, overrides: List[str]):
    """The run's config, recomposed, with ``overrides`` on top."""
    import yaml
    from omegaconf import OmegaConf

    from gnntrain.launch.compose import compose

    plan_path = Path(run_dir) / "plan.yaml"
    if not plan_path.is_file():
        raise GnnTrainError(
            f"predict: {run_dir} has no plan.yaml; give the directory of a finished run "
            f"(it holds plan.yaml, summary.json and model.pt)."
        )
    try:
        config = yaml.safe_load(read_sealed_text(plan_path)).get("config") or {}
    except ArtifactError as exc:
        raise GnnTrainError(
            f"predict: {exc}. Fix: write it again with gnntrain plan, the run's overrides and "
            f"hydra.run.dir={run_dir}."
        ) from None
    groups, values = _split_overrides(overrides)
    choices = [f"{g}={groups.get(g, (config.get(g) or {}).get('name'))}" for g in GROUPS]
    cfg = compose(choices + values)
    kept = {g: config[g] for g in GROUPS if g not in groups and g in config}
    kept.update({k: config[k] for k in ("train", "kernel") if k in config})
    for key in ("path",):  # an ingested graph's path moves with the user's dataset override only
        if "dataset" in kept and "dataset" not in groups:
            kept["dataset"][key] = config["dataset"].get(key)
    cfg = OmegaConf.merge(cfg, kept)
    for item in values:  # the user's key=value overrides win over the run's values
        key, _, value = item.partition("=")
        OmegaConf.update(cfg, key.lstrip("+"), yaml.safe_load(value), merge=True)
    return cfg


def check_weights(run_dir: Path, weights: Path) -> None:
    """The weights predict loads, checked before any rank starts: a run's model.pt against the
    digest in its model.yaml, a checkpoint against its .sha1 sidecar (where it has one)."""
    import hashlib

    from gnntrain.models.export import MODEL_WEIGHTS, read_model_card

    if weights == Path(run_dir) / MODEL_WEIGHTS:
        read_model_card(run_dir)
        return
    sidecar = weights.with_suffix(weights.suffix + ".sha1")
    if sidecar.is_file() and hashlib.sha1(weights.read_bytes()).hexdigest() != (
        sidecar.read_text().strip()
    ):
        raise GnnTrainError(
            f"predict: --checkpoint {weights} does not match its checksum in {sidecar.name} "
            "(truncated or corrupt). Fix: give another checkpoint of the run, or its model.pt."
        )


def predict(
    run_dir: Path,
    what: str = "logits",
    layer: int = 0,
    out: Path = None,
    fmt: str = "parquet",
    checkpoint: Path = None,
    overrides: List[str] = (),
) -> Dict[str, Any]:
    """Run the prediction; returns the predict job's summary (its files: ``out`` and beside it
    ``predict_summary`` in the job's own directory)."""
    from gnntrain.launch.launcher import run_training
    from gnntrain.plan import build_plan

    run_dir = Path(run_dir)
    weights = Path(checkpoint) if checkpoint else run_dir / "model.pt"
    if not weights.is_file():
        raise GnnTrainError(
            f"predict: no weights at {weights}. A run writes model.pt when it completes; give "
            f"--checkpoint FILE to use a checkpoint instead."
        )
    check_weights(run_dir, weights)
    out = Path(out) if out else run_dir / "predictions" / f"{what}{EXTENSIONS[fmt]}"
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg = predict_config(run_dir, list(overrides))
    cfg.predict.out, cfg.predict.checkpoint = str(out), str(weights.resolve())
    cfg.predict.what, cfg.predict.layer, cfg.predict.format = what, int(layer), fmt
    cfg.train.resume = False
    cfg.train.progress = False
    cfg.resume = None
    plan = build_plan(cfg)
    job_dir = out.parent / f".predict-{out.stem}"
    summary = run_training(plan, job_dir)
    if summary.get("status") != "completed":
        raise GnnTrainError(f"predict failed: {summary.get('error')}")
    return summary
