"""mode=hyscale's sampler pool, reserved cores, model-initialised shares and balance_thread
(docs/design.md#hyscale, HyScale-GNN §III-B, §IV-A, §V): the pool draws the same batches as a
serial loop whatever its thread count; the initial shares are the performance model's; a DRM
thread move resizes the pool and the training threads; the plan never hands out more threads
than the host has cores."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch
from conftest import compose

from gnntrain.comm.accounting import CommLedger, Phase
from gnntrain.data import load_dataset
from gnntrain.modes.hyscale.drm import DRMState, drm_step
from gnntrain.modes.hyscale.perf_model import model_shares
from gnntrain.modes.hyscale.pipeline import BatchPipeline, SamplerPool, one_producer, use_threads
from gnntrain.modes.hyscale.sampler import TorchNeighborSampler
from gnntrain.modes.hyscale.threads import on_this_host, rank_budgets, split_threads
from gnntrain.modes.hyscale.trainer import HyScaleTrainer
from gnntrain.modes.row_edges import graph_tensors
from gnntrain.plan_types import RunSettings

HS = ["mode=hyscale", "mode.cpu_trainers=1", "mode.accel_trainers=1"]


def _sampler():
    cfg = compose(["dataset=csbm", "dataset.num_nodes=600", "dataset.avg_degree=8", "model=sage"])
    data = load_dataset(cfg)
    src, dst, w = graph_tensors(data, RunSettings.of(cfg))
    return TorchNeighborSampler(dst, src, w, data.num_nodes, [6, 4]), data.num_nodes


def _flat(result):
    nodes, blocks = result
    return [nodes] + [t for b in blocks for t in (b.dst, b.src, b.weight)]


def test_pool_draws_the_same_batches_as_a_serial_loop():
    """Three workers (and a resize to one mid-run) draw batches k = 0..11 concurrently: each equals
    the serial draw with the same (seed, k), and they come back in k order."""
    sampler, n = _sampler()
    gen = torch.Generator().manual_seed(3)
    seeds = {k: torch.randperm(n, generator=gen)[:40] for k in range(12)}
    serial = {k: _flat(sampler.sample(seeds[k], 1000 + k)) for k in range(12)}
    threads_seen = set()

    def draw(k):
        threads_seen.add(threading.current_thread().name)
        return k, _flat(sampler.sample(seeds[k], 1000 + k))

    pool = SamplerPool(draw, workers=3, threads=3, depth=4, end=12)
    try:
        for k in range(12):
            if k == 6:
                pool.resize(1)
                assert pool.active == 1
            got_k, got = pool.get(k)
            assert got_k == k and len(got) == len(serial[k])
            assert all(torch.equal(a, b) for a, b in zip(got, serial[k])), k
    finally:
        pool.close()
    assert len(threads_seen) > 1 and all(
        name.startswith("hyscale-sampler") for name in threads_seen
    )


def test_initial_shares_are_the_performance_models(train):
    """No mode.shares: the split comes from the §V model (the emulated 50x slower CPU trainer's
    training cost per seed) with T_samp measured at start; the report holds the model's inputs and
    the split equals model_shares over them; the first batch uses it."""
    s = train(
        ["dataset=csbm"]
        + HS
        + [
            "mode.fanouts=[4,3]",
            "mode.batch_size=64",
            "mode.drm=false",
            "mode.slowdown=[50,1]",
            "model=sage",
            "train.epochs=1",
        ]
    )
    report = s["mode_report"]
    assert report["initial_shares_source"] == "performance model"
    expected = model_shares(report["model_per_seed_s"], report["model_T_samp_per_seed_s"], 0.05)
    assert report["initial_shares"] == pytest.approx(list(expected), abs=1e-6)
    assert report["initial_shares"][0] < 0.3  # not the even split: the slowed trainer gets less
    assert report["shares_per_iteration"][0] == pytest.approx(report["initial_shares"], abs=1e-5)
    assert report["predicted_vs_measured_epoch_s"]["predicted"] > 0


class _Rank:
    """The parts of a trainer that ``_apply_threads`` reads."""

    def __init__(self, pool):
        self.is_accel, self.pool, self.budget, self.threads = False, pool, 6, {}


def test_balance_thread_resizes_the_pool_and_the_training_threads():
    """A CPU trainer whose training dominates while its sampler idles: Algorithm 1 moves a sampler
    thread to training, and applying the move shrinks the pool and raises this thread's intra-op
    count."""
    state = DRMState(shares=(1.0,), threads={"T_SC": 3, "T_Load": 1, "T_TC": 2})
    times = [{"sample": 0.01, "load": 0.02, "transfer": 0.0, "train": 0.5}]
    moved = drm_step(state, times, [100], [False], 0.5, 0.05)
    assert moved.action == "balance_thread(T_SC)" and moved.threads == {
        "T_SC": 2,
        "T_Load": 1,
        "T_TC": 3,
    }
    pool = SamplerPool(lambda k: k, workers=3, threads=3, depth=1, end=4)
    before = torch.get_num_threads()
    try:
        rank = _Rank(pool)
        HyScaleTrainer._apply_threads(rank, state.threads)
        assert (pool.active, torch.get_num_threads()) == (3, 2)
        HyScaleTrainer._apply_threads(rank, moved.threads)
        assert (pool.threads, pool.active, pool.per_draw) == (2, 2, 1)
        assert torch.get_num_threads() == 3 and rank.threads == moved.threads
        assert [pool.get(k) for k in range(4)] == [0, 1, 2, 3]
    finally:
        pool.close()
        torch.set_num_threads(before)


def test_threads_are_per_os_thread():
    """use_threads sets the calling thread's intra-op count only (what lets the pool, the loader and
    training run on their own counts)."""
    before = torch.get_num_threads()
    seen = []

    def other():
        use_threads(1)
        seen.append(torch.get_num_threads())

    try:
        use_threads(3)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert seen == [1] and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("cores", [2, 3, 4, 8, 16, 64])
@pytest.mark.parametrize("cpu,acc", [(1, 1), (2, 1), (1, 2), (0, 2), (3, 0), (4, 4)])
@pytest.mark.parametrize("sampler_threads", [0, 1, 6, 40])
def test_plan_never_gives_more_threads_than_cores(cores, cpu, acc, sampler_threads):
    devices = [False] * cpu + [True] * acc
    budgets = rank_budgets(devices, cores, sampler_threads)
    assert len(budgets) == cpu + acc and min(budgets) >= 1
    if cores >= cpu + acc:
        assert sum(budgets) <= cores, budgets
    for d, b in zip(devices, budgets):
        split = split_threads(b, d)
        assert min(split.values()) >= 1
        if b >= 3:
            assert sum(split.values()) == b
    if acc and cpu and sampler_threads and cores >= cpu + acc * (sampler_threads + 2):
        assert budgets[-1] == sampler_threads + 2  # the reserve is what was asked for


def test_plan_prints_the_thread_split():
    from gnntrain.plan import build_plan

    plan = build_plan(
        compose(["mode=hyscale", "dataset=csbm", "hardware.cores_per_node=16"] + HS[1:])
    )
    split = plan.mode_details["threads per trainer"]
    each = {"all": 8, "sampler pool": 2, "loader": 1, "training": 5}
    assert split == {"cpu0": each, "accel1": each}  # CPU-only profile: both compute on the host
    assert sum(plan.threads_of(r) for r in range(plan.world_size)) <= 16


def test_a_run_keeps_the_reserve_where_the_machine_has_the_cores():
    assert on_this_host([4, 12], cores=16) == [4, 12]  # the plan's reserve, not an even 8 / 8
    # a profile bigger than this machine: its even share
    assert on_this_host([8, 8], cores=2) == [1, 1]


def test_the_models_stage_costs_are_measured_at_start(train):
    """§V's costs come from probes on each rank (its gather, copy, forward+backward with
    mode.slowdown, one gradient all-reduce), not from the hardware profile's rates: a trainer slowed
    20x costs about 20x more per seed to train, and the profile's guess is kept beside them."""
    s = train(
        ["dataset=csbm"]
        + HS
        + [
            "mode.fanouts=[4,3]",
            "mode.batch_size=64",
            "mode.drm=false",
            "mode.slowdown=[20,1]",
            "model=sage",
            "train.epochs=1",
        ]
    )
    costs = s["mode_report"]["model_per_seed_s"]
    assert costs["train"][0] > 5 * costs["train"][1] > 0 and costs["sync_s"] > 0
    assert all(x > 0 for x in costs["load"])
    assert s["mode_report"]["profile_per_seed_s"]["train"] != costs["train"]


