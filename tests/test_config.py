"""Configs compose, every shipped YAML validates against the schema, and bad
keys or values fail at composition with Hydra's own message."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from conftest import CONFIG_DIR, compose

GROUPS = ["dataset", "model", "mode", "partitioner", "hardware"]


def _options(group: str):
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in _options(g)])
def test_every_shipped_yaml_composes_against_its_schema(group, option):
    cfg = compose([f"{group}={option}"])
    assert cfg[group].name == option
    # the node is typed by its schema: unknown keys are refused
    with pytest.raises((ConfigKeyError, AttributeError, ValidationError)):
        cfg[group].this_key_does_not_exist = 1


def test_default_config_is_gcn_on_csbm_with_two_ranks():
    cfg = compose([])
    assert (cfg.dataset.name, cfg.model.name, cfg.mode.name, cfg.hardware.ranks_per_node) == ("csbm", "gcn",
                                                                                               "partition", 2)


@pytest.mark.parametrize("override,fragment", [
    ("train.epochz=3", "epochz"),
    ("mode.bogus=1", "bogus"),
    ("train.epochs=many", "epochs"),
    ("mode.comm=broadcast", "comm"),
    ("train.dtype=float16", "dtype"),
    ("mode=nosuchmode", "nosuchmode"),
    ("dataset=nosuchdata", "nosuchdata"),
])
def test_bad_keys_and_values_fail_at_composition(override, fragment):
    with pytest.raises((ConfigCompositionException, ValidationError, ConfigKeyError)) as info:
        compose([override])
    assert fragment in str(info.value) or fragment in str(info.value.__cause__)


def test_mode_options_are_typed_per_mode():
    """A partition option is not accepted by another mode's schema."""
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose(["mode=single", "mode.comm=sparse"])
    cfg = compose(["mode=partition", "mode.replication=2", "mode.comm=oblivious"])
    assert cfg.mode.replication == 2 and cfg.mode.comm.value == "oblivious"
