"""Generated graphs. Each module here registers one :class:`Generator` (csbm, rmat, ...); a new
generated dataset is one module plus one ``configs/dataset/<name>.yaml`` with ``source: generated``.

A generator says how many directed edges its config implies (the plan sizes every estimate from it
before anything is generated), checks its own keys (one PlanError naming the option), and describes
its graph as :class:`GraphBlocks`: raw edges in blocks of ``EDGE_BLOCK`` draws and feature rows in
blocks of ``ROW_BLOCK``, each block from its own random stream of (``dataset.seed``, stream, block).
The same blocks build the in-memory :class:`~gnntrain.data.graph.GraphData` (:func:`materialize`,
``dataset=csbm``) and the on-disk folder that ``gnntrain generate`` writes in bounded memory
(:mod:`gnntrain.data.ingest.generated`), so both hold one graph, whatever the machine.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import pkgutil
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, Iterator, Tuple

import numpy as np

from gnntrain.config.schema import DatasetConfig
from gnntrain.errors import DatasetError
from gnntrain.registry import Registry

ALGORITHM = 2  # in every content hash: 2 = block-wise draws (1 drew each array whole)
EDGE_BLOCK = 1 << 22  # raw edges drawn per block
ROW_BLOCK = 1 << 16  # feature rows drawn per block
FeatureRows = Callable[[int, int], np.ndarray]  # rows [lo, hi) as float32


def block_rng(seed: int, stream: int, block: int) -> np.random.Generator:
    """The random stream of one block: a function of (seed, stream, block) only, so any block can be
    drawn alone, and a graph does not depend on how many blocks a machine holds at once."""
    return np.random.default_rng([int(seed), int(stream), int(block)])


def pair_weights(seed: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """float32 weights in [0.5, 2) of the edges src→dst: a hash of (seed, the unordered pair), so
    an edge and its reverse weigh the same and a weight never depends on the blocks it was drawn
    in (the in-memory graph and the on-disk folder agree)."""
    lo = np.minimum(src, dst).astype(np.uint64)
    hi = np.maximum(src, dst).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = lo * np.uint64(0x9E3779B97F4A7C15) ^ (
            hi + np.uint64(int(seed) & 0xFFFFFFFF) * np.uint64(0xD1B54A32D192ED03)
        )
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    unit = (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)
    return (0.5 + 1.5 * unit).astype(np.float32)


def row_blocks(num_nodes: int) -> Iterator[Tuple[int, int]]:
    for lo in range(0, num_nodes, ROW_BLOCK):
        yield lo, min(num_nodes, lo + ROW_BLOCK)


def class_feature_rows(
    seed: int,
    labels: np.ndarray,
    num_classes: int,
    feat_dim: int,
    snr: float,
    means_stream: int,
    rows_stream: int,
) -> FeatureRows:
    """Rows of N(μ_y, I) features for nodes labelled ``labels``: class means drawn from stream
    ``means_stream`` and scaled to norm ``snr`` (one node's features are a weak signal, averaging
    same-class neighbours sharpens it), each block of rows from stream ``rows_stream``."""
    means = block_rng(seed, means_stream, 0).standard_normal((num_classes, feat_dim))
    means *= snr / np.linalg.norm(means, axis=1, keepdims=True)

    def feature_rows(lo: int, hi: int) -> np.ndarray:
        noise = block_rng(seed, rows_stream, lo // ROW_BLOCK).standard_normal((hi - lo, feat_dim))
        return (means[labels[lo:hi]] + noise).astype(np.float32)

    return feature_rows


@dataclass(frozen=True)
class GraphBlocks:
    """A generated graph before it is assembled: what the in-memory graph and the on-disk folder are
    built from.

    ``edge_blocks()`` yields raw (src, dst) int64 arrays (self-loops and repeats allowed: assembly
    drops them, and adds the reverse edges where ``symmetrize``); ``feature_rows(lo, hi)`` draws
    rows [lo, hi) with lo a multiple of ROW_BLOCK; ``labels(indptr, indices, features)`` gives every
    node's label from the assembled CSR by destination (sources sorted within a row) and a reader of
    the feature rows."""

    name: str
    num_nodes: int
    feat_dim: int
    num_classes: int
    symmetrize: bool
    seed: int
    fractions: Tuple[float, float, float]
    content_hash: str
    origin: str
    edge_blocks: Callable[[], Iterator[Tuple[np.ndarray, np.ndarray]]]
    feature_rows: FeatureRows
    labels: Callable[[np.ndarray, np.ndarray, FeatureRows], np.ndarray]
    # each edge weighs pair_weights(seed, u, v) (the generator's ``edge_weights`` option)
    edge_weights: bool = False


@dataclass(frozen=True)
class Generator:
    """A generated dataset. ``config`` is its parameters: :class:`DatasetConfig` plus the
    generator's own fields, stored for Hydra as ``dataset/<name>_schema`` (what
    ``configs/dataset/<name>.yaml`` extends), and every field of it but the descriptive ones
    (``DatasetConfig.DESCRIPTIVE``) is in the graph's content hash (:func:`params_hash`): a new
    parameter cannot be left out of it."""

    name: str
    config: type  # a DatasetConfig subclass (or DatasetConfig itself)
    blocks: Callable[[Any], GraphBlocks]  # the dataset section -> its graph in blocks
    # the dataset section -> directed edges (both directions counted)
    directed_edges: Callable[[Any], int]
    check: Callable[[Any], None] = lambda ds: None  # raises PlanError for keys it cannot use
    description: str = ""

    def generate(self, cfg) -> Any:
        """The dataset section's graph as an in-memory GraphData."""
        return materialize(self.blocks(cfg))


