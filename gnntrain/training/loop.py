"""The one epoch loop: every mode's rank strategy runs under it. It owns resume,
checkpoints, preemption, interrupts, fault injection, evaluation cadence, metrics,
progress, the model export and ``gnntrain predict``.

A mode's ``strategy`` (:class:`~gnntrain.modes.ModeSpec`) says how a rank trains one epoch and
counts correct predictions (:class:`~gnntrain.modes.strategy.RankStrategy`);
:func:`train_rank` builds it and runs it here.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from typing import Any, Callable, Dict, List, Optional

import torch

from gnntrain.checkpoint import (
    checkpoint_dir,
    make_checkpointer,
    preemption_boundary,
    resume_changes,
    resume_requested,
    run_checkpointer,
    slurm_restarted,
)
from gnntrain.comm.accounting import KINDS, NOT_TRAFFIC, Phase
from gnntrain.interrupts import STOP
from gnntrain.models.kernels import SPMM_CALLS
from gnntrain.modes.strategy import RankStrategy, build_training
from gnntrain.runtime import RankContext, peak_device_bytes, peak_host_bytes
from gnntrain.tasks import SPLITS, configured_task


def train_rank(mode, shard, ctx: RankContext) -> Dict[str, Any]:
    """One rank's whole run: the mode builds its strategy from the shard (setup), the loop trains
    it, then the run's totals and the mode's own figures are gathered (collectives, on every
    rank)."""
    start = time.perf_counter()
    prepared_peak = peak_host_bytes()  # the shard is built: what loading and preparing it took
    model, optimizer = build_training(mode.settings, shard, ctx, mode.aggregate_first)
    strategy = mode.spec.strategy(mode, shard, ctx, model, optimizer)
    attach = getattr(mode, "attach_saved_tier", None)  # the modes with the saved-tensor tier
    if attach is not None:
        attach(strategy, ctx)
    setup_s = time.perf_counter() - start
    try:
        result = EpochLoop(ctx, strategy).run()
        result.update(run_totals(ctx, setup_s, prepared_peak))
        result["model"] = strategy.model
        strategy.finish(result)
    finally:
        strategy.close()
    return result


def inject_fault(rank: int, epoch: int) -> None:
    """Failure-test hook: ``GNNTRAIN_INJECT_FAULT=rank:epoch:raise|kill|hang|ctrl-c|term-launcher``.

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
    # what a terminal's Ctrl-C does: SIGINT to the launcher and every rank, mid-epoch
    if action == "ctrl-c":
        os.killpg(os.getpgrp(), signal.SIGINT)
    if action == "term-launcher":  # a batch system's or a user's SIGTERM to the launcher alone
        os.kill(int(os.environ.get("GNNTRAIN_LAUNCHER_PID") or os.getppid()), signal.SIGTERM)


