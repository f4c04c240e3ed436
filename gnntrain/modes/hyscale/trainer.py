"""One HyScale trainer rank: the pipeline, weighted gradient sync, DRM and evaluation."""

from __future__ import annotations

import copy
import functools
import math
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from gnntrain.comm.accounting import CommLedger
from gnntrain.models import SparseAdjacency
from gnntrain.models.export import rows_output
from gnntrain.modes.base import RankShard
from gnntrain.modes.hyscale.batches import global_batches, initial_shares, trainer_slice
from gnntrain.modes.hyscale.calibration import calibrate, initial_model_shares
from gnntrain.modes.hyscale.config import DRM_LAG, DRM_WARMUP, HyScaleConfig
from gnntrain.modes.hyscale.drm import REPORTED, STAGES, DRMState, ShareSchedule, drm_step
from gnntrain.modes.hyscale.forward import block_forward
from gnntrain.modes.hyscale.pipeline import (
    Batch,
    BatchPipeline,
    SamplerPool,
    one_producer,
    use_threads,
)
from gnntrain.modes.hyscale.report import mode_report
from gnntrain.modes.hyscale.sampler import Block, make_sampler
from gnntrain.modes.hyscale.threads import on_this_host, split_threads
from gnntrain.modes.staging import HostToDeviceStager, StagedRows
from gnntrain.modes.strategy import EpochStats, RankStrategy, sync_gradients
from gnntrain.plan_types import RunSettings
from gnntrain.runtime import RankContext
from gnntrain.seeding import Stream, derive_seed
from gnntrain.tasks import SPLITS


