"""A whole graph at once: a PyG ``Data`` or DGL graph in memory (:func:`graph_arrays`, also used
by the Python API) or saved to a file (``gnntrain ingest --graph FILE``), as numpy arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import numpy as np

from gnntrain.errors import DatasetError


def graph_arrays(graph) -> Dict[str, Any]:
    """edge_index (2xE), num_nodes, x, y and the three masks of a PyG ``Data`` or a DGL graph, as
    numpy (None where the graph has none); TypeError for anything else."""

    def arr(t):
        return (
            None
            if t is None
            else (t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t))
        )

    if hasattr(graph, "edge_index"):  # PyG Data
        get = lambda key: arr(getattr(graph, key, None))
        out = {
            "edge_index": arr(graph.edge_index),
            "num_nodes": int(graph.num_nodes),
            "x": get("x"),
            "y": get("y"),
        }
        out.update({m: get(m) for m in ("train_mask", "val_mask", "test_mask")})
        return out
    if hasattr(graph, "ndata") and hasattr(graph, "edges"):  # DGL graph
        src, dst = graph.edges()
        nd = graph.ndata
        pick = lambda *keys: next((arr(nd[k]) for k in keys if k in nd), None)
        out = {
            "edge_index": np.stack([arr(src), arr(dst)]),
            "num_nodes": int(graph.num_nodes()),
            "x": pick("feat", "x", "features"),
            "y": pick("label", "y", "labels"),
        }
        out.update({m: pick(m) for m in ("train_mask", "val_mask", "test_mask")})
        return out
    raise TypeError(f"{type(graph).__name__} is neither a PyG Data nor a DGL graph")


def _read_graph_object(path: Path, kind: str) -> Dict[str, Any]:
    """:func:`graph_arrays` of a saved PyG Data (torch.save) or DGL graph (dgl.save_graphs)."""
    if kind == "pyg":
        import torch

        try:
            import torch_geometric  # noqa: F401  (unpickling a Data needs its classes)
        except ImportError:
            raise DatasetError(
                "ingest: reading a PyG Data needs torch_geometric: pip install torch_geometric"
            ) from None
        try:
            data = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:
            raise DatasetError(
                f"ingest: --graph {path}: torch.load could not read it ({type(exc).__name__}: "
                f"{exc})."
            ) from None
        if isinstance(data, (tuple, list)) and data and hasattr(data[0], "edge_index"):
            data = data[0]
        if getattr(data, "edge_index", None) is None:
            raise DatasetError(
                f"ingest: --graph {path} holds a {type(data).__name__}, not a PyG Data with "
                f"edge_index."
            )
        return graph_arrays(data)
    from gnntrain.backends import dgl_problem

    problem = dgl_problem()
    if problem is not None:
        raise DatasetError(
            f"ingest: --graph {path} is a DGL graph, but DGL does not import here ({problem}). "
            f"Install the extra gnntrain[dgl], or save the graph as a PyG Data or as arrays."
        )
    import dgl

    try:
        graphs, _ = dgl.load_graphs(str(path))
    except Exception as exc:
        raise DatasetError(
            f"ingest: --graph {path}: dgl.load_graphs could not read it ({type(exc).__name__}: "
            f"{exc})."
        ) from None
    return graph_arrays(graphs[0])
