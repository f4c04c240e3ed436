"""Structured-config schema for gnntrain (registered in Hydra's ConfigStore).

Every YAML file under ``configs/`` names one of these dataclasses as its
schema (``defaults: [<group>_schema/<name>]`` or via the group default), so a
misspelled key or a wrong type fails at composition with Hydra's own message.

Mode options are owned by the mode modules (``gnntrain/modes/<name>``): each
defines a ``ModeConfig`` subclass, and ``gnntrain.modes.register_mode`` stores it
under ``mode/<name>_schema`` when the mode is imported. This module imports
nothing else from gnntrain: it is the bottom of the layer chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Dict, List, Optional, Tuple

from omegaconf import MISSING


class DType(str, Enum):
    float32 = "float32"
    float64 = "float64"


class Kernel(str, Enum):
    """Sparse kernel path: gnntrain's fused CPU kernel (numba), DGL's message passing (the dgl
    extra), or torch-native CSR (cuSPARSE on CUDA); auto measures those that run here."""

    auto = "auto"
    dgl = "dgl"
    native = "native"
    torch = "torch"


class DatasetReader(str, Enum):
    """Which library reads a Planetoid or Reddit dataset's raw files: DGL's classes, or PyG's
    (pure Python, any torch). Both give the same graph; auto = DGL where it imports."""

    auto = "auto"
    dgl = "dgl"
    pyg = "pyg"


class DeviceKind(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


def option_value(option):
    """An option's plain value: an enum member's value, anything else as is."""
    return option.value if isinstance(option, Enum) else option


class NormKind(str, Enum):
    none = "none"
    layer = "layer"  # LayerNorm on every hidden layer's output, per row (SuperGCN's Table 3 model)


# --------------------------------------------------------------------- dataset
@dataclass
class DatasetConfig:
    """What every dataset has; ``source`` says which loader reads it. A generated dataset's schema
    extends it with the generator's own parameters (``dataset/<name>_schema``,
    :class:`gnntrain.data.generators.Generator`), all of which enter its content hash.

    ``num_nodes``/``num_edges``/``feat_dim``/``num_classes`` are the generator
    parameters for generated graphs and the published sizes (used by the plan's
    memory estimate before loading) for file-backed ones.
    """

    # the fields that name or locate a dataset without shaping a generated graph: every other field
    # of a generator's config is in its content hash
    DESCRIPTIVE: ClassVar[Tuple[str, ...]] = (
        "name",
        "source",
        "path",
        "reader",
        "description",
        "on_disk",
        "regression_targets",  # derived from the graph at load: the graph (and its caches) is one
    )

    name: str = MISSING
    # generated | dgl (Planetoid, Reddit: DGL's file layout) | ogb | files (gnntrain ingest)
    source: str = MISSING
    # source=files: the folder gnntrain ingest wrote (relative: to data_dir, then cwd)
    path: Optional[str] = None
    reader: DatasetReader = DatasetReader.auto  # source=dgl only: the library that reads the files
    num_nodes: int = 2708
    num_edges: int = 10556  # directed edge count (rmat: generated edges before symmetrising)
    feat_dim: int = 1433
    num_classes: int = 7
    seed: int = 0
    symmetrize: bool = True
    # generated splits (fractions of nodes); file-backed datasets keep their own
    train_fraction: float = 0.05
    val_fraction: float = 0.2
    test_fraction: float = 0.4
    description: str = ""
    # generated graphs: write the graph to the cache folder block by block and train on its mapped
    # CSR (true), or generate it whole in memory (false); null: on disk where generating it in
    # memory would not fit the host (the plan says which; gnntrain/data/generated_store.py)
    on_disk: Optional[bool] = None
    # generated graphs: this many real-valued targets per node for task=node_regression, a noisy
    # function of the node's class and features (gnntrain/data/generators/targets.py); 0 = none
    regression_targets: int = 0


# ----------------------------------------------------------------------- model
@dataclass
class ModelConfig:
    """The options every model has; a model's own options are its layer's constructor arguments
    (:meth:`gnntrain.models.registry.ModelFamily.options_schema`, ``configs/model/<name>.yaml``)."""

    name: str = MISSING  # gcn | sage | gin | gat | custom
    # model=custom: the layer class, pkg.module.Class (docs/design.md#your-own-model)
    target: Optional[str] = None
    layers: int = 2
    hidden: int = 16
    dropout: float = 0.5
    self_loop: bool = True  # add self-loops to the graph (GCN's A+I)
    # aggregate with the dataset's edge weights (ingest --weight-column, csbm's edge_weights):
    # weighted degrees for GCN, weighted means and sums for SAGE and GIN
    # (docs/design.md#edge-weights)
    edge_weight: bool = False
    # layer: LayerNorm before each hidden relu (row-local, so exact in every mode)
    norm: NormKind = NormKind.none


# ------------------------------------------------------------------------ mode
@dataclass
class ModeConfig:
    """Base of every mode's options; each mode module subclasses it."""

    name: str = MISSING


