"""The run plan resolves sizes and estimates, and rejects impossible plans
with one message naming the option -- through the API and the CLI. Its
byte figures against the bytes a run moves: test_plan_comm.py."""

from __future__ import annotations

import dataclasses
import socket

import pytest
from conftest import compose, run_cli

from gnntrain.errors import PlanError
from gnntrain.plan import build_plan


def test_default_plan_fields():
    plan = build_plan(compose([]))
    assert plan.world_size == 2 and plan.backend == "gloo" and plan.device == "cpu"
    assert plan.rank_devices == ("cpu", "cpu") and plan.threads_per_rank >= 1
    assert plan.memory_per_rank.total_bytes > plan.memory_per_rank.feature_bytes > 0
    assert plan.num_parts == 2 and plan.kernel in ("dgl", "native", "torch")


def test_single_always_runs_one_process():
    plan = build_plan(compose(["mode=single", "hardware.ranks_per_node=4"]))
    assert plan.world_size == 1 and plan.num_parts == 1


@pytest.mark.parametrize(
    "overrides,option",
    [
        (["train.epochs=-1"], "train.epochs"),
        (["train.epochs=0"], "train.epochs"),
        (["train.lr=0"], "train.lr"),
        (["hardware.ranks_per_node=0"], "hardware"),
        (["hardware.ranks_per_node=3", "mode.replication=2"], "mode.replication"),  # p % c
        # c^2 does not divide p
        (["hardware.ranks_per_node=6", "mode.replication=2"], "mode.replication"),
        # more ranks than nodes
        (["hardware.ranks_per_node=8", "dataset.num_nodes=5"], "world size"),
        (["partitioner.num_parts=3"], "partitioner.num_parts"),  # world size != partition count
        (["port=70000"], "port"),
        (["mode=hyscale", "mode.batch_size=1"], "mode.batch_size"),  # fewer seeds than trainers
        (["hardware=gpu-1"], "hardware.device"),  # CUDA profile on a host without CUDA
        # does not fit memory
        (["dataset=reddit", "hardware.host_memory_gb=0.5"], "dataset/hardware"),
        (["model.dropout=1.0"], "model.dropout"),
    ],
)
def test_invalid_plans_name_the_option(overrides, option):
    import torch

    if "hardware=gpu-1" in overrides and torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    with pytest.raises(PlanError) as info:
        build_plan(compose(overrides))
    assert info.value.option.startswith(option)


def test_a_registered_mode_plugs_into_composition_and_the_plan(monkeypatch):
    """A new mode is one module: ``register_mode`` puts it in the registry and its options
    schema in Hydra's ConfigStore (mode/<name>_schema), and the plan asks the mode's own
    hooks for the world size, warnings and memory estimate."""
    from dataclasses import dataclass

    from hydra.core.config_store import ConfigStore
    from hydra.errors import ConfigCompositionException

    from gnntrain.config.schema import ModeConfig
    from gnntrain.modes import MODE_REGISTRY, Capabilities, ModePlanner, ModeSpec, register_mode
    from gnntrain.plan_types import MemoryEstimate

    @dataclass
    class ToyConfig(ModeConfig):
        name: str = "toy"
        factor: int = 2

    class ToyPlanner(ModePlanner):
        def world_size(self, hardware_world_size):
            return 1

        def validate(self, ctx):
            return [f"toy factor {self.options.factor}"]

        def estimate_memory(self, ctx):
            return MemoryEstimate(graph_bytes=7, feature_bytes=0, activation_bytes=0)

    store = ConfigStore.instance()
    # removed again after the test
    register_mode(
        ModeSpec(
            name="toy",
            options=ToyConfig,
            capabilities=Capabilities(),
            planner=ToyPlanner,
            prepare=lambda *a: None,
            strategy=lambda *a: None,
        )
    )
    try:
        assert "toy_schema.yaml" in store.repo["mode"]
        store.store(group="mode", name="toy", node={"defaults": ["toy_schema"], "factor": 3})
        plan = build_plan(compose(["mode=toy", "hardware.ranks_per_node=2"]))
        assert (plan.mode, plan.world_size) == ("toy", 1)
        assert "toy factor 3" in plan.warnings
        assert plan.memory_per_rank.total_bytes == 7
        with pytest.raises(ConfigCompositionException):
            compose(["mode=toy", "mode.not_an_option=1"])
    finally:
        MODE_REGISTRY.remove("toy")
        for entry in ("toy.yaml", "toy_schema.yaml"):
            store.repo["mode"].pop(entry, None)


def test_port_in_use_is_refused():
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(PlanError, match="already in use"):
            build_plan(compose([f"port={port}"]))


