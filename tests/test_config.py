"""Configs compose, every shipped YAML validates against the schema, and bad
keys or values fail at composition with Hydra's own message."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from conftest import CONFIG_DIR, compose
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

GROUPS = ["dataset", "model", "mode", "partitioner", "hardware"]


def _options(group: str):
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


def _schema_class(group: str, option: str) -> type:
    from gnntrain.config import schema
    from gnntrain.data.generators import GENERATORS
    from gnntrain.models import MODEL_REGISTRY
    from gnntrain.modes import MODE_REGISTRY

    # mode=auto is not a mode: it picks one (gnntrain/auto.py), with the base options schema
    if group == "mode":
        return schema.ModeConfig if option == "auto" else MODE_REGISTRY[option].options
    # a model's schema: ModelConfig + its layer's options
    if group == "model" and option != "custom":
        from hydra.core.config_store import ConfigStore

        node = ConfigStore.instance().load(f"model/{option}_schema.yaml").node
        assert issubclass(OmegaConf.get_type(node), schema.ModelConfig)
        assert set(node) - {f.name for f in dataclasses.fields(schema.ModelConfig)} == set(
            MODEL_REGISTRY[option].option_parameters()
        )
        return OmegaConf.get_type(node)
    # a generator's schema: DatasetConfig + its parameters
    if group == "dataset" and option in GENERATORS:
        return GENERATORS[option].config
    return {
        "dataset": schema.DatasetConfig,
        "model": schema.ModelConfig,
        "partitioner": schema.PartitionerConfig,
        "hardware": schema.HardwareConfig,
    }[group]


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in _options(g)])
def test_every_shipped_yaml_composes_against_its_schema(group, option):
    cfg = compose([f"{group}={option}"])
    assert cfg[group].name == option
    assert OmegaConf.get_type(cfg[group]) is _schema_class(group, option)
    # the node is typed by its schema: unknown keys are refused, also with Hydra's struct flag off
    OmegaConf.set_struct(cfg, False)
    with pytest.raises((ConfigKeyError, AttributeError, ValidationError)):
        cfg[group].this_key_does_not_exist = 1


# the schema each YAML must name in its defaults list (mode/<name>.yaml: <name>_schema). A group
# directory missing here fails the test below: give it a schema, then add it.
SCHEMA_OF_GROUP = {
    ".": "run_schema",
    "dataset": "dataset_schema",
    "model": "model_schema",
    "partitioner": "partitioner_schema",
    "hardware": "hardware_schema",
    "hydra/launcher": "submitit_slurm",
}
ALL_YAMLS = sorted(p.relative_to(CONFIG_DIR).as_posix() for p in Path(CONFIG_DIR).rglob("*.yaml"))


@pytest.mark.parametrize("rel", ALL_YAMLS)
def test_every_yaml_names_its_schema(rel):
    """The YAML itself names its schema: the root schema types the group nodes even
    without it, so composing alone cannot tell (gnntrain/config/schema.py: every YAML names one)."""
    from hydra.core.config_store import ConfigStore

    path = Path(CONFIG_DIR) / rel
    group = path.parent.relative_to(CONFIG_DIR).as_posix()
    # several at once (logger=[csv,tensorboard]) merge into one node that the root schema
    if group == "logger":
        # types (LoggerConfig); a schema named by each option would reset the others' blocks to null
        cfg = compose([f"logger={path.stem}"])
        assert (
            OmegaConf.get_type(cfg.logger).__name__ == "LoggerConfig"
            and cfg.logger[path.stem] is not None
        )
        return
    assert group in SCHEMA_OF_GROUP or group in ("mode", "task"), (
        f"{rel}: no known schema for group '{group}'"
    )
    from gnntrain.data.generators import GENERATORS

    own = (
        group in ("mode", "task")
        or (group == "model" and path.stem != "custom")
        or (  # a schema of its own
            group == "dataset" and path.stem in GENERATORS
        )
    )
    expected = f"{path.stem}_schema" if own else SCHEMA_OF_GROUP[group]
    defaults = yaml.safe_load(path.read_text()).get("defaults") or []
    assert expected in defaults, f"{rel}: defaults {defaults} do not name its schema {expected}"
    compose([])  # registers gnntrain's schemas and the launcher plugins' in the ConfigStore
    prefix = "" if group == "." else f"{group}/"
    assert ConfigStore.instance().load(f"{prefix}{expected}.yaml") is not None, (
        f"{expected} is not registered"
    )


def test_default_config_is_gcn_on_csbm_with_two_ranks():
    cfg = compose([])
    assert (cfg.dataset.name, cfg.model.name, cfg.mode.name, cfg.hardware.ranks_per_node) == (
        "csbm",
        "gcn",
        "partition",
        2,
    )


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("train.epochz=3", "epochz"),
        ("mode.bogus=1", "bogus"),
        ("train.epochs=many", "epochs"),
        ("mode.comm=broadcast", "comm"),
        ("mode=supergcn mode.aggregation=both", "aggregation"),
        ("mode=supergcn mode.param_dtype=int8", "param_dtype"),
        ("train.dtype=float16", "dtype"),
        ("mode=nosuchmode", "nosuchmode"),
        ("dataset=nosuchdata", "nosuchdata"),
    ],
)
def test_bad_keys_and_values_fail_at_composition(override, fragment):
    with pytest.raises((ConfigCompositionException, ValidationError, ConfigKeyError)) as info:
        compose(override.split())
    assert fragment in str(info.value) or fragment in str(info.value.__cause__)


def test_mode_options_are_typed_per_mode():
    """A partition option is not accepted by another mode's schema."""
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose(["mode=single", "mode.comm=sparse"])
    cfg = compose(["mode=partition", "mode.replication=2", "mode.comm=oblivious"])
    assert cfg.mode.replication == 2 and cfg.mode.comm.value == "oblivious"


