"""HyScale-GNN §V's performance model calibrated at the start of a run: every rank measures its
stage times on probe batches, and the model turns them into the initial split of the global batch
(or the predicted epoch of a given mode.shares)."""

from __future__ import annotations

import copy
import math
import statistics
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from gnntrain.modes.hyscale.drm import REPORTED
from gnntrain.modes.hyscale.forward import block_forward
from gnntrain.modes.hyscale.perf_model import model_iteration_s, model_shares
from gnntrain.modes.hyscale.pipeline import use_threads
from gnntrain.modes.hyscale.sampler import Block
from gnntrain.modes.strategy import sync_gradients
from gnntrain.seeding import Stream, derive_seed

# timings per probe after one warm-up; their median is the stage's cost (two were too few: one
# noisy pair moved the predicted epoch by a fifth)
PROBE_REPEATS = 8


def initial_model_shares(trainer) -> Tuple[float, ...]:
    """HyScale §III-B/§V: the initial split from the performance model calibrated at start."""
    figures = calibrate(trainer, None)
    shares = tuple(figures.pop("shares"))
    trainer.initial = {"source": "performance model", "shares": list(shares), **figures}
    return shares


def calibrate(trainer, shares: Optional[Sequence[float]]) -> Dict[str, Any]:
    """The §V model's inputs measured on every rank, and its split (``shares`` None) or its
    prediction for ``shares``. T_samp: this trainer samples an even slice of the first global
    batch nine times (the first warms up) on its pool's per-draw threads; the pool draws
    ``active`` batches at once, so the per-iteration cost is the draw time over that. The train,
    transfer, load and sync costs come from :meth:`_probe_stages` (the plan's profile-based
    guess is kept beside them)."""
    seeds = trainer.global_batch(0)[: max(1, math.ceil(trainer.batch_size / trainer.world))]
    before = torch.get_num_threads()
    use_threads(trainer.pool.per_draw if trainer.pool is not None else trainer.budget)
    times, samples = [], []
    for i in range(PROBE_REPEATS + 1):
        probe = derive_seed(trainer.seed, Stream.sampling, trainer.rank, 2**40 + i)  # no batch's k
        t0 = time.perf_counter()
        samples.append(trainer.sampler.sample(seeds, probe))
        times.append(time.perf_counter() - t0)
    use_threads(before)
    concurrent = trainer.pool.active if trainer.pool is not None else 1
    mine = statistics.median(times[1:]) / seeds.numel() / concurrent
    measured = probe_stages(trainer, seeds, samples)
    slots = [0.0] * (4 * trainer.world + 1)
    slots[trainer.rank] = mine
    for j, name in enumerate(("train", "transfer", "load")):
        slots[(j + 1) * trainer.world + trainer.rank] = measured[name] / seeds.numel()
    # every rank times the same collective: their mean
    slots[-1] = measured["sync_s"] / trainer.world
    # every rank computes the same split from the same numbers
    shared = trainer.comm.reduce_stats(slots)
    samp = shared[: trainer.world]
    costs = {
        name: shared[(j + 1) * trainer.world : (j + 2) * trainer.world]
        for j, name in enumerate(("train", "transfer", "load"))
    }
    costs["sync_s"] = shared[-1]
    if shares is None:
        shares = tuple(
            round(x, 6) for x in model_shares(costs, samp, float(trainer.o.drm_min_share))
        )
    return {
        "shares": list(shares),
        "T_samp_per_seed_s": samp,
        "model_per_seed_s": costs,
        "profile_per_seed_s": trainer.ctx.plan.mode_details["model seconds per seed"],
        "predicted_iteration_s": model_iteration_s(
            costs, samp, shares, trainer.batch_size, pipelined=bool(trainer.o.prefetch)
        ),
    }


def probe_stages(
    trainer, seeds: torch.Tensor, samples: List[Tuple[torch.Tensor, List[Block]]]
) -> Dict[str, float]:
    """§V's stage costs measured on this rank at start (the paper profiles them; the hardware
    profile's rates are a plan-time guess): the probe batch's feature gather, host→device copy,
    forward+backward with the run's dropout (on a copy of the model: training is untouched;
    ``mode.slowdown`` applied) and the iteration's fixed part (``sync_s``): the gradient
    all-reduce, the optimizer's update and the step's stats all-reduce (on a fresh optimizer of
    the run's kind over the copy), each the median of eight after a warm-up."""
    model = copy.deepcopy(trainer.model)
    params = list(model.parameters())
    optimizer = type(trainer.optimizer)(params, **trainer.optimizer.defaults)
    stats = [0.0] * len(REPORTED) * trainer.world  # a step's stats all-reduce

    def timed(fn, together: bool = False) -> float:
        seconds = []
        for _ in range(PROBE_REPEATS + 1):
            if together:  # a collective: every rank times ``fn``, then
                # every rank starts the timing at once, as every trainer computes its slice at once
                # in training: timed alone, a rank has the host's shared cores and caches to itself
                # and the model under-predicts (rank 0's probe of a 2x-slowed trainer ran 30%
                # faster than its training while the other rank idled in the next collective)
                trainer.comm.barrier()
            t0 = time.perf_counter()
            fn()
            if trainer.gpu:
                torch.cuda.synchronize(trainer.device)
            seconds.append(time.perf_counter() - t0)
        return statistics.median(seconds[1:])

    input_nodes = samples[0][0]
    x = trainer.features.index_select(0, input_nodes)
    load = timed(lambda: trainer.features.index_select(0, input_nodes))
    transfer = timed(lambda: x.to(trainer.device, copy=True)) if trainer.is_accel else 0.0
    y = trainer.shard.labels[seeds].to(trainer.device)
    # each timing trains on a batch of its own (the draws that measured T_samp), as training
    # does: one batch timed again and again is served from warm caches; the layers' adjacencies
    # are built inside the timing, as the step builds them
    batches = [
        (
            trainer.features.index_select(0, nodes).to(trainer.device),
            [
                Block(
                    *(t.to(trainer.device) for t in (bl.dst, bl.src, bl.weight)),
                    bl.num_dst,
                    bl.num_src,
                )
                for bl in blocks
            ],
        )
        for nodes, blocks in samples
    ]
    turn = iter(range(len(batches) * 2))

    def train() -> None:
        x_dev, blocks = batches[next(turn) % len(batches)]
        adjs = trainer._adjacencies(blocks)
        F.cross_entropy(block_forward(model, adjs, x_dev, trainer.dropout), y).backward()

    train_s = timed(train, together=True) * max(1.0, trainer.slowdown)

    def fixed() -> None:
        sync_gradients(params, trainer.comm, through_host=trainer.through_host)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        trainer.comm.reduce_stats(stats)

    sync = timed(fixed)
    return {"train": train_s, "transfer": transfer, "load": load, "sync_s": sync}
