"""The full-graph training loop shared by the exact modes.

A mode hands it the rank's shard and an aggregation callable; the loop is
the same everywhere (notes/exactness.md):

* loss = Σ CE over the train rows this rank counts / global train count;
* parameter gradients all-reduced with SUM (never AVG) over all ranks;
* identical initial weights from one seeded generator;
* dropout drawn for the global tensor and sliced to the held rows.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from gnntrain.checkpoint import preemption_boundary, resume_requested, run_checkpointer, slurm_restarted
from gnntrain.comm.accounting import KINDS, Phase
from gnntrain.models import GlobalDropout, ModelSpec, build_model
from gnntrain.models.kernels import SPMM_CALLS
from gnntrain.modes.base import RankShard
from gnntrain.runtime import RankContext, StageClock, peak_device_bytes, peak_host_bytes

SPLITS = ("train", "val", "test")


def model_spec(cfg, in_dim: int, num_classes: int, aggregate_first: Optional[bool] = None,
               label_inputs: bool = False) -> ModelSpec:
    m = cfg.model
    return ModelSpec(name=m.name, in_dim=in_dim, hidden=m.hidden, out_dim=num_classes, layers=m.layers,
                     dropout=m.dropout, aggregate_first=aggregate_first, gin_eps_learnable=m.gin_eps_learnable,
                     label_classes=num_classes if label_inputs else 0)


def sync_gradients(params: List[torch.nn.Parameter], comm, through_host: bool = False) -> None:
    """One flat SUM all-reduce of every parameter gradient (kind ``allreduce``).

    ``through_host``: gradients on an accelerator are staged through host
    memory (``d2h``, all-reduce over gloo, ``h2d``), as HyScale's trainers do.
    """
    if not comm.distributed:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = _flatten_dense_tensors(grads)
    if through_host and flat.device.type != "cpu":
        device = flat.device
        staged = comm.to_device(flat, torch.device("cpu"), "d2h", non_blocking=False)
        flat = comm.to_device(comm.all_reduce(staged, "allreduce"), device, "h2d", non_blocking=False)
    else:
        comm.all_reduce(flat, "allreduce")
    for p, g in zip(params, _unflatten_dense_tensors(flat, grads)):
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)


def inject_fault(rank: int, epoch: int) -> None:
    """Failure-test hook: ``GNNTRAIN_INJECT_FAULT=rank:epoch:raise|kill|hang``.

    Lets the reliability tests make one rank fail mid-run the way real ranks
    do (an exception, a SIGKILL, a silent stall); unset in normal runs. A
    requeued SLURM job runs clean: the fault stands for a failure of the
    first attempt, and the job inherits the submission's environment.
    """
    spec = os.environ.get("GNNTRAIN_INJECT_FAULT")
    if not spec or slurm_restarted():
        return
    fault_rank, fault_epoch, action = spec.split(":")
    if int(fault_rank) != rank or int(fault_epoch) != epoch:
        return
    if action == "raise":
        raise RuntimeError(f"injected fault on rank {rank} at epoch {epoch}")
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "hang":
        time.sleep(3600)


def train_full_graph(shard: RankShard, ctx: RankContext, aggregate: Callable[[torch.Tensor], torch.Tensor],
                     aggregate_first: Optional[bool] = None, setup_s: float = 0.0,
                     forward: Optional[Callable] = None, on_epoch: Optional[Callable[[int, bool], None]] = None,
                     clock: Optional[StageClock] = None, inputs_on_host: bool = False) -> Dict[str, Any]:
    """Train on ``shard``.

    ``forward(model, x, dropout)`` overrides the plain ``model(x, aggregate,
    dropout)`` for modes that re-layout between the aggregate and update
    halves (MoP); ``on_epoch(epoch, training)`` runs before each training and
    evaluation forward (SuperGCN seeds its rounding there); ``clock``'s
    stages (aggregation, quantization, ...) join the epoch's time breakdown.
    ``inputs_on_host`` keeps features, labels and the loss in host memory
    (HongTu: only the mode's chunks visit the device; the parameters live
    there). Rows in ``shard.label_input_mask`` get a learnable label embedding added
    to their features (label propagation) and are left out of the loss by
    the mode's ``count_masks``.
    """
    if forward is None:
        def forward(model, x, dropout):
            return model(x, aggregate, dropout)

    cfg = ctx.plan.config_obj
    comm, ledger = ctx.comm, ctx.comm.ledger
    dtype, device = ctx.dtype, ctx.device
    data_device = torch.device("cpu") if inputs_on_host else device
    train_cfg = cfg.train

    x = shard.features.to(device=data_device, dtype=dtype)
    labels = shard.labels.to(data_device)
    masks = {s: shard.count_masks[s].to(data_device) for s in SPLITS}
    label_mask = shard.label_input_mask.to(data_device) if shard.label_input_mask is not None else None
    spec = model_spec(cfg, x.shape[1], shard.num_classes, aggregate_first, label_inputs=label_mask is not None)
    model = build_model(spec, int(train_cfg.seed), dtype).to(device)
    params = [p for p in model.parameters()]
    optimizer = torch.optim.Adam(params, lr=float(train_cfg.lr), weight_decay=float(train_cfg.weight_decay))
    dropout = GlobalDropout(spec.dropout, int(train_cfg.seed), shard.num_global_nodes,
                            None if torch.equal(shard.global_ids, torch.arange(shard.num_global_nodes))
                            else shard.global_ids)
    n_train = max(1, shard.global_counts["train"])
    recorder = ctx.recorder
    history: List[Dict[str, Any]] = []
    accuracy: Dict[str, float] = {}
    start_epoch = 0
    checkpointer = run_checkpointer(cfg, ctx.run_dir, ctx.plan.plan_hash)
    if checkpointer is not None and resume_requested(cfg):
        state = checkpointer.load_latest()  # run_training already refused foreign or missing ones
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
            history, start_epoch = list(state["history"]), int(state["epoch"])
            accuracy = {s: history[-1][f"{s}_acc"] for s in SPLITS if f"{s}_acc" in history[-1]}
    if recorder is not None:
        recorder.start(int(train_cfg.epochs), comm_widths=model.comm_widths(), resumed=history)

    boundary = preemption_boundary(checkpointer, comm.rank)

    for epoch in range(start_epoch, int(train_cfg.epochs)):
        ledger.reset(Phase.train)
        inject_fault(comm.rank, epoch)
        model.train()
        dropout.epoch = epoch
        start = time.perf_counter()
        if clock is not None:
            clock.reset()
        if on_epoch is not None:
            on_epoch(epoch, True)
        with ledger.in_phase(Phase.train):
            logits = forward(model, model.with_label_inputs(x, labels, label_mask), dropout)
            train_mask = masks["train"]
            loss = F.cross_entropy(logits[train_mask], labels[train_mask], reduction="sum") / n_train
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            sync_gradients(params, comm)
            optimizer.step()
        epoch_time = time.perf_counter() - start
        stages = dict(sorted(clock.seconds.items())) if clock is not None else {}

        stats = [float(loss.detach())]
        evaluate = (epoch + 1) % int(train_cfg.eval_every) == 0 or epoch + 1 == int(train_cfg.epochs)
        if evaluate:
            with ledger.in_phase(Phase.eval), torch.no_grad():
                model.eval()
                if on_epoch is not None:
                    on_epoch(epoch, False)
                pred = forward(model, model.with_label_inputs(x, labels, label_mask), None).argmax(dim=1)
                stats += [float(((pred == labels) & masks[s]).sum()) for s in SPLITS]
        record = epoch_record(comm, epoch, stats[0], stats[1:] if evaluate else None, epoch_time, stages,
                              shard.global_counts)
        if evaluate:
            accuracy = {s: record[f"{s}_acc"] for s in SPLITS}
        history.append(record)
        if boundary is not None:  # before the metrics line: an epoch shown there survives preemption
            boundary.update(epoch + 1, model, optimizer, history)
        if recorder is not None:
            recorder.epoch(record)
        every = int(train_cfg.checkpoint_every)
        if checkpointer is not None and every and (epoch + 1) % every == 0 and comm.rank == 0:
            checkpointer.save(epoch + 1, model, optimizer, history)
    if boundary is not None:
        boundary.close()

    return {"history": history, "accuracy": accuracy, **run_totals(ctx, setup_s), "model": model}


def epoch_record(comm, epoch: int, loss: float, correct: Optional[List[float]], epoch_time: float,
                 stages: Dict[str, float], global_counts: Dict[str, int], loss_divisor: float = 1.0,
                 other_stage: bool = True) -> Dict[str, Any]:
    """One epoch's metrics row, reduced over ranks (a collective).

    ``loss`` (this rank's part; the row holds the sum / ``loss_divisor``) and
    ``correct`` (per split, or None when the epoch does not evaluate) are
    summed; epoch time, time blocked in collectives and each of ``stages``
    are the slowest rank's (it sets the pace); bytes are the train phase's,
    summed by kind. With ``other_stage``, what no stage claims is "other".
    """
    ledger = comm.ledger
    sent = ledger.sent_vector(Phase.train)
    comm_time = ledger.seconds(Phase.train)
    stats = [float(loss)] + list(correct or [])
    totals = comm.reduce_stats(stats + sent)
    maxima = comm.reduce_stats([float(sum(s for k, s in zip(KINDS, sent) if k != "reused")),
                                epoch_time, comm_time, *stages.values()], op="max")
    by_kind = {k: int(v) for k, v in zip(KINDS, totals[len(stats):len(stats) + len(KINDS)]) if v}
    record = {
        "epoch": epoch, "loss": totals[0] / loss_divisor,
        "epoch_time_s": maxima[1],
        "comm_bytes": int(sum(v for k, v in by_kind.items() if k != "reused")),
        "comm_by_kind": by_kind, "max_rank_send": int(maxima[0]),
        "time_breakdown_s": {"compute": max(0.0, maxima[1] - maxima[2]), "comm": maxima[2]},
    }
    if stages:
        slowest = dict(zip(stages, maxima[3:]))
        record["time_breakdown_s"].update(slowest)
        if other_stage:
            record["time_breakdown_s"]["other"] = max(0.0, maxima[1] - maxima[2] - sum(slowest.values()))
    if correct is not None:
        record.update({f"{s}_acc": totals[1 + i] / max(1, global_counts[s]) for i, s in enumerate(SPLITS)})
    return record


def run_totals(ctx: RankContext, setup_s: float = 0.0) -> Dict[str, Any]:
    """Per-rank peak memory and the setup figures, gathered from every rank (a collective)."""
    comm, device = ctx.comm, ctx.device
    # per-rank peaks: each rank fills its own slot of a zero vector, a SUM gathers them
    slots = [0.0] * (2 * comm.world_size)
    slots[comm.rank] = float(peak_host_bytes())
    slots[comm.world_size + comm.rank] = float(peak_device_bytes(device) or 0)
    peaks = comm.reduce_stats(slots)
    host, dev = [int(x) for x in peaks[:comm.world_size]], [int(x) for x in peaks[comm.world_size:]]
    any_device = any(dev)
    setup_bytes, unweighted, weighted = comm.reduce_stats([float(comm.ledger.total_sent(Phase.setup)),
                                                           float(SPMM_CALLS["unweighted"]),
                                                           float(SPMM_CALLS["weighted"])])
    return {
        "spmm_calls": {"unweighted": int(unweighted), "weighted": int(weighted)},
        "peak_memory_bytes": {"host_max_rank": max(host), "device_max_rank": max(dev) if any_device else None,
                              "host_per_rank": host, "device_per_rank": dev if any_device else None},
        "setup": {"preprocess_s": ctx.preprocess_s + setup_s, "setup_comm_bytes": int(setup_bytes)},
    }