class HyScaleTrainer(RankStrategy):
    """One trainer rank (§III-B): pipeline, weighted sync, DRM, evaluation; an
    :class:`~gnntrain.modes.strategy.RankStrategy` that the one epoch loop runs."""

    def __init__(
        self,
        options: HyScaleConfig,
        shard: RankShard,
        ctx: RankContext,
        settings: RunSettings,
        model,
        optimizer,
    ):
        self.o, self.shard, self.ctx, self.settings = options, shard, ctx, settings
        self.comm, self.device, self.dtype = ctx.comm, ctx.device, ctx.dtype
        self.rank, self.world = ctx.comm.rank, ctx.comm.world_size
        cpu = int(self.o.cpu_trainers)
        self.accel = [r >= cpu for r in range(self.world)]
        self.is_accel = self.accel[self.rank]
        self.gpu = self.device.type == "cuda"
        self.seed = int(settings.train.seed)
        dst, src, w = shard.edges
        self.sampler = make_sampler(
            self.o.sampler.value, dst, src, w, shard.num_global_nodes, self.o.fanouts
        )
        self.drop_gen = torch.Generator(device=self.device)  # reseeded per global batch (see step)
        self.features = shard.features.to(self.dtype)  # host memory only (§III-B)
        # features reach the device through reusable pinned buffers on the stager's side stream (the
        # stager HongTu's chunk loads use); three buffers: the load thread gathers at most two
        # batches ahead of the transfer that empties them (the pipeline's queues of one)
        self.stager = HostToDeviceStager(self.device, buffers=3)
        if self.gpu:
            self.stream = self.stager.stream  # transfers overlap compute on the side stream
        # gloo reduces host buffers: stage GPU gradients
        self.through_host = ctx.plan.backend == "gloo"
        self.train_ids = shard.count_masks["train"].nonzero().flatten()
        self.schedule = ShareSchedule()
        slow = [float(s) for s in self.o.slowdown]
        self.slowdown = slow[self.rank] if slow else 1.0
        self.model, self.optimizer = model, optimizer  # the epoch loop's (build_training)
        self.params = list(self.model.parameters())
        self.global_counts, self.num_nodes = shard.global_counts, shard.num_global_nodes
        self.batch_size = int(self.o.batch_size)
        self.per_epoch = math.ceil(self.train_ids.numel() / self.batch_size)
        self.n_train = max(1, shard.global_counts["train"])
        self.evaluator = Evaluator(self, self.model) if self.rank == 0 else None
        # host threads by task (§III-B, §IV-A): every rank's split of its planned threads (capped by
        # the cores this machine gives it), the same on every rank; DRM's thread state starts from
        # the first CPU trainer's (its balance_thread moves CPU tasks' threads)
        plan = ctx.plan
        budgets = on_this_host([plan.threads_of(r) for r in range(self.world)])
        self.splits = [
            split_threads(b, str(d).startswith("cuda")) for b, d in zip(budgets, plan.rank_devices)
        ]
        self.budget = budgets[self.rank]
        self.threads = dict(self.splits[self.rank])
        self._batch_cache: Dict[int, List[torch.Tensor]] = {}
        self.pool: Optional[SamplerPool] = None
        self.initial: Dict[str, Any] = {}

    # ---- stages
    def global_batch(self, k: int) -> torch.Tensor:
        """Global batch k (epoch k // per_epoch), from the epoch's seeded permutation."""
        epoch, j = divmod(k, self.per_epoch)
        if epoch not in self._batch_cache:
            self._batch_cache = {e: b for e, b in self._batch_cache.items() if e >= epoch - 1}
            self._batch_cache[epoch] = global_batches(
                self.train_ids, self.batch_size, self.seed, epoch
            )
        return self._batch_cache[epoch][j]

    def draw(self, k: int) -> Batch:
        """Sample this trainer's slice of global batch k: one unit, seeded by (seed, trainer, k), on
        a sampler pool thread (or the caller's)."""
        shares = self.schedule.get(k)
        t0 = time.perf_counter()
        seeds, sizes = trainer_slice(self.global_batch(k), shares, self.rank)
        input_nodes, blocks = self.sampler.sample(
            seeds, derive_seed(self.seed, Stream.sampling, self.rank, k)
        )
        return Batch(
            k,
            seeds,
            sizes,
            shares,
            input_nodes,
            blocks,
            seconds={"sample": time.perf_counter() - t0},
        )

    def load(self, b: Batch) -> Batch:
        """The feature loader (§III-B): gather the batch's input rows (on CUDA into a pinned
        buffer), in k order, on T_Load threads."""
        if self.pool is not None:
            use_threads(self.threads["T_Load"])
        t1 = time.perf_counter()
        b.x = self.stager.gather(self.features, b.input_nodes)
        b.y = self.shard.labels[b.seeds]
        b.seconds["load"] = time.perf_counter() - t1
        return b

    def produce(self, k: int) -> Batch:
        """Batch k sampled, loaded and transferred on one thread: the pool's draw where the rank
        has fewer threads than the pipeline's stages (:func:`one_producer`). The pool draws ahead
        across an epoch's end, so the copies are counted in a ledger of the batch's own, which the
        epoch that trains it absorbs (:meth:`train_epoch`)."""
        b = self.load(self.draw(k))
        b.copies = CommLedger()
        return self.transfer(b)

    def transfer(self, b: Batch) -> Batch:
        """Host → accelerator: features (through the stager's pinned buffers) and topology
        (``h2d``, in the batch's own ledger where it has one); CPU trainers skip it."""
        t0 = time.perf_counter()
        staged: StagedRows = b.x
        ledger = b.copies
        if not self.is_accel:
            b.x = staged.rows
        elif self.gpu:
            to = functools.partial(self.comm.to_device, ledger=ledger)
            with torch.cuda.stream(self.stream):
                issued = time.perf_counter()
                b.x = self.stager.copy(staged)
                # landed: its time is the copy's, as to_device's below are
                self.stream.synchronize()
                self.comm.record_copy(
                    "h2d",
                    staged.rows.numel() * staged.rows.element_size(),
                    time.perf_counter() - issued,
                    ledger,
                )
                b.y = to(b.y, self.device)
                b.blocks = [
                    Block(
                        to(bl.dst, self.device),
                        to(bl.src, self.device),
                        to(bl.weight, self.device),
                        bl.num_dst,
                        bl.num_src,
                    )
                    for bl in b.blocks
                ]
                b.ready = torch.cuda.Event()
                b.ready.record(self.stream)
            # the transfer stage (T_trans, which DRM balances) ends when its bytes land
            b.ready.synchronize()
        # an accelerator trainer emulated on a CPU-only host: a real host copy, counted the same way
        else:
            to = functools.partial(self.comm.to_device, ledger=ledger)
            b.x = to(staged.rows, self.device)
            b.blocks = [
                Block(
                    to(bl.dst, self.device),
                    to(bl.src, self.device),
                    to(bl.weight, self.device),
                    bl.num_dst,
                    bl.num_src,
                )
                for bl in b.blocks
            ]
        b.seconds["transfer"] = time.perf_counter() - t0
        return b

    def _adjacencies(self, blocks: Sequence[Block]) -> List[SparseAdjacency]:
        """A batch's sampled blocks as the layers' adjacencies, with the plan's kernel on this
        trainer's device."""
        return [
            SparseAdjacency(
                bl.dst,
                bl.src,
                bl.weight,
                bl.num_dst,
                bl.num_src,
                kernel=self.ctx.plan.kernel,
                device=self.device,
            )
            for bl in blocks
        ]

    def dropout(self, h: torch.Tensor) -> torch.Tensor:
        """Per-batch dropout from a generator reseeded per (trainer, global batch), so a resumed run
        replays it."""
        p = float(self.settings.model.dropout)
        if p <= 0:
            return h
        keep = torch.rand(h.shape, generator=self.drop_gen, device=h.device, dtype=h.dtype) >= p
        return h * keep / (1.0 - p)

    def step(self, b: Batch, model, optimizer, params) -> Tuple[float, float, float]:
        """Forward/backward on this trainer's slice, weighted SUM all-reduce, update:
        (Σ CE, train seconds, sync seconds)."""
        t0, cpu0 = time.perf_counter(), time.thread_time()
        total = sum(b.sizes)
        optimizer.zero_grad(set_to_none=False)
        ce = 0.0
        # made on the side stream: keep the allocator from reusing them too early
        if b.ready is not None:
            for t in [b.x, b.y] + [t for bl in b.blocks for t in (bl.dst, bl.src, bl.weight)]:
                t.record_stream(torch.cuda.current_stream(self.device))
        if b.seeds.numel():
            # dropout masks depend on (seed, trainer, global batch) only, so a resumed run replays
            # them
            self.drop_gen.manual_seed(derive_seed(self.seed, Stream.batch_dropout, self.rank, b.k))
            adjs = self._adjacencies(b.blocks)
            x = b.x.to(self.device, non_blocking=True)
            y = b.y.to(self.device)
            logits = block_forward(model, adjs, x, self.dropout)
            loss_sum = F.cross_entropy(logits, y, reduction="sum")
            (loss_sum / total).backward()  # weight b_i/B on this trainer's mean gradient
            ce = float(loss_sum.detach())
        if self.gpu:
            torch.cuda.synchronize(self.device)
        train_s = time.perf_counter() - t0
        if self.slowdown > 1:  # emulate a slower device: the same work takes slowdown x as long
            time.sleep((self.slowdown - 1.0) * self._work_seconds(train_s, cpu0))
            train_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        sync_gradients(params, self.comm, through_host=self.through_host)
        sync_s = time.perf_counter() - t1
        optimizer.step()
        return ce, train_s, sync_s

    def _work_seconds(self, wall_s: float, cpu0: float) -> float:
        """The step's work, which ``mode.slowdown`` stretches: on a host trainer computing on its
        one thread, that thread's CPU time (a slower device does the same work slower; it does not
        lengthen the time the thread waited for a core that the other ranks and the sampler pool
        share); elsewhere (a device's kernels, or intra-op work on other threads) the wall time."""
        if self.device.type == "cpu" and torch.get_num_threads() == 1:
            return min(wall_s, time.thread_time() - cpu0)
        return wall_s

    # ---- the RankStrategy hooks
    def finish(self, result: Dict[str, Any]) -> None:
        if self.pool is not None:
            self.pool.close()
        history = result["history"]
        result["mode_report"] = mode_report(self, history) if self.rank == 0 and history else None

    def start(self, first_epoch: int, history: List[Dict[str, Any]]) -> None:
        """DRM state, the share schedule and the sampler pool: the resumed run's last shares, else
        ``mode.shares``, else the §V performance model's split with T_samp measured here."""
        cpu_ranks = [r for r in range(self.world) if not self.accel[r]]
        threads = dict(self.splits[cpu_ranks[0] if cpu_ranks else 0])
        if self.o.prefetch:
            workers = (
                min(self.threads["T_SC"], DRM_LAG)
                if getattr(self.sampler, "parallel", False)
                else 1
            )
            end = int(self.settings.train.epochs) * self.per_epoch
            self.pool = SamplerPool(
                self.produce if one_producer(self.budget) else self.draw,
                workers,
                self.threads["T_SC"],
                DRM_LAG - 1,
                end,
                self.schedule.get,
            )
        if history:
            shares = tuple(history[-1]["hyscale"]["shares"])
            threads = dict(history[-1]["hyscale"].get("threads", threads))
            self.initial = dict(history[0]["hyscale"].get("initial", {}))
        elif self.o.shares:  # the user's split; the calibrated model still predicts its epoch
            shares = initial_shares(self.o, self.world)
            self.initial = {
                "source": "mode.shares",
                "shares": list(shares),
                **calibrate(self, shares),
            }
        else:
            shares = initial_model_shares(self)
        self.state = DRMState(shares=shares, threads=threads)
        self._apply_threads(threads)
        first = first_epoch * self.per_epoch
        for k in range(first, first + DRM_LAG):
            self.schedule.set(k, self.state.shares)

    def _apply_threads(self, threads: Dict[str, int]) -> None:
        """balance_thread's moves, made real on a CPU trainer (§IV-A): the sampler pool's threads
        (T_SC), the loader's (T_Load) and the training threads of this rank's main thread (T_TC). A
        serial run (prefetch=false) runs every stage on the main thread with the whole budget."""
        if self.is_accel:
            return
        self.threads = dict(threads)
        if self.pool is None:
            use_threads(self.budget)
            return
        self.pool.resize(threads["T_SC"])
        use_threads(threads["T_TC"])

    def train_epoch(self, epoch: int) -> EpochStats:
        o, comm = self.o, self.comm
        first_k = epoch * self.per_epoch
        ks = list(range(first_k, first_k + self.per_epoch))
        iterations, ce_sum, t_epoch = [], 0.0, time.perf_counter()
        stage_tot = dict.fromkeys(STAGES + ("sync", "wait"), 0.0)
        pipeline = BatchPipeline(
            self.draw,
            self.load,
            self.transfer,
            ks,
            bool(o.prefetch),
            self.pool,
            whole_batches=one_producer(self.budget),
        )
        t_wait = time.perf_counter()
        for b in pipeline:
            wait_s = time.perf_counter() - t_wait
            if b.copies is not None:  # made ahead by the one producer: this epoch's traffic
                comm.ledger.absorb(b.copies)
            t_iter = time.perf_counter() - wait_s
            ce, train_s, sync_s = self.step(b, self.model, self.optimizer, self.params)
            ce_sum += ce
            mine = dict(b.seconds, train=train_s, sync=sync_s, wait=wait_s)
            for key in stage_tot:
                stage_tot[key] += mine.get(key, 0.0)
            # every trainer's stage times, for DRM and the log (bookkeeping, not training traffic)
            # busy: from asking for the batch to the end of the backward (the serial stages, or
            # the wait on the pipeline with prefetch, plus training): what DRM's shares divide
            mine["busy"] = wait_s + train_s
            width = len(REPORTED)
            slots = [0.0] * width * self.world
            slots[self.rank * width : (self.rank + 1) * width] = [mine[s] for s in REPORTED]
            gathered = comm.reduce_stats(slots)
            times = [
                dict(zip(REPORTED, gathered[r * width : (r + 1) * width]))
                for r in range(self.world)
            ]
            iter_s = time.perf_counter() - t_iter
            decision = ""
            if o.drm and b.k >= DRM_WARMUP:
                moved = self.state.threads
                self.state = drm_step(
                    self.state, times, b.sizes, self.accel, float(o.drm_ema), float(o.drm_min_share)
                )
                decision = f"{self.state.bottleneck}: {self.state.action}"
                if self.state.threads != moved:
                    self._apply_threads(self.state.threads)
            self.schedule.set(b.k + DRM_LAG, self.state.shares)
            iterations.append(
                {
                    "iter": b.k,
                    "shares": [round(s, 5) for s in b.shares],
                    "batch": b.sizes,
                    "input_rows": int(b.input_nodes.numel()),
                    "stage_s": {s: [round(t[s], 6) for t in times] for s in STAGES + ("sync",)},
                    "iter_s": round(iter_s, 6),
                    "drm": decision,
                    "threads": dict(self.state.threads),
                }
            )
            t_wait = time.perf_counter()
        extra = {
            "hyscale": {
                "shares": list(self.state.shares),
                "threads": dict(self.state.threads),
                "iterations": iterations,
                "initial": self.initial,
            }
        }
        return EpochStats(
            loss=ce_sum,
            seconds=time.perf_counter() - t_epoch,
            stages=stage_tot,
            loss_divisor=self.n_train,
            other_stage=False,
            extra=extra,
        )

    def predict(self, what: str, layer: int):
        """Rank 0's full-neighbour inference, layer by layer over the whole graph (its evaluation's
        forward)."""
        if self.evaluator is None:
            return None
        return self.evaluator.predict(what, layer)

    def evaluate(self, epoch: int) -> List[float]:
        """Rank 0 evaluates on the whole graph; the others add nothing to the sums."""
        return self.evaluator.correct() if self.evaluator is not None else [0.0, 0.0, 0.0]