def test_the_models_epoch_is_serial_without_prefetch_and_pipelined_with_it():
    from gnntrain.modes.hyscale.perf_model import model_iteration_s

    costs = {"train": [2.0, 1.0], "transfer": [0.0, 0.5], "load": [0.5, 0.5], "sync_s": 3.0}
    samp = [1.0, 1.0]
    piped = model_iteration_s(costs, samp, [0.5, 0.5], 4)  # 2 seeds each
    serial = model_iteration_s(costs, samp, [0.5, 0.5], 4, pipelined=False)
    assert piped["T_exec_s"] == max(
        piped["T_samp_s"], piped["T_load_s"], piped["T_trans_s"], piped["T_prop_s"]
    )
    assert piped["T_prop_s"] == 2 * 2.0 + 3.0
    # trainer 0's stages in turn, then the sync
    assert serial["T_exec_s"] == 2 * (1.0 + 2.0 + 0.0 + 0.5) + 3.0


def test_drm_divides_shares_by_each_trainers_whole_time_so_a_hidden_blip_moves_nothing():
    """With prefetch, a slow draw on the accelerator's sampler can make T_SA the bottleneck for
    one iteration while the trainer's own time (its wait on the pipeline plus training: ``busy``)
    does not change. The shares follow ``busy``, in one EMA for both pairs: a rate from the
    sampling stage alone flipped a converged 0.25 / 0.75 split to 0.74 / 0.26 in one step."""
    shares = (0.25, 0.75)
    state = DRMState(shares=shares, rates={"work": (250.0, 750.0)}, threads={"T_SC": 1})
    batch = [256, 768]
    times = [
        {"sample": 1e-3, "load": 1e-4, "transfer": 0.0, "train": 1.0, "busy": 1.0},
        {"sample": 2.0, "load": 1e-4, "transfer": 1e-4, "train": 1.0, "busy": 1.0},
    ]
    moved = drm_step(state, times, batch, [False, True], ema=0.5, min_share=0.05)
    assert moved.action == "balance_work(sample)"  # Algorithm 1 still names the bottleneck
    assert moved.shares == pytest.approx(shares, abs=0.01)
    # without busy (callers that report stages only), the pair's own stage is the denominator
    staged = [{k: v for k, v in t.items() if k != "busy"} for t in times]
    flipped = drm_step(state, staged, batch, [False, True], ema=0.5, min_share=0.05)
    assert flipped.shares[0] > 0.9


