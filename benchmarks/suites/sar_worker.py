"""SAR's side of the scaleout suite's peer row (benchmarks/suites/sar_peer.py), run by the DGL
stack's interpreter: ``python sar_worker.py COMMAND ...``. It imports numpy at the top and torch,
DGL and SAR only inside the commands that need them; never gnntrain.

SAR: H. Mostafa, "Sequential Aggregation and Rematerialization: Distributed Full-batch Training of
Graph Neural Networks on Large Graphs", MLSys 2022 (github.com/IntelLabs/SAR). Each worker holds
the in-edges of its own partition as N graph shards; an aggregation fetches one remote partition's
features at a time, and the backward pass of a sum aggregation (GCN's) sends the gradients back
without rematerialising anything (SAR's default mode).

Commands:

* ``probe``: exit 0 where ``import sar`` works here, else print the one-line skip and exit 3;
* ``edges GRAPH``: the COO (with self-loops) the partitioning builds, as JSON (tests, debugging);
* ``partition GRAPH OUT PARTS``: DGL's METIS partitioning (``dgl.distributed.partition_graph``, as
  SAR's examples/partition_graph.py calls it) of gnntrain's on-disk graph into OUT;
* ``launch CONFIG_JSON``: start the workers (one process each, 1 thread), wait, print their records;
* ``train CONFIG_JSON RANK``: one worker: the 3-layer GCN, its epochs, its epoch times and VmHWM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import numpy as np

RESULT = "RESULT "
EXIT_NO_SAR = 3


def skip_line(python: str) -> str:
    """The suite's one line where SAR does not import in ``python``."""
    return (
        f"SAR: not run (sar does not import in {python}; "
        "make sar-venv SAR_DIR=/path/to/a/checkout/of/IntelLabs/SAR installs it)"
    )


