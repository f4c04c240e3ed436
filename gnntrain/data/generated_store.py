"""Generated graphs kept on disk (``dataset.on_disk``): what `gnntrain generate` writes, made on
demand in the cache folder and trained on through its memory-mapped CSR.

Generating a graph in memory (:func:`gnntrain.data.generators.materialize`) holds the drawn pairs,
their symmetrised and de-duplicated copies and the features at once: 65 bytes per directed edge plus
the feature matrix, measured on 1M-node csbm and R-MAT graphs (20M edges: 1.36 GB above the
interpreter). The block writer (:func:`gnntrain.data.ingest.generated.write_generated`) needs a few
arrays of N plus one block. So where generating in memory would not fit the host, the plan sets
``dataset.on_disk`` and the loader writes the graph once into ``cache_dir/generated/`` (under a
lock: concurrent runs share one folder) and opens it as ``dataset=files`` would: the same graph (the
generator's blocks are the same either way, tested), and every multi-rank prepare then reads parts
from its CSR (:mod:`gnntrain.modes.row_edges`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

from gnntrain.data.locations import resolve_cache_dir

CONSTRUCTION_BYTES_PER_EDGE = 68  # materialize's peak per directed edge (65 measured)
CONSTRUCTION_BYTES_PER_NODE = 48  # labels, masks, degrees


def construction_bytes(num_nodes: int, num_edges: int, feat_dim: int) -> int:
    """Peak of generating a graph of this size whole in memory, above the interpreter."""
    return int(
        CONSTRUCTION_BYTES_PER_EDGE * num_edges
        + (CONSTRUCTION_BYTES_PER_NODE + 4 * feat_dim) * num_nodes
    )


def generated_folder(cfg) -> Path:
    """Where the generated dataset of config ``cfg`` lives on disk: one folder per generator and
    parameters (their content hash)."""
    from gnntrain.data.generators import content_hash

    ds = cfg.dataset
    return resolve_cache_dir(cfg) / "generated" / content_hash(str(ds.name), ds)


def load_generated_on_disk(cfg):
    """The generated dataset of ``cfg`` from its folder in the cache, written first (block by
    block, under a lock) where it is missing, or damaged (a cache: written again, with a
    warning)."""
    from gnntrain.atomic import file_lock
    from gnntrain.data.ingest.generated import write_generated
    from gnntrain.data.ondisk import load_graph_dir

    folder = generated_folder(cfg)
    if _damage(folder) is not None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(folder.with_name(f".{folder.name}.lock")):
            damage = _damage(folder)
            if damage is not None:
                if damage:
                    warnings.warn(f"generated graph {damage}; generating it again", stacklevel=2)
                write_generated(cfg.dataset, folder, overwrite=True)
    return load_graph_dir(folder, name=str(cfg.dataset.name))


def _damage(folder: Path) -> Optional[str]:
    """None where ``folder`` holds a sound graph; "" where it holds none; else what is damaged."""
    from gnntrain.artifact import ArtifactError
    from gnntrain.data.ondisk import META, check_graph_dir

    if not (folder / META).exists():
        return ""
    try:
        check_graph_dir(folder)
    except ArtifactError as exc:
        return str(exc)
    except OSError as exc:
        return f"{folder / META} is unreadable ({exc})"
    return None
