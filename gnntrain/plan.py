"""The run plan: one frozen :class:`RunPlan` resolved from the composed config and
the hardware profile, validated before any process starts.

The orchestration layer above the modes: after the shared settings' checks
(:mod:`gnntrain.plan_checks`) it asks the chosen mode's planner (its cost model,
``gnntrain/modes/<name>/cost.py``) for its world size, checks, memory and communication
estimates, and fits them to the host (:mod:`gnntrain.plan_fit`). Sizes come from
:mod:`gnntrain.sizing`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Tuple

from omegaconf import DictConfig, OmegaConf

from gnntrain.config.schema import option_value
from gnntrain.errors import PlanError
from gnntrain.models.registry import configured_shape
from gnntrain.modes.cost import DETAIL_LABEL, DETAIL_OPTIONAL, Details, cost_profile, price_estimate
from gnntrain.modes.edge_weights import check_edge_weight
from gnntrain.plan_checks import check_shared_settings
from gnntrain.plan_fit import (
    check_host_memory,
    check_partitioner_memory,
    hosted_task,
    known_partition,
    node_peak_bytes,
    resolve_generated_storage,
    resolve_partitioner,
    store_builds,
    with_task_plan,
)
from gnntrain.plan_types import KNOWN_HALO, MemoryEstimate, PlanContext, RunPlan, RunSettings
from gnntrain.sizing import DTYPE_BYTES, host_cores, host_memory_bytes, model_dims, place_ranks
from gnntrain.tasks import TaskSizes

__all__ = [
    "MemoryEstimate",
    "PlanContext",
    "RunPlan",
    "build_mode",
    "build_plan",
    "details_mapping",
    "plan_mode",
    "resolve_kernel",
    "resolve_reader",
]


def _graph_per_rank(capabilities, world: int) -> str:
    """What each rank holds of the graph (docs/design.md#partition-store)."""
    if capabilities.part_store and world > 1:
        return "its own part, opened from the partition store"
    reason = capabilities.whole_graph_reason
    return "the whole graph" + (f": {reason}" if reason else "")


def resolve_reader(ds) -> str:
    """``dataset.reader`` checked against this install ("" for datasets it does not apply to):
    the reader, with " (auto)" when auto chose it (:func:`gnntrain.data.resolve_reader`)."""
    from gnntrain.data.sources import dataset_source

    if not dataset_source(ds).reader:
        return ""
    from gnntrain.backends import dgl_problem, pyg_install_problem
    from gnntrain.data import resolve_reader as chosen_reader

    requested = option_value(ds.get("reader", "auto"))
    reader = chosen_reader(ds)
    problem = dgl_problem() if reader == "dgl" else pyg_install_problem()
    if problem is not None and reader == "dgl":
        raise PlanError(
            "dataset.reader",
            f"dataset.reader=dgl, but DGL does not import here ({problem}).",
            "install the extra: pip install 'gnntrain[dgl]' (DGL 2.1 needs torch 2.0-2.2), "
            "or read the same files with PyG: dataset.reader=pyg",
        )
    if problem is not None:
        raise PlanError(
            "dataset.reader",
            f"{ds.name} is read with PyG here, which is not installed ({problem}).",
            "pip install torch_geometric, or install the extra gnntrain[dgl] and use "
            "dataset.reader=dgl",
        )
    return reader + (" (auto)" if requested == "auto" else "")


def resolve_kernel(
    cfg, device: str, dtype: str, threads: int, avg_degree: float, width: int
) -> Tuple[str, str]:
    """(kernel, note): ``kernel=dgl|torch`` checked against this install, ``auto`` measured
    (:func:`gnntrain.models.kernel_choice.choose_kernel`, cached per host in the cache dir)."""
    import torch

    from gnntrain.data import resolve_cache_dir
    from gnntrain.models.kernel_choice import choose_kernel
    from gnntrain.models.kernels import kernel_problem

    kernel = option_value(cfg.kernel)
    if kernel != "auto":
        problem = kernel_problem(kernel, device, getattr(torch, dtype))
        if problem is not None:
            others = [k for k in ("auto", "native", "torch", "dgl") if k != kernel]
            raise PlanError(
                "kernel", f"kernel={kernel}: {problem}.", f"use kernel={' or kernel='.join(others)}"
            )
        return kernel, _with_native_build(kernel, f"set by kernel={kernel}")
    # the measurement belongs to the host, not to the data: GNNTRAIN_KERNEL_CACHE_DIR shares it
    # between runs whose cache_dir differs (jobs with private caches, a test session)
    data_cache = resolve_cache_dir(cfg)  # checked either way: a bad cache_dir is a plan error here
    cache = os.environ.get("GNNTRAIN_KERNEL_CACHE_DIR") or data_cache
    try:
        choice = choose_kernel(device, dtype, threads, avg_degree, width, cache)
    except ValueError as exc:
        raise PlanError("kernel", f"{exc}.", "use train.dtype=float32 or float64") from None
    return choice.kernel, _with_native_build(choice.kernel, choice.describe())


def _with_native_build(kernel: str, note: str) -> str:
    """The note, and which build runs kernel=native here (C with its compiler, or numba)."""
    if kernel != "native":
        return note
    from gnntrain.models._native import native_backend

    return f"{note}; native build: {native_backend()}"


# ------------------------------------------------------------------- modes
def build_mode(cfg):
    """The configured mode's planner (:class:`gnntrain.modes.ModePlanner`), built from its own
    options and the run's typed settings: the one place a composed config becomes a mode."""
    from gnntrain.modes import mode_spec

    return mode_spec(cfg["mode"]["name"]).plan(cfg["mode"], RunSettings.of(cfg))


def plan_mode(plan: RunPlan):
    """The planner of a resolved plan's mode, in any process (a rank reads the plan back from
    plan.config)."""
    from gnntrain.modes import mode_spec

    return mode_spec(plan.mode).plan(plan.config["mode"], plan.settings)


# ------------------------------------------------------------------- build
def build_plan(cfg: DictConfig, training: bool = True) -> RunPlan:
    """Resolve and validate; raises PlanError with the offending option. The steps: the settings
    every mode shares, the mode that hosts the model, the world and its parts, the sizes the
    estimates see (:class:`PlanContext`), the mode's checks and estimate, then threads, kernel and
    the prediction. ``training=False`` (``gnntrain partition``: parts are built, nothing trains)
    skips the check that the training estimate fits the host, so that a partition made first lets
    the run's plan size its halo from it (:func:`gnntrain.plan_fit.known_partition`)."""
    from gnntrain.data import dataset_sizes, dataset_targets

    check_shared_settings(cfg)
    n, e, f, c = dataset_sizes(cfg.dataset)
    cfg, partitioner_note = resolve_partitioner(cfg, n, e)
    cfg, construction, dataset_note = resolve_generated_storage(cfg, n, e, f)
    spec, mode, family = _hosting_mode(cfg)
    task, task_options = hosted_task(cfg, spec)
    targets = dataset_targets(cfg.dataset)
    # the GNN's output rows' width
    c = task.output_width(task_options, c, int(cfg.model.hidden), targets)
    t, m, hw, ds = cfg.train, cfg.model, cfg.hardware, cfg.dataset
    device = _device(hw)
    world, num_parts = _world_and_parts(cfg, spec, mode, n)
    if num_parts > 1 and spec.capabilities.partitions_graph:
        check_partitioner_memory(cfg.partitioner, n, e, hw)
    dtype = option_value(t.dtype)
    ctx = _plan_context(cfg, mode, family, world, (n, e, f, c), dtype)
    known = known_partition(cfg, spec, num_parts)
    if known is not None:  # an earlier run's partitioning: its receive volume, not the bound
        ctx = dataclasses.replace(ctx, received_rows=int(known.max_recv_volume))
    warnings: List[str] = list(mode.validate(ctx))

    ranks_per_node = min(world, int(hw.ranks_per_node))
    cores = host_cores(hw)
    threads = max(1, cores // ranks_per_node)
    if world > cores * float(hw.oversubscribe) and int(hw.nodes) == 1:
        warnings.append(
            f"{world} ranks on {cores} cores exceeds the oversubscription limit "
            f"(x{hw.oversubscribe}); expect slow collectives"
        )
    kernel, kernel_note = resolve_kernel(
        cfg, device, dtype, threads, e / max(n, 1), max(ctx.comm_widths)
    )
    config = _with_resolved(
        OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), mode.resolved_options(ctx)
    )
    # memory, work, bytes and exactness: the one estimate the plan prints and prices
    estimate = mode.estimate(ctx)
    memory = store_builds(
        estimate.memory, config, spec, ranks_per_node, world, host_memory_bytes(hw)
    )
    estimate = dataclasses.replace(estimate, memory=memory)
    if training:
        node, when = node_peak_bytes(estimate.memory, ranks_per_node, world)
        if construction > node:  # a generated graph built whole in memory first
            node, when = construction, "while the graph is generated in memory"
        # a mode's own remedy (its disk tier) lowers training's peak, not a build's
        remedy = mode.memory_remedy(ctx) if when == "training" else ""
        check_host_memory(node, hw, ds.name, remedy, when)
    comm = None
    if estimate.comm is not None:
        comm = {
            "per_epoch_bytes": estimate.comm.per_epoch_bytes,
            "by_kind": dict(estimate.comm.by_kind),
            "formula": estimate.comm.formula,
        }
    details = {
        **details_mapping(mode.details(ctx)),
        "graph per rank": _graph_per_rank(spec.capabilities, world),
        **_disk_tier_details(mode, ctx),
        **({KNOWN_HALO: int(ctx.received_rows)} if ctx.received_rows is not None else {}),
    }
    sizes = TaskSizes(n, e, ctx.dims[-1], world, ctx.dtype_bytes, targets)
    comm = with_task_plan(comm, details, task.plan(task_options, sizes))
    cost = cost_profile(hw, threads)
    if cost is not None and world > ranks_per_node:  # collectives cross the link between nodes
        cost = dataclasses.replace(cost, ranks_per_link=ranks_per_node)
    prediction = price_estimate(estimate, cost, spec.name).to_dict() if cost is not None else None
    rank_devices = place_ranks(device, world, ranks_per_node, hw.gpus_per_node, mode.host_ranks)
    rank_threads = mode.rank_threads(rank_devices, ranks_per_node, cores)
    if len(set(rank_threads)) <= 1:
        rank_threads = ()  # even: threads_per_rank says it
    # gloo once a CPU rank joins
    backend = "nccl" if all(d.startswith("cuda") for d in rank_devices) else "gloo"
    return RunPlan(
        mode=spec.name,
        dataset=str(ds.name),
        model=str(m.name),
        partitioner=str(cfg.partitioner.name),
        partitioner_note=partitioner_note,
        dataset_note=dataset_note,
        hardware=str(hw.name),
        world_size=world,
        nodes=int(hw.nodes) if world > 1 else 1,
        ranks_per_node=ranks_per_node,
        backend=backend,
        device=device,
        rank_devices=rank_devices,
        threads_per_rank=threads,
        kernel=kernel,
        kernel_note=kernel_note,
        dtype=dtype,
        epochs=int(t.epochs),
        num_parts=num_parts,
        memory_per_rank=estimate.memory,
        comm_per_epoch=comm,
        mode_details=details,
        warnings=tuple(warnings),
        config=config,
        reader=resolve_reader(ds),
        rank_threads=tuple(rank_threads),
        prediction=prediction,
    )


def details_mapping(details: Details) -> Dict[str, Any]:
    """A mode's :class:`~gnntrain.modes.cost.Details` as the plan's ``mode_details``: its fields in
    order, each under its label (``detail(label=...)``) or its name with spaces for underscores,
    an optional field left out while it is None."""
    mapping: Dict[str, Any] = {}
    for f in dataclasses.fields(details):
        value = getattr(details, f.name)
        if value is None and f.metadata.get(DETAIL_OPTIONAL):
            continue
        mapping[f.metadata.get(DETAIL_LABEL) or f.name.replace("_", " ")] = value
    return mapping


def _disk_tier_details(mode, ctx) -> Dict[str, Any]:
    """The saved-tensor disk tier's line, for the modes that have one and a plan that uses it
    (:class:`gnntrain.modes.saved_tier.SavedTierPlanner`)."""
    tier = getattr(mode, "disk_tier", None)
    figures = tier(ctx) if tier is not None else None
    return {"disk tier": figures} if figures else {}


def _hosting_mode(cfg: DictConfig):
    """(the mode's spec, its planner, the model's family): one PlanError where the model is unknown,
    refuses an option's value, or is one the mode cannot host (naming the models it does host)."""
    from gnntrain.models.registry import MODEL_REGISTRY, model_family
    from gnntrain.modes import mode_spec

    m = cfg.model
    # an unknown model or custom class: one PlanError
    family = model_family(m.name, m.get("target"))
    settings = RunSettings.of(cfg)
    family.check_options(settings.model_options)  # a value the layer refuses: one PlanError
    if cfg.mode.name == "auto":
        raise PlanError(
            "mode",
            "mode=auto picks among the other modes; its plan comes from "
            "gnntrain.auto.resolve_plan.",
        )
    spec = mode_spec(cfg.mode.name)
    can = spec.capabilities
    refusal = can.refuses(family)
    if refusal is not None:
        rule = f" {can.models_rule}" if can.models_rule else ""
        hosted = [name for name, f in sorted(MODEL_REGISTRY.items()) if can.refuses(f) is None]
        raise PlanError(
            "model",
            f"mode '{spec.name}' does not support model '{m.name}': {refusal}.{rule}",
            f"use one of {', '.join(hosted)}",
        )
    check_edge_weight(cfg, spec, family)  # model.edge_weight=true: dataset, model and mode
    return spec, spec.plan(cfg.mode, settings), family


def _device(hw) -> str:
    device = option_value(hw.device)
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise PlanError(
                "hardware.device",
                "the profile asks for CUDA but no CUDA device is available here.",
                "use hardware=local-cpu, or run on a CUDA host",
            )
    return device


def _world_and_parts(cfg: DictConfig, spec, mode, num_nodes: int) -> Tuple[int, int]:
    hw = cfg.hardware
    world = mode.world_size(int(hw.nodes) * int(hw.ranks_per_node))
    if world > num_nodes:
        raise PlanError(
            "world size",
            f"{world} ranks for a graph of {num_nodes} nodes: every rank must own rows.",
            "lower hardware.ranks_per_node",
        )
    num_parts = mode.num_parts(world)
    requested_parts = int(cfg.partitioner.get("num_parts", 0) or 0)
    if requested_parts and requested_parts != num_parts:
        raise PlanError(
            "partitioner.num_parts",
            f"{requested_parts} parts do not match the {num_parts} that "
            f"mode '{spec.name}' needs at world size {world}.",
            "drop partitioner.num_parts or change the world size",
        )
    return world, num_parts


def _plan_context(cfg: DictConfig, mode, family, world: int, sizes, dtype: str) -> PlanContext:
    """The sizes every estimate sees: the graph's, and the model's widths, parameters and update
    work from the one model-shape table, in the mode's layer order."""
    from gnntrain.data.sources import dataset_source

    n, e, f, c = sizes
    m, ds = cfg.model, cfg.dataset
    dims = model_dims(f, int(m.hidden), c, int(m.layers))
    shape = configured_shape(mode.settings, dims, DTYPE_BYTES[dtype], mode.aggregate_first)
    return PlanContext(
        world_size=world,
        num_nodes=n,
        num_edges=e,
        feat_dim=f,
        num_classes=c,
        dtype_bytes=DTYPE_BYTES[dtype],
        dims=tuple(dims),
        comm_widths=tuple(shape.widths),
        param_bytes=shape.param_bytes,
        model=m.name,
        grad_widths=tuple(shape.grad_widths),
        update_macs=shape.update_macs,
        elementwise=family.elementwise,
        settings=mode.settings,
        train_nodes=(
            int(round(n * float(ds.train_fraction))) if dataset_source(ds).config_splits else 0
        ),
    )


def _with_resolved(config: Dict[str, Any], mode_options: Dict[str, Any]) -> Dict[str, Any]:
    """The plan's config with the options the mode resolved at plan time
    (:meth:`ModePlanner.resolved_options`)."""
    config["mode"].update(mode_options)
    return config