def vm_hwm() -> int:
    """This process's peak resident set (Linux VmHWM), bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def coo_with_self_loops(graph: Path) -> Tuple[np.ndarray, np.ndarray, int]:
    """(src, dst, num_nodes), int64, of gnntrain's on-disk graph (gnntrain/data/ondisk.py: CSR by
    destination, row v's in-neighbours are indices[indptr[v]:indptr[v+1]], no self-loops) with a
    self-loop on every node appended: gnntrain's GCN aggregates over A + I, and so does DGL's
    GraphConv once the graph carries the loops."""
    indptr = np.load(graph / "indptr.npy", mmap_mode="r")
    n = len(indptr) - 1
    loops = np.arange(n, dtype=np.int64)
    src = np.empty(int(indptr[-1]) + n, dtype=np.int64)
    src[: int(indptr[-1])] = np.load(graph / "indices.npy", mmap_mode="r")
    src[int(indptr[-1]) :] = loops
    dst = np.empty_like(src)
    dst[: int(indptr[-1])] = np.repeat(loops, np.diff(indptr))
    dst[int(indptr[-1]) :] = loops
    return src, dst, n


def partition(graph: Path, out: Path, parts: int) -> dict:
    """DGL's METIS partitioning of ``graph`` into ``parts`` (1-hop halos, balanced training nodes
    and edges, as SAR's examples/partition_graph.py): the folder SAR's loader reads."""
    import dgl
    import torch

    start = time.perf_counter()
    src, dst, n = coo_with_self_loops(graph)
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
    del src, dst
    g.ndata["features"] = torch.from_numpy(np.load(graph / "features.npy"))
    g.ndata["labels"] = torch.from_numpy(np.load(graph / "labels.npy"))
    for name in ("train_mask", "val_mask", "test_mask"):
        g.ndata[name] = torch.from_numpy(np.load(graph / f"{name}.npy"))
    edges = g.num_edges()
    dgl.distributed.partition_graph(
        g,
        "graph",
        parts,
        str(out),
        num_hops=1,
        part_method="metis",
        balance_ntypes=g.ndata["train_mask"],
        balance_edges=True,
    )
    return {"seconds": time.perf_counter() - start, "edges": edges, "peak": vm_hwm()}


def _model(d_in: int, hidden: int, classes: int, layers: int, dropout: float):
    """gnntrain's model=gcn: GraphConv (norm='both': D_out^-1/2 (A+I) D_in^-1/2 with the loops in
    the graph) per layer, relu then dropout between layers."""
    import dgl
    import torch
    import torch.nn.functional as F

    class GCN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [d_in] + [hidden] * (layers - 1) + [classes]
            self.convs = torch.nn.ModuleList(
                dgl.nn.GraphConv(a, b, norm="both", allow_zero_in_degree=True)
                for a, b in zip(dims[:-1], dims[1:])
            )

        def forward(self, graph, h):
            for i, conv in enumerate(self.convs):
                h = conv(graph, h)
                if i < len(self.convs) - 1:
                    h = F.dropout(F.relu(h), dropout, self.training)
            return h

    return GCN()


def train(config: dict, rank: int) -> dict:
    """One SAR worker: the partition's data, the full-graph shard manager, then ``epochs`` steps
    of the GCN (Adam, the global mean cross-entropy over training nodes, gradients summed across
    workers by ``sar.gather_grads``)."""
    import sar
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    world = config["world"]
    # torch.distributed first, on loopback: sar.initialize_comms then only records it (it would
    # otherwise pick a network interface of its own with ifaddr)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{config['port']}", rank=rank, world_size=world
    )
    sar.initialize_comms(rank, world, "127.0.0.1", "gloo")
    data = sar.load_dgl_partition_data(config["parts_json"], rank, torch.device("cpu"))
    features = sar.suffix_key_lookup(data.node_features, "features").float()
    labels = sar.suffix_key_lookup(data.node_features, "labels").long()
    train_idx = sar.suffix_key_lookup(data.node_features, "train_mask").bool().nonzero().view(-1)
    graph = sar.construct_full_graph(data)
    del data
    model = _model(
        features.shape[1], config["hidden"], config["classes"], config["layers"], config["dropout"]
    )
    sar.sync_params(model)
    n_train = torch.tensor([train_idx.numel()])
    sar.comm.all_reduce(n_train, dist.ReduceOp.SUM, move_to_comm_device=True)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"], weight_decay=config["wd"])
    loaded, times, losses = vm_hwm(), [], []
    for _ in range(config["epochs"]):
        start = time.perf_counter()
        logits = model(graph, features)
        loss = F.cross_entropy(logits[train_idx], labels[train_idx], reduction="sum")
        loss = loss / n_train.item()
        opt.zero_grad()
        loss.backward()
        sar.gather_grads(model)
        opt.step()
        times.append(time.perf_counter() - start)
        total = loss.detach().clone()
        sar.comm.all_reduce(total, dist.ReduceOp.SUM, move_to_comm_device=True)
        losses.append(float(total))
    dist.barrier()
    record = {"rank": rank, "epoch_time_s": times, "losses": losses, "nodes": len(labels)}
    return {**record, "peak": vm_hwm(), "peak_loaded": loaded}


def launch(config_path: Path) -> List[dict]:
    """The ``world`` workers, each a process of this interpreter, to their end: their records
    (rank order); a worker that fails fails the launch (the others are stopped)."""
    config = json.loads(config_path.read_text())
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "train", str(config_path), str(rank)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(config["world"])
    ]
    outs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=config["timeout_s"])
        outs.append(out)
        if proc.returncode != 0:
            for other in procs:
                other.kill()
            raise SystemExit(f"SAR worker {len(outs) - 1} exited {proc.returncode}")
    return [json.loads(_result(out)) for out in outs]


def _result(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith(RESULT)]
    if not lines:
        raise SystemExit("a SAR worker printed no result")
    return lines[-1][len(RESULT) :]


def main(argv: List[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "probe":
        try:
            import sar  # noqa: F401
        except Exception:
            print(skip_line(sys.executable))
            return EXIT_NO_SAR
        return 0
    if command == "edges":
        src, dst, _ = coo_with_self_loops(Path(args[0]))
        result = {"src": src.tolist(), "dst": dst.tolist()}
    elif command == "partition":
        result = partition(Path(args[0]), Path(args[1]), int(args[2]))
    elif command == "launch":
        result = launch(Path(args[0]))
    elif command == "train":
        result = train(json.loads(Path(args[0]).read_text()), int(args[1]))
    else:
        raise SystemExit(f"sar_worker: unknown command {command!r}")
    print(RESULT + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