@pytest.mark.parametrize(
    "args,needle",
    [
        (["train.epochs=-3"], "train.epochs"),
        (["hardware.ranks_per_node=6", "mode.replication=2"], "c^2"),
        (
            ["dataset.num_nodes=3", "dataset.avg_degree=2", "hardware.ranks_per_node=4"],
            "world size",
        ),
        (["mode=hongtu", "mode.device_memory=1KiB"], "mode.device_memory"),
        (["mode=supergcn", "mode.bits=3"], "mode.bits"),
    ],
)
def test_plan_cli_rejects_with_one_message(tmp_path, args, needle):
    proc = run_cli(["plan", f"hydra.run.dir={tmp_path}"] + args, cwd=tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert needle in out and "Traceback" not in out


def test_plan_cli_writes_plan_yaml(tmp_path):
    proc = run_cli(
        ["plan", f"hydra.run.dir={tmp_path}", "mode.comm=oblivious"], cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "plan.yaml").read_text()
    assert "world_size: 2" in text and "memory_per_rank" in text and "allgather" in text


@pytest.mark.parametrize(
    "args,needle", [(["mode=nosuchmode"], "nosuchmode"), (["train.epochz=1"], "epochz")]
)
def test_cli_composition_errors_are_one_message(tmp_path, args, needle):
    proc = run_cli(["plan", f"hydra.run.dir={tmp_path}"] + args, cwd=tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and needle in out and "Traceback" not in out


def test_oversubscription_warns_but_plans():
    plan = build_plan(
        compose(
            ["hardware.cores_per_node=1", "hardware.ranks_per_node=4", "hardware.oversubscribe=2"]
        )
    )
    assert plan.world_size == 4 and any("oversubscription" in w for w in plan.warnings)
    assert plan.threads_per_rank == 1


@pytest.mark.parametrize(
    "overrides,option",
    [
        (["dataset.feat_dim=-5"], "dataset.feat_dim"),
        (["dataset.feat_dim=0"], "dataset.feat_dim"),
        (["dataset.num_nodes=0"], "dataset.num_nodes"),
        (["dataset.num_classes=1"], "dataset.num_classes"),
        (["dataset=rmat", "dataset.num_edges=0"], "dataset.num_edges"),
        (["dataset.avg_degree=0"], "dataset.avg_degree"),
        (["dataset.avg_degree=-1.5"], "dataset.avg_degree"),
        (["dataset.avg_degree=nan"], "dataset.avg_degree"),
        (["dataset.intra_ratio=1.2"], "dataset.intra_ratio"),
        (["dataset.intra_ratio=-0.1"], "dataset.intra_ratio"),
        (["dataset.feature_snr=-1"], "dataset.feature_snr"),
        (["dataset.seed=-1"], "dataset.seed"),
        (["dataset.val_fraction=1.5"], "dataset.val_fraction"),
        (["dataset.train_fraction=-0.1"], "dataset.train_fraction"),
        (
            ["dataset.train_fraction=0.5", "dataset.val_fraction=0.3", "dataset.test_fraction=0.3"],
            "dataset.train_fraction",
        ),
        (["dataset=rmat", "dataset.rmat_abcd=[0.5,0.5,0.5,0.1]"], "dataset.rmat_abcd"),
        (["dataset=rmat", "dataset.rmat_abcd=[0.5,0.5]"], "dataset.rmat_abcd"),
        (["dataset=rmat", "dataset.rmat_abcd=[1.2,-0.2,0,0]"], "dataset.rmat_abcd"),
        # published sizes size the plan too
        (["dataset=cora", "dataset.feat_dim=-1"], "dataset.feat_dim"),
    ],
)
def test_bad_dataset_values_are_plan_errors(overrides, option):
    from gnntrain.data import check_dataset_config

    cfg = compose(overrides)
    with pytest.raises(PlanError) as info:
        check_dataset_config(cfg.dataset)
    assert info.value.option.startswith(option) and info.value.fix
    with pytest.raises(PlanError) as info:
        build_plan(cfg)
    assert info.value.option.startswith(option)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["dataset=rmat"],
        ["dataset=cora"],
        ["dataset.intra_ratio=0"],
        ["dataset.intra_ratio=1"],
        ["dataset.feature_snr=0"],
        ["dataset.train_fraction=0.4", "dataset.val_fraction=0.2", "dataset.test_fraction=0.4"],
        ["dataset=rmat", "dataset.rmat_abcd=[0.25,0.25,0.25,0.25]"],
        ["dataset=rmat", "dataset.rmat_abcd=[1,0,0,0]"],
    ],
)
def test_good_dataset_values_pass_the_checks(overrides):
    from gnntrain.data import check_dataset_config

    check_dataset_config(compose(overrides).dataset)


