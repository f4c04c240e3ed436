"""The plan's types: what a mode, a rank and the plan builder pass between them.

:class:`RunSettings` is the typed view of the composed config that the modes read (the model,
training, hardware, partitioner, dataset and predict sections as their schema dataclasses), so no
mode handles the composed config itself. :class:`PlanContext` adds the sizes known before any data
is loaded; :class:`RunPlan` is the resolved, validated plan (built by
:func:`gnntrain.plan.build_plan`). This module imports only the config schema: every layer above may
read these types.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Type, TypeVar

from omegaconf import DictConfig, OmegaConf

from gnntrain.config.schema import (
    DatasetConfig,
    HardwareConfig,
    ModelConfig,
    PartitionerConfig,
    PredictConfig,
    TrainConfig,
    option_value,
)
from gnntrain.errors import PlanError

T = TypeVar("T")

# the node splits every task evaluates, in the order of the evaluation sums and metric records
SPLITS = ("train", "val", "test")


TYPE_FIX = "give the key a value of its type (an interpolation ${...} must resolve to one)"


def plain_section(section: Any) -> Dict[str, Any]:
    """A config section (a DictConfig, or a plain dict as a rank's ``plan.config`` holds it) as a
    plain, resolved dict; an interpolation that does not resolve is a PlanError naming its key."""
    from omegaconf.errors import InterpolationResolutionError

    if OmegaConf.is_config(section):
        try:
            return OmegaConf.to_container(section, resolve=True)
        except InterpolationResolutionError as exc:
            raise PlanError(str(exc.full_key), f"{_first_line(exc)}.", TYPE_FIX) from None
    return dict(section)


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).splitlines()[0].split()).rstrip(".")


@functools.lru_cache(maxsize=None)
def schema_template(schema: type) -> Any:
    """``OmegaConf.structured(schema)``, made once per schema, to merge a section into: a plan types
    about 18 sections, and making the template is two thirds of each (``OmegaConf.merge`` copies
    it, never changes it)."""
    return OmegaConf.structured(schema)


def typed_section(schema: Type[T], section: Any, name: str = "") -> T:
    """One config section as an instance of its schema dataclass: enums as members, lists as
    lists. ``name``: the section's key, for the PlanError on a value of the wrong type (one an
    interpolation gave: Hydra checks the others as it composes)."""
    from omegaconf.errors import ValidationError

    try:
        merged = OmegaConf.merge(schema_template(schema), plain_section(section))
        return OmegaConf.to_object(merged)
    except ValidationError as exc:
        key = ".".join(k for k in (name, str(exc.full_key or "")) if k) or schema.__name__
        raise PlanError(key, f"{_first_line(exc)}.", TYPE_FIX) from None


def split_section(schema: Type[T], section: Any, name: str = "") -> Tuple[T, Dict[str, Any]]:
    """(the fields of ``schema`` typed, the section's other keys): a section whose schema extends
    ``schema`` with a plug-in's own options (a model's layer arguments, a generator's
    parameters)."""
    values = plain_section(section)
    shared = {f.name for f in fields(schema)}
    return (
        typed_section(schema, {k: v for k, v in values.items() if k in shared}, name),
        {k: v for k, v in values.items() if k not in shared},
    )


@dataclass(frozen=True)
class RunSettings:
    """The run's settings that modes and rank-side code read, typed (``RunSettings.of(cfg)``)."""

    model: ModelConfig
    train: TrainConfig
    hardware: HardwareConfig
    partitioner: PartitionerConfig
    dataset: DatasetConfig
    predict: Optional[PredictConfig] = None
    cache_dir: Optional[str] = None  # as configured; gnntrain.data.cache_folder resolves it
    # the model's own options (its layer's constructor arguments,
    # gnntrain.models.registry.ModelFamily)
    model_options: Dict[str, Any] = field(default_factory=dict)
    # a generated dataset's own parameters (gnntrain.data.generators.Generator.config)
    dataset_options: Dict[str, Any] = field(default_factory=dict)
    # the task section as composed (gnntrain.tasks.configured_task types it); None: the default
    task: Optional[Dict[str, Any]] = None

    @classmethod
    def of(cls, cfg: Mapping[str, Any]) -> "RunSettings":
        predict = cfg.get("predict")
        model, model_options = split_section(ModelConfig, cfg["model"], "model")
        dataset, dataset_options = split_section(DatasetConfig, cfg["dataset"], "dataset")
        return cls(
            model=model,
            model_options=model_options,
            dataset=dataset,
            dataset_options=dataset_options,
            train=typed_section(TrainConfig, cfg["train"], "train"),
            hardware=typed_section(HardwareConfig, cfg["hardware"], "hardware"),
            partitioner=typed_section(PartitionerConfig, cfg["partitioner"], "partitioner"),
            predict=None if predict is None else typed_section(PredictConfig, predict, "predict"),
            cache_dir=cfg.get("cache_dir"),
            task=plain_section(cfg["task"]) if cfg.get("task") is not None else None,
        )

    @property
    def device(self) -> str:
        return str(option_value(self.hardware.device))

    @property
    def dtype(self) -> str:
        return str(option_value(self.train.dtype))

    @property
    def predicting(self) -> bool:
        return self.predict is not None and bool(self.predict.out)


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated bytes per rank (see :func:`gnntrain.sizing.estimate_memory` for the model)."""

    graph_bytes: int
    feature_bytes: int
    activation_bytes: int
    process_bytes: int = 0  # the interpreter, torch and gnntrain before any data (PROCESS_BYTES)
    # beyond the process, a rank's peak while it builds its own part of a part-wise store from the
    # graph's CSR, before training (0: its parts are not built that way)
    part_build_bytes: int = 0
    # how many ranks of a node build their parts at once: as many as fit (plan_fit.builds_at_once)
    part_builds_at_once: int = 1

    @property
    def training_bytes(self) -> int:
        return self.graph_bytes + self.feature_bytes + self.activation_bytes + self.process_bytes

    @property
    def total_bytes(self) -> int:
        """The rank's peak: training, or building its part where that takes more."""
        return max(self.training_bytes, self.process_bytes + self.part_build_bytes)