@dataclass
class AutoConfig:
    """What ``mode=auto`` may choose from (docs/design.md#mode-auto); unused by the other modes."""

    allow_approximate: bool = False  # also rank quantized SuperGCN and mini-batch HyScale
    # the modes to consider; empty = every registered mode
    modes: List[str] = field(default_factory=list)
    # empty = 1, 2, 4, ... up to hardware.ranks_per_node
    ranks_per_node: List[int] = field(default_factory=list)


# ----------------------------------------------------------------- partitioner
@dataclass
class PartitionerConfig:
    name: str = MISSING  # auto | metis | kaminpar | random | range | volume | ldg
    seed: int = 0
    num_parts: int = 0  # 0 = what the mode needs at this world size; otherwise must match it
    vertex_weights: str = "nnz"  # nnz | uniform  (metis/volume)
    # with vertex_weights=nnz, each row's dense (update) work in nnz-equivalents, added to its
    # weight so METIS balances all of a rank's compute, not only its SpMM
    # (docs/design.md#partitioning)
    row_weight: float = 0.0
    # cut | vol: what METIS minimises, the edge cut or the total communication volume
    objective: str = "cut"
    reorder: Optional[str] = None  # null | rcm
    # volume refinement (GVB approximation)
    imbalance_eps: float = 0.05  # max allowed (max-avg)/avg of nnz per part
    max_volume_growth: float = 0.05  # total volume may grow at most this fraction
    refine_rounds: int = 50
    # kaminpar: its configuration preset, threads (0 = this process's CPUs), whether it
    # compresses the graph while loading it (TeraPart's encoding: a fraction of the memory), and
    # volume | none: whether its cut is then refined for the total communication volume
    # (gnntrain/partition/connectivity.py)
    preset: str = "default"
    threads: int = 0
    compress: bool = True
    refine: str = "volume"


# -------------------------------------------------------------------- hardware
@dataclass
class CostConfig:
    """This host's measured costs, written by ``gnntrain calibrate`` (docs/design.md#cost-models).

    Each list holds one figure per entry of ``threads`` (the intra-op thread counts measured);
    the cost models read the entry nearest a rank's thread count. Empty lists: not calibrated.
    """

    calibrated: str = ""  # "host, torch version, date" of the measurement; "" = not calibrated
    threads: List[int] = field(default_factory=list)
    # the SpMM kernel kernel=auto picks at that thread count
    kernel: List[str] = field(default_factory=list)
    # SpMM forward+backward, per edge (index work)
    spmm_ns_per_edge: List[float] = field(default_factory=list)
    # SpMM forward+backward, per edge x column
    spmm_ns_per_edge_col: List[float] = field(default_factory=list)
    gemm_widths: List[int] = field(default_factory=list)  # the narrow dimension of the GEMMs timed
    # 1e9 multiply-adds/s per rank, per gemm_widths
    gemm_gflops: List[List[float]] = field(default_factory=list)
    # bytes/s read+written by elementwise ops
    elementwise_gbps: List[float] = field(default_factory=list)
    # hidden relu+dropout, fwd+bwd
    activation_ns_per_element: List[float] = field(default_factory=list)
    # rows picked or added by index (halos, chunks)
    gather_ns_per_element: List[float] = field(default_factory=list)
    # fixed cost of one layer's forward+backward
    op_overhead_us: List[float] = field(default_factory=list)
    # per epoch: loss, optimizer step, bookkeeping
    epoch_overhead_us: List[float] = field(default_factory=list)
    # per collective call inside training, beyond latency + bytes/bandwidth: Python bookkeeping and
    # waiting for the peer (fitted on a 2-rank training probe)
    collective_overhead_us: float = 0.0
    # per mode: measured over modelled compute that grows with the graph, on a 20 000-node probe run
    mode_factor: Dict[str, float] = field(default_factory=dict)
    # collectives over the backend between 2 local ranks: time = latency + bytes per rank /
    # bandwidth
    alltoall_latency_us: float = 0.0
    alltoall_gbps: float = 0.0
    allreduce_latency_us: float = 0.0
    allreduce_gbps: float = 0.0
    allgather_latency_us: float = 0.0
    allgather_gbps: float = 0.0


