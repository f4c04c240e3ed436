"""``gnntrain predict RUN --what scores|topk``: link prediction's outputs under the user's own node
IDs, from a trained run's node embeddings.

The embeddings come from the run's own mode and world size (``--what logits`` of the link
prediction run: the GNN's final rows); the run's decoder (``model.pt``) then scores

* ``scores``: the pairs of a ``--pairs`` file (CSV, Parquet or a two-column ``.npy``: source and
  destination IDs), one row per pair with its logit and probability;
* ``topk``: for each node of a ``--sources`` file (one column of IDs), the ``--k`` best candidates
  over every node, leaving out the node itself and its train edges (the edges the model was
  trained on: known links are not recommendations).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import torch

from gnntrain.errors import GnnTrainError
from gnntrain.launch.predict import predict, predict_config

CANDIDATE_BLOCK = 4096  # sources scored against every node at a time
LINK_WHATS = ("scores", "topk")


def read_id_columns(path: Path, columns: int, option: str) -> List[Any]:
    """The first ``columns`` columns of a CSV/Parquet/.npy file of node IDs, as pyarrow arrays."""
    import pyarrow as pa

    path = Path(path)
    if not path.is_file():
        raise GnnTrainError(f"predict: {option} {path}: no such file.")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            array = np.load(path, allow_pickle=False)
            array = array.reshape(array.shape[0], -1)
            return [pa.array(array[:, j]) for j in range(min(columns, array.shape[1]))]
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        else:
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(path)
    except Exception as exc:  # an unreadable file: one line naming it
        raise GnnTrainError(f"predict: {option} {path}: cannot read it ({exc}).") from None
    if table.num_columns < columns:
        raise GnnTrainError(
            f"predict: {option} {path} has {table.num_columns} column(s); it needs {columns} "
            "(source and destination IDs)."
            if columns == 2
            else f"predict: {option} {path} has no column of node IDs."
        )
    return [table.column(j).combine_chunks() for j in range(columns)]


def node_index(cfg, num_nodes: int):
    """The map from the user's node IDs to node indices: an ingested graph's ``node_ids``, else
    the indices themselves."""
    from gnntrain.data.ingest.nodes import NodeIds

    ds = cfg.dataset
    if ds.get("source") == "files" and ds.get("path"):
        from gnntrain.data.ondisk import open_graph_dir

        return NodeIds(open_graph_dir(ds.path).node_ids(), num_nodes)
    return NodeIds(None, num_nodes)


def encode_ids(ids, values, option: str, path: Path) -> np.ndarray:
    """Node indices of ``values``; one GnnTrainError naming the first ID that is no node."""
    index = ids.encode(values)
    if (index < 0).any():
        first = int(np.flatnonzero(index < 0)[0])
        raise GnnTrainError(
            f"predict: {option} {path} row {first + 1}: node ID {values[first].as_py()!r} is not "
            "a node of the graph."
        )
    return index.astype(np.int64)


def train_edges(cfg) -> Tuple[torch.Tensor, torch.Tensor]:
    """The run's message-passing edges (its train edges), split again as the run split them."""
    from gnntrain.launch.shards import load_task_graph

    data = load_task_graph(cfg)
    return data.src, data.dst


def score_pairs(model, h: torch.Tensor, src: np.ndarray, dst: np.ndarray) -> torch.Tensor:
    with torch.no_grad():
        return model.score(h, torch.from_numpy(src), torch.from_numpy(dst))


def top_k(model, h: torch.Tensor, sources: np.ndarray, k: int, known) -> Tuple[np.ndarray, ...]:
    """(source, rank, candidate, logit) rows: each source's ``k`` best candidates, itself and its
    known neighbours left out."""
    src_known, dst_known = known
    n = h.shape[0]
    k = min(int(k), n - 1)
    out_src, out_rank, out_cand, out_logit = [], [], [], []
    order = torch.argsort(src_known)
    starts = torch.searchsorted(src_known[order], torch.arange(n + 1))
    with torch.no_grad():
        for lo in range(0, len(sources), CANDIDATE_BLOCK):
            block = torch.from_numpy(sources[lo : lo + CANDIDATE_BLOCK])
            logits = model.gnn.head(h[block].unsqueeze(1), h.unsqueeze(0))  # (block, n)
            logits[torch.arange(block.numel()), block] = float("-inf")
            for i, s in enumerate(block.tolist()):
                logits[i, dst_known[order[starts[s] : starts[s + 1]]]] = float("-inf")
            best = torch.topk(logits, k, dim=1)
            out_src.append(block.repeat_interleave(k).numpy())
            out_rank.append(np.tile(np.arange(1, k + 1), block.numel()))
            out_cand.append(best.indices.reshape(-1).numpy())
            out_logit.append(best.values.reshape(-1).numpy())
    return tuple(np.concatenate(x) for x in (out_src, out_rank, out_cand, out_logit))


def write_table(out: Path, columns: Dict[str, Any], fmt: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    if fmt == "npy":
        np.save(out, np.column_stack([np.asarray(v, dtype=np.float64) for v in columns.values()]))
        return
    pq.write_table(pa.table(columns), out)


def predict_links(
    run_dir: Path,
    what: str,
    out: Path,
    fmt: str,
    pairs: Path = None,
    sources: Path = None,
    k: int = 20,
    checkpoint: Path = None,
    overrides: List[str] = (),
) -> Dict[str, Any]:
    """``--what scores`` (``pairs``) or ``--what topk`` (``sources``, ``k``); returns what was
    written."""
    from gnntrain.models.export import load_trained_model

    if what == "scores" and pairs is None:
        raise GnnTrainError("predict: --what scores needs --pairs FILE (source and target IDs).")
    if what == "topk" and sources is None:
        raise GnnTrainError("predict: --what topk needs --sources FILE (one column of node IDs).")
    model = load_trained_model(run_dir)
    if getattr(model.gnn, "head", None) is None:
        raise GnnTrainError(
            f"predict: --what {what} needs a model trained with task=link_prediction; "
            f"{run_dir} was trained for {(model.card.get('task') or {}).get('name', 'nodes')}."
        )
    cfg = predict_config(Path(run_dir), list(overrides))
    embeddings = Path(out).with_name(f".{Path(out).stem}.embeddings.npy")
    predict(run_dir, "logits", 0, embeddings, "npy", checkpoint, overrides)
    h = torch.from_numpy(np.load(embeddings)).to(next(model.gnn.parameters()).dtype)
    embeddings.unlink()
    ids = node_index(cfg, h.shape[0])
    names = ids.ids if ids.ids is not None else None
    if what == "scores":
        src_ids, dst_ids = read_id_columns(pairs, 2, "--pairs")
        src = encode_ids(ids, src_ids, "--pairs", pairs)
        dst = encode_ids(ids, dst_ids, "--pairs", pairs)
        logits = score_pairs(model, h, src, dst)
        columns = {
            "src": src_ids,
            "dst": dst_ids,
            "logit": logits.numpy(),
            "probability": torch.sigmoid(logits).numpy(),
        }
    else:
        (source_ids,) = read_id_columns(sources, 1, "--sources")
        chosen = encode_ids(ids, source_ids, "--sources", sources)
        s, rank, cand, logit = top_k(model, h, chosen, k, train_edges(cfg))
        columns = {
            "source": names.take(s) if names is not None else s,
            "rank": rank,
            "candidate": names.take(cand) if names is not None else cand,
            "logit": logit,
            "probability": torch.sigmoid(torch.from_numpy(logit)).numpy(),
        }
    write_table(out, columns, fmt)
    return {"out": str(out), "what": what, "rows": len(next(iter(columns.values())))}
