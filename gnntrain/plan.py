"""The run plan: one frozen :class:`RunPlan` resolved from the composed config and
the hardware profile, validated before any process starts.

The orchestration layer above the modes: it asks the chosen mode (through its
:class:`gnntrain.modes.Mode` hooks) for its world size, checks, memory and
communication estimates. Sizes come from :mod:`gnntrain.sizing`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import Any, Dict, List, Tuple

from omegaconf import DictConfig, OmegaConf

from gnntrain.config.schema import option_value, unknown_keys
from gnntrain.data.checks import MAX_WIDTH
from gnntrain.errors import PlanError
from gnntrain.models.registry import configured_shape
from gnntrain.modes.cost import (
    DETAIL_LABEL,
    DETAIL_OPTIONAL,
    Details,
    check_profile,
    cost_profile,
    price_estimate,
)
from gnntrain.modes.edge_weights import check_edge_weight
from gnntrain.plan_fit import (
    check_host_memory,
    check_partitioner_memory,
    hosted_task,
    known_partition,
    resolve_generated_storage,
    resolve_partitioner,
    with_task_plan,
)
from gnntrain.plan_types import KNOWN_HALO, MemoryEstimate, PlanContext, RunPlan, RunSettings
from gnntrain.sizing import DTYPE_BYTES, host_cores, model_dims
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


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


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
    from gnntrain.backends import dgl_problem, pyg_problem
    from gnntrain.data import resolve_reader as chosen_reader

    requested = option_value(ds.get("reader", "auto"))
    reader = chosen_reader(ds)
    problem = dgl_problem() if reader == "dgl" else pyg_problem()
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
            f"{ds.name} is read with PyG here, which does not import ({problem}).",
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

    _check_shared_settings(cfg)
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
    # memory, work, bytes and exactness: the one estimate the plan prints and prices
    estimate = mode.estimate(ctx)
    if training:
        check_host_memory(
            max(estimate.memory.total_bytes * ranks_per_node, construction), hw, ds.name, spec.name
        )
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
    rank_devices = mode.rank_devices(device, world, ranks_per_node)
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
        config=_with_resolved(
            OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), mode.resolved_options(ctx)
        ),
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


def _refuse_appended_keys(cfg: DictConfig) -> None:
    """A key appended with +key=value onto a structured config: nothing would read it."""
    extra = unknown_keys(cfg)
    if not extra:
        return
    import difflib

    key, valid = extra[0]
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], valid, n=3)
    parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
    hint = (
        f"did you mean {', '.join(parent + c for c in close)}?"
        if close
        else f"valid keys there: {', '.join(valid)}"
    )
    raise PlanError(
        key,
        "is not an option (appended with +, it would be ignored).",
        f"{hint} Set existing keys without '+'.",
    )


MAX_LAYERS = (
    10_000  # model.layers: the plan sizes each one (100 000 took 12 s; 2^31 ran out of memory)
)


def _check_shared_settings(cfg: DictConfig) -> None:
    """The settings every mode shares: dataset, training, model, port and hardware (one PlanError
    naming the option)."""
    from gnntrain.data import check_dataset_config
    from gnntrain.data.sources import dataset_source
    from gnntrain.metrics.trackers import check_installed

    _refuse_appended_keys(cfg)
    t, m, hw, ds = cfg.train, cfg.model, cfg.hardware, cfg.dataset
    fill_sizes = dataset_source(ds).fill_sizes
    if fill_sizes is not None:
        fill_sizes(cfg)  # e.g. an ingested graph's own sizes, before anything is sized or checked
    check_dataset_config(ds)  # sizes, ratios and fractions a generator or the estimates can use
    _check_training(t)
    if int(m.layers) < 1 or int(m.hidden) < 1:
        raise PlanError("model.layers/model.hidden", "must both be at least 1.")
    # the plan describes every layer (gnntrain.models.registry.describe_model): bounded work
    if int(m.layers) > MAX_LAYERS or int(m.hidden) > MAX_WIDTH:
        raise PlanError(
            "model.layers/model.hidden",
            f"at most {MAX_LAYERS} layers of at most {MAX_WIDTH} columns (got {m.layers} x "
            f"{m.hidden}).",
            "set model.layers and model.hidden within those bounds",
        )
    if not 0.0 <= float(m.dropout) < 1.0:
        raise PlanError("model.dropout", f"must lie in [0, 1) (got {m.dropout}).")
    if not 0 <= int(cfg.port) <= 65535:
        raise PlanError(
            "port", f"{cfg.port} is outside 0..65535.", "use port=0 to pick a free port"
        )
    if int(cfg.port) and port_in_use(int(cfg.port)):
        raise PlanError(
            "port",
            f"port {cfg.port} is already in use on this host.",
            "use port=0 to pick a free port, or free that port",
        )
    if float(cfg.comm_timeout_s) <= 0:
        raise PlanError("comm_timeout_s", "must be > 0 seconds.")
    if int(hw.nodes) < 1 or int(hw.ranks_per_node) < 1:
        raise PlanError(
            "hardware.nodes/hardware.ranks_per_node",
            f"world size must be at least 1 (got {hw.nodes} x {hw.ranks_per_node}).",
            "set hardware.ranks_per_node=N with N >= 1",
        )
    check_profile(hw)
    check_installed(cfg)


def _check_training(t) -> None:
    if int(t.epochs) < 1:
        raise PlanError(
            "train.epochs",
            f"must be at least 1 (got {t.epochs}).",
            "set train.epochs=N with N >= 1",
        )
    if float(t.lr) <= 0:
        raise PlanError(
            "train.lr",
            f"learning rate must be > 0 (got {t.lr}).",
            "set train.lr to a positive value",
        )
    if float(t.weight_decay) < 0:
        raise PlanError("train.weight_decay", f"must be >= 0 (got {t.weight_decay}).")
    if int(t.eval_every) < 1:
        raise PlanError("train.eval_every", f"must be at least 1 (got {t.eval_every}).")
    if int(t.checkpoint_every) < 0:
        raise PlanError("train.checkpoint_every", f"must be >= 0 (got {t.checkpoint_every}).")
    if int(t.get("keep_checkpoints", 0)) < 0:
        raise PlanError(
            "train.keep_checkpoints", f"must be >= 0 (got {t.keep_checkpoints}; 0 keeps every one)."
        )


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