@dataclass
class HardwareConfig:
    name: str = MISSING
    nodes: int = 1
    ranks_per_node: int = 2
    device: DeviceKind = DeviceKind.cpu
    cores_per_node: int = 0  # 0 = detect on this host
    host_memory_gb: float = 0.0  # 0 = detect on this host
    device_memory_gb: float = 0.0  # per device (GPU); 0 when device is cpu
    oversubscribe: float = 2.0  # warn when ranks exceed cores x this
    # bandwidths for the cost models, GB/s
    h2d_gbps: float = 10.0
    d2d_gbps: float = 10.0
    # the network between nodes, per node each way (gnntrain netem up --profile emulates it)
    link_gbit_s: float = 0.0  # Gbit/s; 0 = not stated
    link_latency_us: float = 0.0  # one-way
    # compute/memory rates for the HyScale performance model (HyScale-GNN: A Scalable Hybrid GNN
    # Training System on Single-Node Heterogeneous Architecture, §V, Eqs. (7)–(13);
    # docs/design.md#hyscale)
    host_mem_gbps: float = 20.0  # effective host DRAM bandwidth (feature loading, CPU aggregation)
    core_gmacs: float = 8.0  # multiply-adds per second per core, in 1e9 (CPU feature update)
    # accelerator memory bandwidth (HyScale aggregation; HongTu's reuse T_ru)
    device_mem_gbps: float = 500.0
    device_gmacs: float = 10000.0  # accelerator multiply-adds per second, in 1e9
    # SLURM mapping for hydra/launcher=slurm (configs/hydra/launcher/slurm.yaml;
    # docs/design.md#launcher)
    gpus_per_node: int = 0
    mem_gb: int = 0
    timeout_min: int = 60
    partition: Optional[str] = None
    account: Optional[str] = None
    # measured by gnntrain calibrate (mode=auto, predictions)
    cost: CostConfig = field(default_factory=CostConfig)


# ----------------------------------------------------------------------- train
@dataclass
class TrainConfig:
    epochs: int = 50
    lr: float = 0.01
    weight_decay: float = 5e-4
    seed: int = 0
    dtype: DType = DType.float32
    eval_every: int = 1
    checkpoint_every: int = 0
    keep_checkpoints: int = 3  # the newest k checkpoints are kept; 0 = every one
    resume: bool = False
    progress: bool = True  # rank 0 shows a rich progress bar
    # keep A·x of the fixed input features (computed once per run) where the first layer aggregates
    # them before any weight (mode=single; docs/design.md#like-for-like): false recomputes it every
    # epoch, as the plain DGL/PyG loops and the streaming modes do, for ratios that compare like
    # with like
    cache_input_aggregation: bool = True


@dataclass
class CsvLoggerConfig:
    file: str = "metrics.csv"  # in the run directory


@dataclass
class TensorBoardLoggerConfig:
    # event files, in the run directory: tensorboard --logdir RUN_DIR/tensorboard
    dir: str = "tensorboard"


@dataclass
class MlflowLoggerConfig:
    tracking_uri: Optional[str] = None  # None: a file store in RUN_DIR/mlruns
    experiment: str = "gnntrain"
    run_name: Optional[str] = None  # None: the run directory's name


@dataclass
class WandbLoggerConfig:
    project: str = "gnntrain"
    mode: str = "offline"  # offline (sync later with wandb sync) | online | disabled
    run_name: Optional[str] = None


@dataclass
class LoggerConfig:
    """Experiment trackers (``logger=csv``, ``logger=[tensorboard,csv]``); rank 0 only."""

    csv: Optional[CsvLoggerConfig] = None
    tensorboard: Optional[TensorBoardLoggerConfig] = None
    mlflow: Optional[MlflowLoggerConfig] = None
    wandb: Optional[WandbLoggerConfig] = None


