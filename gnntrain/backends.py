"""The optional graph libraries, and whether each imports here (docs/design.md#backends).

gnntrain's core is torch-native; DGL (the ``dgl`` extra: its kernel, sampler and dataset
classes) and PyG (dataset classes) are used where they import. Every "is it there?" question
goes through this module, so a broken install reads the same everywhere.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Optional

__all__ = ["dgl_available", "dgl_problem", "pyg_install_problem", "pyg_problem"]


@functools.lru_cache(maxsize=None)
def dgl_problem() -> Optional[str]:
    """Why DGL cannot be used here (None: it imports). DGL 2.1 imports only with torch 2.0-2.2."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    try:
        import dgl  # noqa: F401
    except Exception as exc:  # ImportError, or a DGL built for another torch failing to load
        return f"{type(exc).__name__}: {exc}"
    return None


def dgl_available() -> bool:
    return dgl_problem() is None


@functools.lru_cache(maxsize=None)
def pyg_problem() -> Optional[str]:
    """Why PyTorch Geometric's dataset classes cannot be used here (None: they import)."""
    try:
        import torch_geometric.datasets  # noqa: F401
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def pyg_install_problem() -> Optional[str]:
    """Why PyG is not installed here (None: it is), found without importing it: importing
    ``torch_geometric.datasets`` takes about 1.5 s, which the plan of a run whose dataset is
    already decoded (:mod:`gnntrain.data.decoded_cache`) never needs. A broken install is found by
    the loader, which imports it (:func:`pyg_problem`) when it has to decode."""
    if importlib.util.find_spec("torch_geometric") is None:
        return "ModuleNotFoundError: No module named 'torch_geometric'"
    return None