class Evaluator:
    """Full-neighbour inference on rank 0 (fanout -1 everywhere = the whole graph,
    layer by layer, with the global-degree weights) on the host."""

    def __init__(self, trainer: HyScaleTrainer, model):
        self.trainer, self.model = trainer, model
        dst, src, w = trainer.shard.edges
        n = trainer.shard.num_global_nodes
        self.adj = SparseAdjacency(dst, src, w, n, n, kernel=trainer.ctx.plan.kernel)
        self.masks = trainer.shard.count_masks

    def predict(self, what: str, layer: int):
        model = self._host_model()
        values = rows_output(
            model, lambda: model(self.trainer.features.cpu(), self.adj.spmm), what, layer
        )
        return torch.arange(self.trainer.shard.num_global_nodes), values

    def _host_model(self):
        """The model in eval mode on the host (a copy when it trains on a device)."""
        model = self.model
        if next(model.parameters()).device.type != "cpu":
            model = copy.deepcopy(model).cpu()
        model.eval()
        return model

    def correct(self) -> List[float]:
        model = self._host_model()
        with torch.no_grad():
            pred = model(self.trainer.features.cpu(), self.adj.spmm).argmax(dim=1)
        self.model.train()
        labels = self.trainer.shard.labels
        return [float(((pred == labels) & self.masks[s]).sum()) for s in SPLITS]