@dataclass(frozen=True)
class PlanContext:
    """Sizes and settings a mode may use to validate and estimate, before any data is loaded."""

    world_size: int
    num_nodes: int
    num_edges: int
    feat_dim: int
    num_classes: int
    dtype_bytes: int
    dims: Tuple[int, ...]
    comm_widths: Tuple[int, ...]  # width each layer hands to its aggregation (what a halo carries)
    param_bytes: int
    model: str
    # expected training nodes when the config implies it (generated graphs), else 0
    train_nodes: int = 0
    # comm_widths of the layers whose communicated tensor has a gradient, i.e. that move data
    # backward too: every layer but a first one that aggregates the input features, which need none
    # (grad_widths())
    grad_widths: Tuple[int, ...] = ()
    update_macs: Tuple[
        int, ...
    ] = ()  # multiply-adds of each layer's dense update per row (the model's shape)
    # the model aggregates weighted sums of rows (False: attention, with per-edge work)
    elementwise: bool = True
    settings: Optional[RunSettings] = field(default=None, repr=False, compare=False)
    # rows the busiest rank receives per layer, where the plan's partitioning is already in the
    # cache (its maximum receive volume); None: the estimate bounds them (sizing.halo_rows)
    received_rows: Optional[int] = None

    @property
    def device(self) -> str:
        return self.settings.device if self.settings is not None else "cpu"


# the plan's mode_details key of the halo rows its estimate took from a cached partitioning
KNOWN_HALO = "halo rows per rank (the cached partition's)"


@dataclass(frozen=True)
class RunPlan:
    """The resolved, validated run plan (built by :func:`gnntrain.plan.build_plan`)."""

    mode: str
    dataset: str
    model: str
    partitioner: str
    hardware: str
    world_size: int
    nodes: int
    ranks_per_node: int
    backend: str  # gloo (CPU) | nccl (CUDA)
    device: str  # cpu | cuda
    rank_devices: Tuple[str, ...]
    threads_per_rank: int
    kernel: str  # dgl | torch (kernel=auto resolved)
    kernel_note: str  # why: "set by kernel=..." or the measured times behind auto
    dtype: str
    epochs: int
    num_parts: int
    memory_per_rank: MemoryEstimate
    comm_per_epoch: Optional[Dict[str, Any]]
    mode_details: Dict[str, Any]
    warnings: Tuple[str, ...]
    config: Dict[str, Any] = field(repr=False)
    rank_threads: Tuple[
        int, ...
    ] = ()  # per rank, where the mode does not share cores evenly (HyScale on GPUs)
    # dataset.reader resolved for Planetoid/Reddit: "dgl", "pyg (auto)", ...; "" for others
    reader: str = ""
    # predicted epoch time, memory and bytes (ModePlanner.predict) where the hardware profile is
    # calibrated
    prediction: Optional[Dict[str, Any]] = None
    # mode=auto: the ranked candidates and why others were dropped
    auto: Optional[Dict[str, Any]] = None
    # partitioner=auto: why the partitioner named above was chosen ("" where the user named it)
    partitioner_note: str = ""
    # a generated graph written to disk and read from there (dataset.on_disk): where, and why
    dataset_note: str = ""

    @cached_property
    def config_obj(self) -> DictConfig:
        """The composed config as one read-only DictConfig, built once per plan object."""
        cfg = OmegaConf.create(self.config)
        OmegaConf.set_readonly(cfg, True)
        return cfg

    @cached_property
    def settings(self) -> RunSettings:
        """The typed settings the modes read, built once per plan object."""
        return RunSettings.of(self.config)

    def threads_of(self, rank: int) -> int:
        """Intra-op threads of ``rank``."""
        return int(self.rank_threads[rank]) if self.rank_threads else int(self.threads_per_rank)

    @property
    def plan_hash(self) -> str:
        keys = {k: self.config[k] for k in ("dataset", "model", "mode", "partitioner")}
        # dropout may change on a resume (gnntrain.checkpoint.RESUMABLE_SETTINGS); the rest of the
        # model is pinned
        keys["model"] = {k: v for k, v in keys["model"].items() if k != "dropout"}
        keys.update(world_size=self.world_size, dtype=self.dtype, seed=self.config["train"]["seed"])
        return hashlib.sha1(json.dumps(keys, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["memory_per_rank"]["total_bytes"] = self.memory_per_rank.total_bytes
        d["rank_devices"] = list(self.rank_devices)
        d["rank_threads"] = list(self.rank_threads)
        d["warnings"] = list(self.warnings)
        d["plan_hash"] = self.plan_hash
        return d

    def write_yaml(self, path: Path) -> Path:
        """plan.yaml, its checksum as its last line (``gnntrain predict`` reads the config back)."""
        from gnntrain.artifact import sealed_text
        from gnntrain.atomic import atomic_write_bytes

        path = Path(path)
        text = OmegaConf.to_yaml(OmegaConf.create(self.to_dict()))
        atomic_write_bytes(path, sealed_text(text).encode())
        return path
