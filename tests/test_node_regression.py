"""task=node_regression: exact in every mode that hosts it, metrics in the targets' units that a
plain session recomputes, predictions in the targets' units, one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import EXACT, assert_exact, compose, requires_shared

from gnntrain.errors import PlanError
from gnntrain.modes import MODE_REGISTRY

REG = ["task=node_regression", "dataset.regression_targets=2", "model.hidden=8"]
SMALL = ["dataset=csbm", "dataset.num_nodes=300"]
HOSTS = sorted(n for n, s in MODE_REGISTRY.items() if not s.capabilities.tasks and n != "single")


def _exact_options(mode: str):
    from gnntrain.plan import build_plan, plan_mode

    for variant in ({},) + tuple(MODE_REGISTRY[mode].capabilities.auto_variants):
        extra = [f"mode.{k}={v}" for k, v in variant.items()]
        if plan_mode(
            build_plan(compose(SMALL + EXACT + REG + [f"mode={mode}", *extra]))
        ).is_exact():
            return extra
    raise AssertionError(f"{mode} has no exact option set")


@pytest.mark.parametrize("mode", HOSTS)
def test_every_mode_that_hosts_it_equals_single(train, mode):
    ref = train(SMALL + EXACT + REG + ["mode=single"])
    s = train(
        SMALL + EXACT + REG + [f"mode={mode}", "hardware.ranks_per_node=2"] + _exact_options(mode)
    )
    assert s["status"] == "completed", s.get("error")
    assert_exact(s["losses"], ref["losses"])
    for split in ("train", "val", "test"):
        for name, value in ref["metrics"][split].items():
            assert s["metrics"][split][name] == pytest.approx(value, rel=1e-9), (split, name)


@pytest.fixture(scope="module")
def cora_with_targets(cora, tmp_path_factory):
    """Cora ingested with two regression targets (a noisy function of class and features, as
    dataset.regression_targets draws them): Cora itself has none."""
    from gnntrain.data.generators.targets import synthetic_targets
    from gnntrain.data.ingest import ingest_arrays

    out = tmp_path_factory.mktemp("cora-targets") / "g"
    targets = synthetic_targets(cora.labels, cora.features, 2, 0)
    edges = torch.stack([cora.src, cora.dst])
    ingest_arrays(out, edges, cora.features, cora.labels, cora.masks, targets=targets)
    return ["dataset=files", f"dataset.path={out}", "task=node_regression", "model.hidden=8"]


@pytest.mark.slow
@pytest.mark.parametrize("graph", ["csbm", pytest.param("cora", marks=requires_shared)])
@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("mode", HOSTS)
def test_the_whole_matrix_equals_single(train, mode, p, graph, request):
    """Every hosting mode, csbm and Cora (ingested with targets), p = 2 and 3."""
    base = SMALL + REG if graph == "csbm" else request.getfixturevalue("cora_with_targets")
    ref = train(base + EXACT + ["mode=single"])
    extra = [f"mode={mode}", f"hardware.ranks_per_node={p}"] + _exact_options(mode)
    assert_exact(train(base + EXACT + extra)["losses"], ref["losses"])


def test_metrics_and_predictions_are_in_the_targets_units(tmp_path, cache_dir):
    """RMSE, MAE and R² from the summary equal those a plain session computes with the exported
    model's values(); gnntrain predict --what values writes the same values."""
    from gnntrain.api import load_model
    from gnntrain.data import load_dataset
    from gnntrain.launch import run_training
    from gnntrain.launch.predict import predict
    from gnntrain.plan import build_plan

    cfg = compose(SMALL + REG + [f"cache_dir={cache_dir}", "train.epochs=30", "mode=single"])
    cfg.train.progress = False
    run, plan = tmp_path / "run", build_plan(cfg)
    summary = run_training(plan, run)
    plan.write_yaml(run / "plan.yaml")
    data = load_dataset(cfg)
    model = load_model(run)
    with torch.no_grad():
        values = model.values(data.features, torch.stack([data.src, data.dst])).double()
    y = data.targets.double()
    test = data.test_mask
    err = values[test] - y[test]
    got = summary["metrics"]["test"]
    assert got["rmse"] == pytest.approx(float(err.pow(2).mean().sqrt()), rel=1e-5)
    assert got["mae"] == pytest.approx(float(err.abs().mean()), rel=1e-5)
    r2 = 1 - err.pow(2).sum(0) / (y[test] - y[test].mean(0)).pow(2).sum(0)
    assert got["r2"] == pytest.approx(float(r2.mean()), rel=1e-4, abs=1e-6)
    assert summary["metrics"]["train"]["rmse"] < float(y.std())  # it learned something
    predict(run, "values", 0, tmp_path / "v.npy", "npy", overrides=[f"cache_dir={cache_dir}"])
    assert np.allclose(np.load(tmp_path / "v.npy"), values.numpy(), rtol=1e-4, atol=1e-5)


def test_a_dataset_without_targets_and_a_mode_that_cannot_host_it_are_one_line():
    from gnntrain.plan import build_plan

    with pytest.raises(PlanError, match=r"^task: the dataset has no regression targets"):
        build_plan(compose(SMALL + ["task=node_regression", "mode=single"]))
    with pytest.raises(PlanError, match=r"^task: mode 'hyscale' cannot host task 'node_regr"):
        build_plan(compose(SMALL + REG + ["mode=hyscale"]))