HOSTED = {
    "single": {"gcn", "sage", "gin", "gat", "gcn_rw"},
    "partition": {"gcn", "sage", "gin", "gcn_rw"},
    "supergcn": {"gcn", "sage", "gin", "gcn_rw"},
    "mop": {"gcn", "sage", "gin", "gcn_rw"},
    "hongtu": {"gcn", "sage", "gin", "gat", "gcn_rw"},
    "hyscale": {"gcn", "sage", "gin", "gcn_rw"},
}


@pytest.mark.parametrize("mode", sorted(HOSTED))
def test_modes_host_the_models_their_needs_allow_and_refuse_the_rest_in_one_line(mode):
    """No mode names a model: each states what a model's family must offer (elementwise aggregation,
    the built-in layer protocol) and the registry's families decide; a refusal is one line naming
    the mode, the model, why, and the models the mode does host."""
    from gnntrain.models import MODEL_REGISTRY

    for model in sorted(MODEL_REGISTRY):
        overrides = [f"mode={mode}", f"model={model}", "dataset.num_nodes=500"]
        if model in HOSTED[mode]:
            assert build_plan(compose(overrides)).model == model
            continue
        with pytest.raises(PlanError) as refused:
            build_plan(compose(overrides))
        text = str(refused.value)
        assert f"mode '{mode}' does not support model '{model}'" in text and "\n" not in text
        assert all(name in text for name in HOSTED[mode])
    with pytest.raises(PlanError, match="unknown model 'gcnn'.*gcn_rw"):
        build_plan(compose([f"mode={mode}", "model=gcn", "model.name=gcnn"]))


def test_a_model_option_is_its_layers_constructor_argument(train):
    """GIN's ε: ``model.eps_learnable`` is GINLayer's constructor argument, typed and defaulted by
    its signature (nothing in the shared ModelConfig); composition checks it, and it reaches the
    layers."""
    from hydra.errors import ConfigCompositionException

    from gnntrain.config.schema import ModelConfig
    from gnntrain.models.gin import GINLayer
    from gnntrain.models.registry import MODEL_REGISTRY

    assert "eps_learnable" not in {f.name for f in dataclasses.fields(ModelConfig)}
    assert set(MODEL_REGISTRY["gin"].option_parameters()) == {"eps_learnable"}
    with pytest.raises(ConfigCompositionException):
        compose(["model=gin", "model.eps_learnable=maybe"])
    with pytest.raises(ConfigCompositionException):
        compose(["model=gcn", "model.eps_learnable=false"])  # not a GCN option
    runs = {}
    for learnable in ("true", "false"):
        run = [
            "dataset=csbm",
            "mode=single",
            "model=gin",
            "train.epochs=2",
            f"model.eps_learnable={learnable}",
        ]
        assert build_plan(compose(run)).settings.model_options == {
            "eps_learnable": learnable == "true"
        }
        runs[learnable] = train(run)
    # GIN-0 (ε fixed) trains one parameter fewer per layer, so the two runs differ from the second
    # epoch
    assert runs["true"]["losses"][0] == runs["false"]["losses"][0]
    assert runs["true"]["losses"][1] != runs["false"]["losses"][1]
    layer = MODEL_REGISTRY["gin"].build(4, 3, None, {"eps_learnable": False})
    assert isinstance(layer, GINLayer) and "eps" not in dict(layer.named_parameters())
    with pytest.raises(PlanError, match=r"^model\.heads: 2 heads"):
        build_plan(compose(["mode=single", "model=gat", "model.heads=2"]))


def test_a_refusal_names_the_disk_tier_only_where_the_tables_are_not_there_yet():
    """A refusal for host memory names the mode's own remedy first (ModePlanner.memory_remedy):
    HongTu with a budget that keeps tables in memory is pointed at a smaller mode.host_budget; with
    every vertex table on disk already (mode.host_budget=0, or unset and resolved to 0 by the
    plan) at the direct path, not at the option it has; any other mode at HongTu's disk tier."""
    big = ["dataset=csbm", "dataset.num_nodes=2000000", "dataset.feat_dim=128", "mode=hongtu"]
    tight = ["hardware.ranks_per_node=2", "hardware.host_memory_gb=1"]
    with pytest.raises(PlanError, match="Fix: use mode.host_budget=<bytes>"):
        build_plan(compose(big + tight + ["mode.host_budget=8GiB"]))
    for budget in (["mode.host_budget=0"], []):
        with pytest.raises(
            PlanError, match=r"Fix: use mode.direct=true on one CPU rank"
        ) as refused:
            build_plan(compose(big + tight + budget))
        assert "mode.host_budget" not in str(refused.value), budget
    with pytest.raises(PlanError, match=r"Fix: use mode=hongtu with mode.host_budget=<bytes>"):
        build_plan(compose(big[:-1] + ["mode=mop"] + tight))