class EpochLoop:
    """Runs a :class:`~gnntrain.modes.strategy.RankStrategy` for ``train.epochs`` epochs.

    Owns resume from the newest checkpoint (model, optimizer, RNG and history),
    checkpoint cadence (``train.checkpoint_every``), the preemption boundary (an
    epoch shown in the metrics survives a SIGUSR2), fault injection for the
    reliability tests, evaluation cadence (``train.eval_every`` and the last
    epoch), the reduced metrics record per epoch and rank 0's recorder.
    """

    def __init__(self, ctx: RankContext, task: RankStrategy):
        self.ctx, self.task = ctx, task
        self.model, self.optimizer = task.model, task.optimizer
        self.global_counts = task.global_counts
        self.num_nodes = int(task.num_nodes)  # the graph's, for predict's assembly
        self.cfg = ctx.plan.config_obj
        # what the summed evaluation figures mean: the run's task turns them into metrics
        spec, options = configured_task(ctx.plan.settings.task)
        self.metrics = lambda sums: spec.metrics(options, sums, self.global_counts)

    # over the function budget: the one epoch loop: resume, evaluation, checkpoints, interrupts
    def run(self) -> Dict[str, Any]:  # noqa: C901, PLR0912, PLR0915
        """Train; returns ``{"history": [...], "accuracy": {split: value}, "metrics": {split:
        {metric: value}}}`` (accuracy: node classification's)."""
        ctx, model, optimizer, task, train_cfg = (
            self.ctx,
            self.model,
            self.optimizer,
            self.task,
            self.cfg.train,
        )
        if ctx.plan.settings.predicting:
            from gnntrain.training.predict import run_predict

            return {
                "history": [],
                "accuracy": {},
                "metrics": {},
                "predict": run_predict(ctx, model, task, self.num_nodes),
            }
        comm, ledger = ctx.comm, ctx.comm.ledger
        epochs, eval_every, every = (
            int(train_cfg.epochs),
            int(train_cfg.eval_every),
            int(train_cfg.checkpoint_every),
        )
        history: List[Dict[str, Any]] = []
        evaluated: Dict[str, Dict[str, float]] = {}  # the last evaluation's {split: {metric: v}}
        start_epoch = 0
        resumed: Optional[Dict[str, Any]] = None
        checkpointer = run_checkpointer(self.cfg, ctx.run_dir, ctx.plan.plan_hash)
        if checkpointer is not None and resume_requested(self.cfg):
            # rank 0's newest checkpoint resumes every rank: only rank 0 writes them, into its own
            # run folder, which another host need not see (run_training refused foreign or missing
            # ones, and said which it skipped)
            state = None
            if comm.rank == 0:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    state = checkpointer.load_latest()
                checkpointer.remove_partial()  # what a kill cut short (no write is in flight yet)
            state = comm.broadcast_object(state)
            if state is not None:
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
                for (
                    group
                ) in optimizer.param_groups:  # this run's lr and weight decay, not the checkpoint's
                    group["lr"], group["weight_decay"] = (
                        float(train_cfg.lr),
                        float(train_cfg.weight_decay),
                    )
                torch.set_rng_state(state["rng"])
                history, start_epoch = list(state["history"]), int(state["epoch"])
                resumed = {"from_epoch": start_epoch, "changed": resume_changes(state, self.cfg)}
                evaluated = split_metrics(history[-1])
        task.start(start_epoch, history)
        if ctx.recorder is not None:
            ctx.recorder.start(epochs, resumed=history, changed=(resumed or {}).get("changed"))
        boundary = preemption_boundary(checkpointer, comm.rank)
        interrupted: Optional[Dict[str, Any]] = None

        for epoch in range(start_epoch, epochs):
            ledger.reset(Phase.train)
            inject_fault(comm.rank, epoch)
            model.train()
            with ledger.in_phase(Phase.train):
                stats = task.train_epoch(epoch)
            correct: Optional[List[float]] = None
            if (epoch + 1) % eval_every == 0 or epoch + 1 == epochs:
                model.eval()
                with ledger.in_phase(Phase.eval), torch.no_grad():
                    correct = task.evaluate(epoch)
            record = epoch_record(
                comm,
                epoch,
                stats.loss,
                correct,
                stats.seconds,
                stats.stages,
                self.metrics,
                loss_divisor=stats.loss_divisor,
                other_stage=stats.other_stage,
                stop=STOP.requested,
            )
            # every rank's flag, reduced: all ranks stop after the same epoch
            stop = bool(record.pop("stop"))
            record.update(stats.extra)
            if resumed is not None and epoch == start_epoch and resumed["changed"]:
                # the first epoch that trained with them
                record["resume_changed"] = resumed["changed"]
            if correct is not None:
                evaluated = split_metrics(record)
            history.append(record)
            # before the metrics line: an epoch shown there survives preemption
            if boundary is not None:
                boundary.update(epoch + 1, model, optimizer, history)
            if ctx.recorder is not None:
                ctx.recorder.epoch(record)
            saved = checkpointer is not None and every and (epoch + 1) % every == 0
            if saved and comm.rank == 0:
                checkpointer.save(epoch + 1, model, optimizer, history)
            if stop and epoch + 1 < epochs:
                interrupted = {
                    "signal": STOP.name or "SIGINT",
                    "last_epoch": epoch + 1,
                    "epochs": epochs,
                }
                # so that the run can resume
                if comm.rank == 0 and ctx.run_dir is not None and not saved:
                    (
                        checkpointer
                        or make_checkpointer(
                            self.cfg, checkpoint_dir(self.cfg, ctx.run_dir), ctx.plan.plan_hash
                        )
                    ).save(epoch + 1, model, optimizer, history)
                break
        if boundary is not None:
            boundary.close()
        if comm.rank == 0 and ctx.run_dir is not None and history:
            self._export_model()
        result = {
            "history": history,
            "accuracy": {s: m["acc"] for s, m in evaluated.items() if "acc" in m},
            "metrics": evaluated,
        }
        if resumed is not None:
            result["resume"] = resumed
        if interrupted is not None:
            result["interrupted"] = interrupted
        return result

    def _export_model(self) -> None:
        """model.pt + model.yaml for gnntrain.api.load_model (rank 0 holds every parameter, as every
        rank does)."""
        from gnntrain.models.export import save_trained_model

        cfg, plan = self.cfg, self.ctx.plan
        ds = cfg.dataset
        extra = {
            "mode": plan.mode,
            "world_size": plan.world_size,
            "epochs": int(cfg.train.epochs),
            "plan_hash": plan.plan_hash,
            "dataset": {
                "name": str(ds.name),
                "path": ds.get("path"),
                "num_nodes": int(ds.num_nodes),
                "feat_dim": int(ds.feat_dim),
                "num_classes": int(ds.num_classes),
            },
            # what the model was trained for, and what its outputs mean (a regression's
            # standardisation): load_model rebuilds the task's head from it
            "task": dict(self.ctx.plan.settings.task or {"name": "node_classification"}),
            **getattr(getattr(self.task, "task", None), "card", dict)(),
        }
        save_trained_model(
            self.ctx.run_dir, self.model, bool(cfg.model.self_loop), plan.dtype, extra
        )