GENERATORS: Registry[Generator] = Registry("generator")


def register_generator(generator: Generator) -> Generator:
    from hydra.core.config_store import ConfigStore

    if not (isinstance(generator.config, type) and issubclass(generator.config, DatasetConfig)):
        raise TypeError(f"generator {generator.name}: its config must be a DatasetConfig dataclass")
    GENERATORS.add(generator.name, generator)
    ConfigStore.instance().store(
        group="dataset", name=f"{generator.name}_schema", node=generator.config
    )
    return generator


def get_generator(name: str) -> Generator:
    if name not in GENERATORS:
        raise DatasetError(
            f"dataset '{name}': no generator of that name; use one of {sorted(GENERATORS)}"
        )
    return GENERATORS[name]


def generator_params(cfg, name: str = "") -> Dict[str, Any]:
    """Every parameter that shapes the generated graph of the dataset section ``cfg``: each field of
    its generator's config but the descriptive ones, as plain JSON values (defaults where ``cfg``
    omits one)."""
    from omegaconf import OmegaConf

    from gnntrain.plan_types import plain_section, schema_template

    config = get_generator(name or str(cfg["name"])).config
    merged = OmegaConf.merge(schema_template(config), plain_section(cfg))
    values = OmegaConf.to_container(merged, resolve=True)
    return {
        f.name: values[f.name] for f in fields(config) if f.name not in DatasetConfig.DESCRIPTIVE
    }


def params_hash(kind: str, cfg) -> str:
    """The content hash of a generated graph: its generator and every parameter that shapes it."""
    payload = generator_params(cfg, kind)
    return hashlib.sha1(
        json.dumps([kind, ALGORITHM, payload], sort_keys=True).encode()
    ).hexdigest()[:16]


def content_hash(kind: str, cfg) -> str:
    """A generated graph's ``GraphData.content_hash`` (what keys its caches): ``<kind>-<hash>``."""
    return f"{kind}-{params_hash(kind, cfg)}"


def fractions(cfg) -> Tuple[float, float, float]:
    return (cfg.train_fraction, cfg.val_fraction, cfg.test_fraction)


def materialize(blocks: GraphBlocks):
    """The GraphData of ``blocks``: edges cleaned as :func:`~gnntrain.data.graph.clean_edges` does
    (no self-loops, no repeats, sorted by (dst, src)), which is the CSR the on-disk folder
    stores."""
    import torch

    from gnntrain.data.graph import GraphData, clean_edges, split_masks

    n = blocks.num_nodes
    drawn = list(blocks.edge_blocks())
    src = torch.from_numpy(
        np.concatenate([s for s, _ in drawn]) if drawn else np.zeros(0, np.int64)
    )
    dst = torch.from_numpy(
        np.concatenate([d for _, d in drawn]) if drawn else np.zeros(0, np.int64)
    )
    del drawn
    src, dst = clean_edges(src, dst, n, symmetrize=blocks.symmetrize)
    features = np.empty((n, blocks.feat_dim), dtype=np.float32)
    for lo, hi in row_blocks(n):
        features[lo:hi] = blocks.feature_rows(lo, hi)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst.numpy(), minlength=n), out=indptr[1:])
    labels = blocks.labels(indptr, src.numpy(), lambda lo, hi: features[lo:hi])
    train, val, test = split_masks(n, blocks.fractions, blocks.seed)
    return GraphData(
        name=blocks.name,
        num_nodes=n,
        src=src,
        dst=dst,
        features=torch.from_numpy(features),
        labels=torch.from_numpy(np.asarray(labels, dtype=np.int64)),
        train_mask=train,
        val_mask=val,
        test_mask=test,
        num_classes=blocks.num_classes,
        content_hash=blocks.content_hash,
        origin=blocks.origin,
        edge_weight=(
            torch.from_numpy(pair_weights(blocks.seed, src.numpy(), dst.numpy()))
            if blocks.edge_weights
            else None
        ),
    )


for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