def test_modes_read_typed_options_at_plan_time_and_in_the_ranks():
    """A mode sees its options as its dataclass with enum members, whether built from the composed
    config (plan) or from the plain dict a rank reads back from the plan."""
    from gnntrain.modes.supergcn import Aggregation, SuperGCNConfig
    from gnntrain.plan import build_mode, build_plan, plan_mode

    plan = build_plan(compose(["mode=supergcn", "mode.aggregation=pre"]))
    for mode in (build_mode(compose(["mode=supergcn", "mode.aggregation=pre"])), plan_mode(plan)):
        options = mode.options
        assert isinstance(options, SuperGCNConfig) and options.aggregation is Aggregation.pre
    assert plan.config_obj is plan.config_obj  # built once per plan, not per access


def test_tests_the_api_and_the_cli_compose_with_the_same_search_path(tmp_path, monkeypatch):
    """One composition function: a profile in the user's folder (where ``gnntrain calibrate``
    writes) composes in the tests' ``compose``, in ``gnntrain.api.compose`` and in ``gnntrain plan``
    alike."""
    from conftest import compose, run_cli

    from gnntrain import api

    profiles = tmp_path / "user" / "hardware"
    profiles.mkdir(parents=True)
    (profiles / "mybox.yaml").write_text(
        "defaults:\n  - local-cpu\n  - _self_\nname: mybox\nranks_per_node: 3\n"
    )
    monkeypatch.setenv("GNNTRAIN_USER_CONFIG_DIR", str(tmp_path / "user"))
    for cfg in (compose(["hardware=mybox"]), api.compose(["hardware=mybox"])):
        assert (cfg.hardware.name, cfg.hardware.ranks_per_node) == ("mybox", 3)
    proc = run_cli(
        ["plan", "hardware=mybox", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        timeout=120,
        env_extra={"GNNTRAIN_USER_CONFIG_DIR": str(tmp_path / "user")},
    )
    assert proc.returncode == 0, proc.stderr
    assert "world_size: 3" in (tmp_path / "run" / "plan.yaml").read_text()