def epoch_record(
    comm,
    epoch: int,
    loss: float,
    correct: Optional[List[float]],
    epoch_time: float,
    stages: Dict[str, float],
    metrics: Callable[[List[float]], Dict[str, float]],
    loss_divisor: float = 1.0,
    other_stage: bool = True,
    stop: bool = False,
) -> Dict[str, Any]:
    """One epoch's metrics row, reduced over ranks (a collective).

    ``loss`` (this rank's part; the row holds the sum / ``loss_divisor``) and ``correct`` (the
    evaluation sums, or None when the epoch does not evaluate) are summed, the sums turned into
    ``<split>_<metric>`` fields by ``metrics`` (the task's); epoch time, time blocked in collectives
    and each of ``stages`` are the slowest rank's (it sets the pace); bytes are the train phase's,
    summed by kind. With ``other_stage``, what no stage claims is "other".
    """
    ledger = comm.ledger
    sent = ledger.sent_vector(Phase.train)
    comm_time = ledger.seconds(Phase.train)
    stats = [float(loss)] + list(correct or [])
    totals = comm.reduce_stats(stats + sent)
    maxima = comm.reduce_stats(
        [
            float(sum(s for k, s in zip(KINDS, sent) if k not in NOT_TRAFFIC)),
            epoch_time,
            comm_time,
            *stages.values(),
            float(stop),
        ],
        op="max",
    )
    stop_any = maxima.pop() > 0  # a stop any rank was asked for (Ctrl-C, SIGTERM), agreed by all
    by_kind = {k: int(v) for k, v in zip(KINDS, totals[len(stats) : len(stats) + len(KINDS)]) if v}
    record = {
        "epoch": epoch,
        "loss": totals[0] / loss_divisor,
        "epoch_time_s": maxima[1],
        "comm_bytes": int(sum(v for k, v in by_kind.items() if k not in NOT_TRAFFIC)),
        "comm_by_kind": by_kind,
        "max_rank_send": int(maxima[0]),
        "time_breakdown_s": {"compute": max(0.0, maxima[1] - maxima[2]), "comm": maxima[2]},
    }
    if stages:
        slowest = dict(zip(stages, maxima[3:]))
        record["time_breakdown_s"].update(slowest)
        if other_stage:
            record["time_breakdown_s"]["other"] = max(
                0.0, maxima[1] - maxima[2] - sum(slowest.values())
            )
    if correct is not None:
        record.update(metrics(totals[1 : 1 + len(correct)]))
    record["stop"] = stop_any
    return record


def split_metrics(record: Dict[str, Any]) -> Dict[str, Dict[str, float]]:
    """An epoch record's evaluation fields (``<split>_<metric>``) as {split: {metric: value}}."""
    found: Dict[str, Dict[str, float]] = {}
    for key, value in record.items():
        split, _, metric = key.partition("_")
        if split in SPLITS and metric and isinstance(value, (int, float)):
            found.setdefault(split, {})[metric] = float(value)
    return found


def run_totals(ctx: RankContext, setup_s: float = 0.0, prepared_peak: int = 0) -> Dict[str, Any]:
    """Per-rank peak memory (the whole run's, and the host peak once the shard was prepared, before
    the model: what loading and preparing took) and the setup figures, gathered from every rank (a
    collective)."""
    comm, device, world = ctx.comm, ctx.device, ctx.comm.world_size
    # per-rank peaks: each rank fills its own slots of a zero vector, a SUM gathers them
    slots = [0.0] * (3 * world)
    slots[comm.rank] = float(peak_host_bytes())
    slots[world + comm.rank] = float(peak_device_bytes(device) or 0)
    slots[2 * world + comm.rank] = float(prepared_peak)
    peaks = comm.reduce_stats(slots)
    host, dev, prepared = (
        [int(x) for x in peaks[:world]],
        [int(x) for x in peaks[world : 2 * world]],
        [int(x) for x in peaks[2 * world :]],
    )
    any_device = any(dev)
    setup_bytes, unweighted, weighted = comm.reduce_stats(
        [
            float(comm.ledger.total_sent(Phase.setup)),
            float(SPMM_CALLS["unweighted"]),
            float(SPMM_CALLS["weighted"]),
        ]
    )
    return {
        "spmm_calls": {"unweighted": int(unweighted), "weighted": int(weighted)},
        "peak_memory_bytes": {
            "host_max_rank": max(host),
            "device_max_rank": max(dev) if any_device else None,
            "host_per_rank": host,
            "device_per_rank": dev if any_device else None,
            "host_prepared_per_rank": prepared,
        },
        "setup": {"preprocess_s": ctx.preprocess_s + setup_s, "setup_comm_bytes": int(setup_bytes)},
    }
