"""Where a plan's partition store lives: a folder named by a key of everything that shapes a part
(docs/design.md#partition-store). Below the plan, so that the plan sees a store that is already
complete (built by ``gnntrain partition`` or an earlier run) and counts no build in its node check,
and the launcher opens the same folder.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

from gnntrain.data import resolve_cache_dir, resolve_data_dir
from gnntrain.modes.spec import mode_spec
from gnntrain.partition import store

# config keys that cannot change a part: scheduling, run length, logging, where things live
_IGNORED = {
    "train": {
        "epochs",
        "eval_every",
        "checkpoint_every",
        "keep_checkpoints",
        "resume",
        "progress",
        "lr",
        "weight_decay",
    },
    "hardware": {"timeout_min", "partition", "account"},
}
_KEYED_SECTIONS = ("dataset", "model", "mode", "partitioner", "hardware", "train", "task")


def _raw_files(cfg) -> List[Tuple[str, int, int]]:
    """(path, size, mtime) of a file-backed dataset's raw files, in each reader's layout: a changed
    or moved file makes a new store."""
    from gnntrain.data.sources import dataset_source

    data_dir = resolve_data_dir(cfg)
    if not data_dir:
        return []
    folders = dataset_source(cfg.dataset).raw_folders(cfg.dataset)
    found = []
    for folder in folders:
        root = Path(data_dir) / folder
        if root.is_dir():
            found += [
                (str(p), p.stat().st_size, p.stat().st_mtime_ns)
                for p in root.rglob("*")
                if p.is_file() and "processed" not in p.relative_to(root).parts
            ]
    return sorted(found)


# once per process: the code does not change under a running process
@functools.lru_cache(maxsize=None)
def _code_stamp(mode_name: str) -> str:
    """A digest of the code that makes a part: the modules of the mode's planner and prepare (their
    whole package where the mode is one), the modes' shared modules, the partitioners, the data
    layer, the tasks and the edge weights. A changed ``prepare`` never reuses an older store,
    wherever in its package the mode keeps it."""
    import inspect

    import gnntrain.data
    import gnntrain.models.norm
    import gnntrain.modes
    import gnntrain.partition
    import gnntrain.tasks

    spec = mode_spec(mode_name)
    modes_dir = Path(gnntrain.modes.__file__).parent
    mode_files = set()
    for part in (spec.planner, spec.prepare):
        source = Path(inspect.getsourcefile(part))
        package = source.parent
        mode_files.update(package.glob("*.py") if package != modes_dir else [source])
    # base, cost, halo, fullgraph, row_edges (graph_tensors), ... (and a mode kept in one module)
    shared = sorted(modes_dir.glob("*.py"))
    packages = [
        Path(gnntrain.data.__file__).parent,
        Path(gnntrain.partition.__file__).parent,
        Path(gnntrain.tasks.__file__).parent,  # a task's split and shard payload
    ]
    files = (
        sorted(mode_files)
        + shared
        + [f for pkg in packages for f in sorted(pkg.rglob("*.py"))]
        + [Path(gnntrain.models.norm.__file__)]
    )
    h = hashlib.sha1()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def uses_part_store(spec, world_size: int) -> bool:
    """Whether a run of mode ``spec`` (a :class:`~gnntrain.modes.ModeSpec`) on ``world_size`` ranks
    trains from the partition store: a mode with ``part_store``, on more than one rank."""
    return bool(spec.capabilities.part_store) and int(world_size) > 1


def store_folder(config: Mapping[str, Any], mode: str, world_size: int) -> Path:
    """``cache_dir/parts/<dataset>-<mode>-p<parts>-<key>`` for a resolved plan's config (plain, as
    ``RunPlan.config``): the key hashes every config value that shapes a part (dataset and its raw
    files, model, mode, partitioner, hardware, seed, dtype), the world size, the store format and
    the code that prepares parts."""
    from omegaconf import OmegaConf

    keyed: Dict[str, Any] = {}
    for section in _KEYED_SECTIONS:
        values = dict(config.get(section) or {})
        for ignored in _IGNORED.get(section, ()):
            values.pop(ignored, None)
        keyed[section] = values
    cfg = OmegaConf.create(dict(config))
    keyed.update(
        world_size=world_size,
        format=store.FORMAT_VERSION,
        raw=_raw_files(cfg),
        code=_code_stamp(mode),
    )
    key = hashlib.sha1(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]
    dataset = config["dataset"]["name"]
    return resolve_cache_dir(cfg) / "parts" / f"{dataset}-{mode}-p{world_size}-{key}"


def store_complete(config: Mapping[str, Any], mode: str, world_size: int) -> bool:
    """Whether that folder holds a whole store (every part published, its meta.json sealed): no
    rank builds. A store that fails its checks later is rebuilt, as from scratch."""
    return store.read_meta(store_folder(config, mode, world_size), warn=False) is not None