@dataclass
class PredictConfig:
    """Inference instead of training (``gnntrain predict RUN_DIR`` sets it;
    docs/design.md#predict)."""

    out: Optional[str] = None  # the output file; None = train as usual
    checkpoint: Optional[str] = None  # the weights: a run's model.pt or a checkpoint file
    what: str = "logits"  # logits | probs | labels | embeddings
    layer: int = 0  # embeddings: the input of this layer (1..layers-1); 0 = the last layer's input
    format: str = "parquet"  # parquet (with the node IDs) | npy


# ------------------------------------------------------------------------ root
@dataclass
class RunConfig:
    """The root schema; ``configs/config.yaml`` picks the group defaults."""

    dataset: DatasetConfig = MISSING
    model: ModelConfig = MISSING
    mode: Any = MISSING  # a ModeConfig subclass, chosen by the mode's YAML
    task: Any = MISSING  # a gnntrain.tasks.TaskConfig subclass, chosen by the task's YAML
    partitioner: PartitionerConfig = MISSING
    hardware: HardwareConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    auto: AutoConfig = field(default_factory=AutoConfig)
    predict: PredictConfig = field(default_factory=PredictConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    data_dir: Optional[str] = None  # raw dataset files (env GNNTRAIN_DATA_DIR)
    cache_dir: Optional[str] = None  # processed data + partitions (env GNNTRAIN_CACHE_DIR)
    # let DGL/OGB download missing files (never when GNNTRAIN_OFFLINE=1)
    allow_download: bool = True
    kernel: Kernel = Kernel.auto
    resume: Optional[str] = None  # a run directory to resume from (its newest valid checkpoint)
    port: int = 0  # rendezvous port for local launches; 0 = pick a free one
    comm_timeout_s: float = 120.0  # finite timeout for every collective


def unknown_keys(cfg, prefix: str = "") -> List[Tuple[str, List[str]]]:
    """Keys a structured node does not define (``+train.epoch=5`` appends one that nothing reads),
    each with the node's valid keys: [(dotted key, valid keys)]."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    found: List[Tuple[str, List[str]]] = []
    kind = OmegaConf.get_type(cfg)
    valid = [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else None
    for key in cfg.keys():
        if str(key) in ("hydra",):
            continue
        if valid is not None and key not in valid:
            found.append((f"{prefix}{key}", valid))
            continue
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            found += unknown_keys(child, f"{prefix}{key}.")
    return found


def _cpus_per_task(cores_per_node, ranks_per_node) -> int:
    import os

    cores = int(cores_per_node) or (os.cpu_count() or 1)
    return max(1, cores // max(1, int(ranks_per_node)))


def config_groups_help() -> str:
    """The config groups and their options for ``--help`` (Hydra's help template in
    configs/config.yaml calls it as ``${gnntrain_config_groups:}``): Hydra's own listing, less the
    schemas each group's YAMLs extend (``<group>_schema``), which are not options to pick."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    loader = GlobalHydra.instance().config_loader()

    def groups(parent: str) -> List[str]:
        found = []
        for name in loader.list_groups(parent):
            path = f"{parent}/{name}" if parent else name
            if path != "hydra" and not path.startswith("hydra/"):
                found.append(path)
                found += groups(path)
        return found

    lines = []
    for group in sorted(groups("")):
        options = [
            o
            for o in loader.get_group_options(group, results_filter=ObjectType.CONFIG)
            if not o.endswith("_schema")
        ]
        if options:
            lines.append(f"{group}: {', '.join(options)}")
    return "\n".join(lines)


def register_resolvers() -> None:
    """Resolvers used by configs/hydra/launcher/slurm.yaml and by the help template."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("gnntrain_config_groups"):
        OmegaConf.register_new_resolver("gnntrain_config_groups", config_groups_help)

    if not OmegaConf.has_resolver("gnntrain_cpus_per_task"):
        OmegaConf.register_new_resolver("gnntrain_cpus_per_task", _cpus_per_task)
    if not OmegaConf.has_resolver("gnntrain_none_if_zero"):
        OmegaConf.register_new_resolver(
            "gnntrain_none_if_zero", lambda v: None if not v else int(v)
        )


def register_configs() -> None:
    """Register the root schema and the group schemas (each mode registers its own)."""
    from hydra.core.config_store import ConfigStore

    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    cs.store(group="dataset", name="dataset_schema", node=DatasetConfig)
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="partitioner", name="partitioner_schema", node=PartitionerConfig)
    cs.store(group="hardware", name="hardware_schema", node=HardwareConfig)
    cs.store(group="mode", name="auto_schema", node=ModeConfig)
