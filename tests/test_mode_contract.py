"""The contract every registered mode keeps, read from the registry (no test lists the modes by
hand): it plans, prepares and trains on a small graph with its own default options, and where its
spec says it is exact (``ModePlanner.is_exact``) its float64 losses equal ``mode=single``'s within
1e-9 (docs/design.md#exactness). A mode that a test registers on the fly is held to the same
contract."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from conftest import EXACT, assert_exact, compose, single_losses

from gnntrain.modes import MODE_REGISTRY

GRAPH = ["dataset=csbm", "model=gcn"]  # the same overrides as test_exactness's csbm/gcn reference
RUN = GRAPH + EXACT
RANKS = ["hardware.ranks_per_node=2"]


def _check_contract(train, mode: str, extra=()) -> dict:
    """Plan, prepare and train ``mode`` with its defaults; exact against single where it says so."""
    from gnntrain.plan import build_plan, plan_mode

    overrides = ["dataset=csbm"] + EXACT + ["model=gcn", f"mode={mode}", *RANKS, *extra]
    plan = build_plan(compose(overrides))
    assert plan.mode == mode and plan.world_size >= 1 and plan.memory_per_rank.total_bytes > 0
    summary = train(overrides)
    assert summary["status"] == "completed", summary.get("error")
    assert summary["mode"] == mode and summary["world_size"] == plan.world_size
    losses = np.asarray(summary["losses"])
    assert losses.shape == (3,) and np.all(np.isfinite(losses))
    if plan_mode(plan).is_exact():
        assert_exact(losses, single_losses(train, RUN))
    else:  # approximate modes still learn the same task: the loss falls and stays near single's
        assert losses[-1] < losses[0] * 1.05, losses
    return summary


@pytest.mark.parametrize("mode", sorted(MODE_REGISTRY))
def test_every_registered_mode_plans_prepares_trains_and_is_exact_where_it_says(train, mode):
    _check_contract(train, mode)


def test_a_mode_registered_on_the_fly_keeps_the_same_contract(train):
    """A new mode is one module plus one YAML: here a spec and a ConfigStore node. It reuses
    single's preparation and rank strategy, so its planner says it is exact, and the contract checks
    that it is."""
    from hydra.core.config_store import ConfigStore

    from gnntrain.config.schema import ModeConfig
    from gnntrain.modes import Capabilities, ModePlanner, ModeSpec, register_mode, single

    @dataclass
    class MirrorConfig(ModeConfig):
        name: str = "mirror"

    class MirrorPlanner(ModePlanner):
        def world_size(self, hardware_world_size: int) -> int:
            return 1  # in this process: a rank started elsewhere would not know a test's mode

    store = ConfigStore.instance()
    register_mode(
        ModeSpec(
            name="mirror",
            options=MirrorConfig,
            planner=MirrorPlanner,
            prepare=single.prepare,
            strategy=single.strategy,
            capabilities=Capabilities(
                part_store=False,
                partitions_graph=False,
                needs_elementwise=False,
                needs_restructurable=False,
                whole_graph_reason="it mirrors mode=single",
            ),
        )
    )
    store.store(group="mode", name="mirror", node={"defaults": ["mirror_schema"]})
    try:
        assert "mirror" in MODE_REGISTRY
        _check_contract(train, "mirror")
    finally:
        MODE_REGISTRY.remove("mirror")
        for entry in ("mirror.yaml", "mirror_schema.yaml"):
            store.repo["mode"].pop(entry, None)


def test_a_second_mode_under_a_taken_name_is_refused():
    """Two modes with one name would train whichever module imported last: refused with one line."""
    from gnntrain.config.schema import ModeConfig
    from gnntrain.modes import Capabilities, ModePlanner, ModeSpec, register_mode
    from gnntrain.registry import DuplicateNameError

    class ImpostorConfig(ModeConfig):
        name: str = "partition"

    impostor = ModeSpec(
        name="partition",
        options=ImpostorConfig,
        capabilities=Capabilities(),
        planner=ModePlanner,
        prepare=lambda *a: None,
        strategy=lambda *a: None,
    )
    with pytest.raises(
        DuplicateNameError,
        match=r"mode 'partition' is registered twice: by .*PartitionConfig "
        r"and by .*ImpostorConfig\. Give one of them another name\.",
    ):
        register_mode(impostor)
    assert MODE_REGISTRY["partition"].planner.__name__ == "PartitionPlanner"
    # the same spec again (a module imported twice): a no-op
    register_mode(MODE_REGISTRY["partition"])


def test_a_second_model_or_generator_under_a_taken_name_is_refused():
    from gnntrain.config.schema import DatasetConfig
    from gnntrain.data.generators import GENERATORS, Generator, register_generator
    from gnntrain.models.registry import MODEL_REGISTRY, ModelFamily, register_model
    from gnntrain.registry import DuplicateNameError

    gcn = MODEL_REGISTRY["gcn"]
    with pytest.raises(DuplicateNameError, match="model 'gcn' is registered twice"):
        register_model(ModelFamily(name="gcn", layer=lambda d_in, d_out: None, normalization="gcn"))
    assert MODEL_REGISTRY["gcn"] is gcn
    csbm = GENERATORS["csbm"]
    with pytest.raises(DuplicateNameError, match="generator 'csbm' is registered twice"):
        register_generator(
            Generator(
                name="csbm",
                config=DatasetConfig,
                blocks=lambda ds: None,
                directed_edges=lambda ds: 0,
            )
        )
    assert GENERATORS["csbm"] is csbm


PRINTED_VARIANTS = {
    "hongtu": [[], ["mode.host_budget=1KiB"], ["mode.direct=true", "hardware.ranks_per_node=1"]],
    "partition": [[], ["mode.replication=2", "hardware.ranks_per_node=4"]],
}


@pytest.mark.parametrize("mode", sorted(MODE_REGISTRY))
def test_a_mode_hands_the_printers_values_not_formatted_text(mode, cache_dir):
    """Text for the terminal is the printers' job: a mode's plan details and graph figures are
    numbers, flags, labels, and lists and mappings of them (bytes under keys that say bytes, times
    under "ms"), never a number already written into a phrase ("3.76 MiB", "2 x 1", "1 CPU + 1
    accelerator")."""
    import re

    from gnntrain.cli.tasks import _load_and_partition
    from gnntrain.modes import ModePlanner
    from gnntrain.plan import build_mode, build_plan

    def phrases(value, where):
        if isinstance(value, dict):
            for key, item in value.items():
                yield from phrases(item, f"{where}.{key}")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                yield from phrases(item, f"{where}[{i}]")
        elif isinstance(value, str) and re.search(r"\d\s|\s\d", value):
            yield f"{where} = {value!r}"

    for extra in PRINTED_VARIANTS.get(mode, [[]]):
        cfg = compose([f"mode={mode}", "dataset.num_nodes=2000", f"cache_dir={cache_dir}", *extra])
        plan = build_plan(cfg)
        # the plan's own line
        details = {k: v for k, v in plan.mode_details.items() if k != "graph per rank"}
        found = list(phrases(details, "details"))
        if MODE_REGISTRY[mode].planner.graph_report is not ModePlanner.graph_report:
            data, part, _ = _load_and_partition(cfg, plan)
            found += phrases(build_mode(cfg).graph_report(data, part, plan) or {}, "graph report")
        assert not found, found


@pytest.mark.parametrize("mode", sorted(MODE_REGISTRY))
def test_every_layout_a_mode_calls_exact_plans_as_exact(mode):
    """A layout in ``Capabilities.exact_layouts`` (which test_exactness's layer-norm check runs)
    plans to a world of its size that the planner says is exact."""
    from gnntrain.plan import build_plan, plan_mode

    for layout in MODE_REGISTRY[mode].capabilities.exact_layouts:
        plan = build_plan(compose(RUN + [f"mode={mode}"] + layout.overrides()))
        assert plan.world_size == layout.ranks and plan_mode(plan).is_exact(), layout