def test_slowdown_stretches_the_steps_work_not_its_wait_for_a_core():
    """mode.slowdown emulates a slower device: on a one-thread host trainer the sleep is the
    step's CPU time times (slowdown - 1), so time spent waiting for a core (here, sleeping) is
    not doubled; on a device it is the wall time."""

    class Trainer:
        device = torch.device("cpu")

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        cpu0, t0 = time.thread_time(), time.perf_counter()
        time.sleep(0.05)
        wall = time.perf_counter() - t0
        assert HyScaleTrainer._work_seconds(Trainer(), wall, cpu0) < 0.02
        Trainer.device = torch.device("cuda")  # a device's kernels: its wall time
        assert HyScaleTrainer._work_seconds(Trainer(), wall, cpu0) == wall
    finally:
        torch.set_num_threads(before)


def test_below_three_threads_one_producer_draws_loads_and_transfers():
    """A rank with fewer host threads than the pipeline's stages prefetches on its sampler pool
    alone: each draw is a whole batch, handed out in k order, and no loader or transfer thread
    starts."""
    assert one_producer(1) and one_producer(2) and not one_producer(3)
    pool = SamplerPool(lambda k: ("whole", k), workers=1, threads=1, depth=2, end=6)
    before = {t.name for t in threading.enumerate()}
    try:
        pipeline = BatchPipeline(None, None, None, range(6), True, pool, whole_batches=True)
        started = {t.name for t in threading.enumerate()} - before
        assert list(pipeline) == [("whole", k) for k in range(6)]
    finally:
        pool.close()
    assert not any(name.startswith(("hyscale-load", "hyscale-transfer")) for name in started)


def test_copies_made_ahead_count_in_the_epoch_that_trains_them():
    """The one producer copies batches of the next epoch before that epoch's ledger is reset: each
    batch carries its own ledger, which the training epoch absorbs into its phase."""
    ahead = CommLedger()  # recorded while the ledger's phase was still the last epoch's
    ahead.record("h2d", 100, 100, 0.5)
    ahead.record("h2d", 20, 20, 0.25)
    ledger = CommLedger()
    with ledger.in_phase(Phase.train):
        ledger.record("h2d", 1, 1, 0.0)
        ledger.absorb(ahead)
    c = ledger.counters[(Phase.train, "h2d")]
    assert (c.sent, c.received, c.calls, c.seconds) == (121, 121, 3, 0.75)
    assert ledger.total_sent(Phase.train) == 121


def test_one_producer_counts_every_epochs_copies(train, tmp_path):
    """With fixed shares the batches are the same with prefetch on and off, and so are the bytes
    each epoch copies to the (emulated) accelerator, the last epoch's included: without the
    batches' own ledgers, copies made ahead across an epoch's end were wiped by the next epoch's
    reset, and the last epoch counted none. (On a host of 2 cores, as CI's, each of the 2 ranks
    gets one thread, so the one producer runs.)"""
    base = (
        ["dataset=csbm", "dataset.num_nodes=600"]
        + HS
        + [
            "mode.batch_size=64",
            "mode.fanouts=[5,5]",
            "mode.shares=[0.5,0.5]",
            "mode.drm=false",
            "train.epochs=3",
        ]
    )

    def h2d_per_epoch(prefetch: str) -> list:
        before = set(tmp_path.glob("run*"))
        train(base + [f"mode.prefetch={prefetch}"])
        (run_dir,) = set(tmp_path.glob("run*")) - before
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line)["comm_by_kind"].get("h2d", 0) for line in lines]

    serial = h2d_per_epoch("false")
    assert len(serial) == 3 and min(serial) > 0
    assert h2d_per_epoch("true") == serial
