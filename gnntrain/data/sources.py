"""Dataset sources (``dataset.source``): how the datasets of one source are checked, sized and
loaded, registered like generators and read by the plan, the loader and the partition store's key
instead of string if-chains.

* ``generated``: a registered generator (:mod:`gnntrain.data.generators`);
* ``files``: a folder written by ``gnntrain ingest`` or ``gnntrain generate``;
* ``dgl``: Planetoid and Reddit files in DGL's layout, read by DGL or PyG (``dataset.reader``);
* ``ogb``: OGB node-property datasets through OGB's library-agnostic loader.

A new source is one :func:`register_source` call; its datasets are YAMLs naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from gnntrain.data.locations import (
    fill_file_sizes,
    resolve_cache_dir,
    resolve_data_dir,
    resolve_graph_path,
    resolve_reader,
)
from gnntrain.errors import DatasetError
from gnntrain.registry import Registry


def _config_edges(ds) -> int:
    return int(ds.num_edges)


def _nothing(ds) -> None:
    return None


def _named_folder(ds) -> List[str]:
    return [str(ds.name).replace("-", "_")]


@dataclass(frozen=True)
class DatasetSource:
    """One ``dataset.source``: what the plan and the loader ask of its datasets."""

    name: str
    load: Callable[[Any], Any]  # the run config -> its GraphData
    # the dataset section -> directed edges, from the config alone (before anything is loaded)
    directed_edges: Callable[[Any], int] = _config_edges
    # the dataset section -> PlanError for keys it cannot use
    check: Callable[[Any], None] = _nothing
    # the run config -> None: writes the sizes the plan needs where only the data knows them
    fill_sizes: Optional[Callable[[Any], None]] = None
    # the dataset section -> its raw folders under data_dir (a changed file makes a new part store)
    raw_folders: Callable[[Any], List[str]] = _named_folder
    reader: bool = False  # dataset.reader (dgl | pyg | auto) applies
    # the config's train/val/test fractions are the dataset's (generated)
    config_splits: bool = False
    # the dataset section (sizes filled) -> whether its edges carry weights (model.edge_weight)
    weighted: Callable[[Any], bool] = lambda ds: False


SOURCES: Registry[DatasetSource] = Registry("dataset source")


def register_source(source: DatasetSource) -> DatasetSource:
    return SOURCES.add(source.name, source)


def dataset_source(ds) -> DatasetSource:
    """The source of the dataset section ``ds``; one DatasetError naming the sources otherwise."""
    name = str(ds.get("source"))
    if name not in SOURCES:
        raise DatasetError(
            f"dataset '{ds.get('name')}': unknown source '{name}'; use one of "
            f"{', '.join(sorted(SOURCES))}"
        )
    return SOURCES[name]


# ------------------------------------------------------------------ the built-in sources
def _generator(ds):
    from gnntrain.data.generators import get_generator

    return get_generator(ds.name)


def _load_generated(cfg):
    """In memory, or from its folder in the cache where ``dataset.on_disk`` (the plan sets it where
    generating in memory would not fit: :mod:`gnntrain.data.generated_store`)."""
    if cfg.dataset.get("on_disk"):
        from gnntrain.data.generated_store import load_generated_on_disk

        data = load_generated_on_disk(cfg)
    else:
        data = _generator(cfg.dataset).generate(cfg.dataset)
    if int(cfg.dataset.get("regression_targets") or 0) > 0:
        from gnntrain.data.generators.targets import synthetic_targets

        ds = cfg.dataset
        data.targets = synthetic_targets(
            data.labels, data.features, int(ds.regression_targets), int(ds.seed)
        )
    return data


def _check_generated(ds) -> None:
    from gnntrain.data.generators import GENERATORS

    if ds.get("name") in GENERATORS:
        GENERATORS[ds.get("name")].check(ds)


def _files_weighted(ds) -> bool:
    """Whether the ingested folder (``dataset.path``, resolved by ``fill_sizes``) holds weights."""
    from gnntrain.data.ondisk import open_graph_dir

    return open_graph_dir(ds.path).weighted


def _load_files(cfg):
    from gnntrain.data.ondisk import load_graph_dir

    return load_graph_dir(resolve_graph_path(cfg))


def _check_dgl(ds) -> None:
    from gnntrain.data.loaders import DGL_DATASETS, named_dataset

    named_dataset(DGL_DATASETS, str(ds.get("name")))


def _check_ogb(ds) -> None:
    from gnntrain.data.loaders import OGB_DATASETS, named_dataset

    named_dataset(OGB_DATASETS, str(ds.get("name")))


def _load_dgl(cfg):
    from gnntrain.data import loaders

    ds = cfg.dataset
    _check_dgl(ds)
    cache, allow = resolve_cache_dir(cfg), bool(cfg.get("allow_download", True))
    if resolve_reader(ds) == "dgl":
        return loaders.load_dgl_dataset(ds, resolve_data_dir(cfg), cache, allow)
    from gnntrain.data.pyg import load_pyg_dataset

    return load_pyg_dataset(ds, resolve_data_dir(cfg), cache, allow)


def _dgl_folders(ds) -> List[str]:
    from gnntrain.data.loaders import DGL_DATASETS
    from gnntrain.data.pyg import raw_folders

    return raw_folders(ds.name) if ds.name in DGL_DATASETS else _named_folder(ds)


def _load_ogb(cfg):
    from gnntrain.data import loaders

    allow = bool(cfg.get("allow_download", True))
    return loaders.load_ogb_dataset(
        cfg.dataset, resolve_data_dir(cfg), resolve_cache_dir(cfg), allow
    )


register_source(
    DatasetSource(
        "generated",
        load=lambda cfg: _load_generated(cfg),
        directed_edges=lambda ds: int(_generator(ds).directed_edges(ds)),
        check=_check_generated,
        raw_folders=lambda ds: [],
        config_splits=True,
        weighted=lambda ds: bool(ds.get("edge_weights", False)),
    )
)
register_source(
    DatasetSource("files", load=_load_files, fill_sizes=fill_file_sizes, weighted=_files_weighted)
)
register_source(
    DatasetSource("dgl", load=_load_dgl, check=_check_dgl, raw_folders=_dgl_folders, reader=True)
)
register_source(DatasetSource("ogb", load=_load_ogb, check=_check_ogb))
