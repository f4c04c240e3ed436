"""The GPU paths, checked on a CPU host (docs/design.md#devices): timers settle the device
before reading the clock, HongTu keeps one chunk's topology on the device and binds its cap to
the allocator's peak, host rows reach the device through the stager, and HyScale's CPU trainer
gets the cores the accelerator trainers do not need.

CUDA cannot run here, so each check stands a fake in where the CUDA call would be: a sync
hook that records when the device is settled, a ``meta`` device for the topology, a made-up
allocator peak for the arena. The real CUDA run is the GPU check's (issue 21).
"""

from __future__ import annotations

import gc
import time
import weakref
from types import SimpleNamespace

import pytest
import torch
from conftest import compose

from gnntrain.metrics import clock as clock_module
from gnntrain.metrics.clock import StageClock, set_sync_hook


@pytest.fixture
def fake_sync(monkeypatch):
    """Record every settle; a settle waits ``lag`` seconds, standing in for queued kernels."""
    calls = []
    state = {"lag": 0.0}

    def hook(device):
        calls.append(str(device))
        time.sleep(state["lag"])

    previous = set_sync_hook(hook)
    yield SimpleNamespace(calls=calls, state=state)
    set_sync_hook(previous)


def test_stage_clock_settles_cuda_before_reading_and_not_cpu(fake_sync):
    cuda = StageClock("cuda:0")
    fake_sync.state["lag"] = 0.05
    with cuda.span("aggregation"):
        pass  # a kernel launch returns at once; its work is what the settle waits for
    assert fake_sync.calls == ["cuda:0", "cuda:0"]
    assert cuda.seconds["aggregation"] >= 0.05  # the queued work is charged to the stage
    host = StageClock("cpu")
    with host.span("aggregation"):
        pass
    assert len(fake_sync.calls) == 2


def test_stage_clock_settles_in_backward_too(fake_sync):
    clock = StageClock("cuda:0")
    x = torch.ones(3, requires_grad=True)
    y = clock.through("aggregation", lambda t: t * 2, x)
    forward_calls = len(fake_sync.calls)
    y.sum().backward()
    assert forward_calls == 2 and len(fake_sync.calls) == 4
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_communication_and_quantization_timers_settle(fake_sync, monkeypatch):
    """Treat the host as an asynchronous device: every comm timer must then settle it."""
    from gnntrain.comm import Communicator
    from gnntrain.comm.communicator import PendingExchange
    from gnntrain.comm.quantize import quantizer_for

    monkeypatch.setattr(clock_module, "SYNC_DEVICE_TYPES", {"cpu"})
    comm = Communicator(0, 1)
    comm.to_device(torch.ones(4, 2), torch.device("cpu"))
    assert len(fake_sync.calls) == 2
    waited = PendingExchange(
        torch.ones(2), SimpleNamespace(wait=lambda: None), comm.ledger, "halo_fwd"
    )
    waited.wait()
    assert len(fake_sync.calls) == 4
    quantizer = quantizer_for(8, seed=0, rank=0, clock=StageClock())
    packed, params = quantizer.encode(torch.randn(5, 3), "fwd")
    quantizer.decode(packed, params, 3, torch.float32)
    assert len(fake_sync.calls) == 8


def _adjacency(n: int, seed: int):
    from gnntrain.models import SparseAdjacency

    gen = torch.Generator().manual_seed(seed)
    dst, src = (
        torch.randint(0, n, (3 * n,), generator=gen),
        torch.randint(0, n, (3 * n,), generator=gen),
    )
    return SparseAdjacency(dst, src, torch.rand(3 * n, generator=gen, dtype=torch.float64), n, n)


def test_hongtu_keeps_only_the_current_chunks_topology_on_the_device():
    """Before, every chunk's CSR pair stayed on the GPU (about 88 B/edge of the whole partition);
    now loading chunk c's releases the previous chunk's, and what travels is one host-built CSR (no
    edge lists: building the CSR on the device had peaked the H100's allocator over HongTu's
    budget)."""
    from gnntrain.modes.hongtu.engine import HongTuEngine

    chunks = {c: (_adjacency(20, c), _adjacency(20, 100 + c), None, None) for c in range(4)}
    engine = SimpleNamespace(
        topology=chunks, device=torch.device("meta"), device_topology=None, dtype=torch.float32
    )
    seen = []
    for c in range(4):
        for which in (0, 1):
            on_device = HongTuEngine._device_adj(engine, c, which)
            assert on_device.device.type == "meta" and on_device is not chunks[c][which]
            assert on_device.edge_index() == (None, None)
            assert HongTuEngine._device_adj(engine, c, which) is on_device  # reused within the step
            seen.append(weakref.ref(on_device))
            del on_device
            gc.collect()
            assert sum(ref() is not None for ref in seen) == 1  # the previous one is gone
    cpu = SimpleNamespace(topology=chunks, device=torch.device("cpu"), device_topology=None)
    assert HongTuEngine._device_adj(cpu, 2, 1) is chunks[2][1]  # a CPU arena uses the host's own


def test_arena_cap_binds_the_allocators_peak():
    from gnntrain.modes.hongtu.arena import DeviceArena, DeviceMemoryExceeded

    real = {"peak": 500}
    arena = DeviceArena(cap=1000, allocator_peak=lambda: real["peak"])
    arena.hold("chunk", 100)  # the ledger (100 B) and the allocator (500 B) both fit
    assert arena.allocator_max == 500
    real["peak"] = 1500  # what the ledger does not count (temporaries, the CSR build) still counts
    with pytest.raises(
        DeviceMemoryExceeded, match="allocator's peak 1.46 KiB exceeds mode.device_memory"
    ):
        arena.hold("chunk", 200)
    assert DeviceArena(cap=1000).allocator_max == 0  # a CPU arena has no allocator to read


def test_stager_loads_the_same_rows():
    """The staged path (reusable buffers, rotated) on the CPU: every load equals ``host[index]`` and
    stays so after later loads refill the buffers; a load that handed out its buffer, or a buffer
    grown or reused wrongly, would change an earlier result."""
    from gnntrain.modes.staging import HostToDeviceStager

    host = torch.arange(400, dtype=torch.float64).reshape(100, 4)
    plain = HostToDeviceStager(torch.device("cpu"))
    assert plain.stream is None and not plain.cuda and not plain.staged
    stager = HostToDeviceStager(torch.device("cpu"), staged=True)
    indices = [
        torch.tensor([7, 1, 1, 4]),
        slice(2, 6),
        torch.arange(90, 30, -1),
        torch.tensor([0]),
        slice(50, 100),
        torch.tensor([99, 98]),
    ]
    loaded = [stager.load(host, index) for index in indices]
    for index, rows in zip(indices, loaded):
        assert torch.equal(rows, host[index]) and torch.equal(plain.load(host, index), host[index])
    assert all(buf is not None for buf in stager._buffers)  # both buffers were used


def test_stager_gathers_ahead_of_its_copies():
    """HyScale's pipeline gathers on one thread and copies on another: with three buffers, three
    gathers in flight before their copies still land the rows each gathered (a fourth would refill
    the first)."""
    from gnntrain.modes.staging import HostToDeviceStager

    host = torch.arange(600, dtype=torch.float32).reshape(150, 4)
    stager = HostToDeviceStager(torch.device("cpu"), buffers=3, staged=True)
    indices = [torch.arange(0, 40), torch.arange(149, 100, -1), torch.tensor([5, 5, 6])]
    staged = [stager.gather(host, index) for index in indices]
    assert [s.slot for s in staged] == [0, 1, 2]
    for index, rows in zip(indices, staged):
        assert torch.equal(stager.copy(rows), host[index])
    # the bound: it refills the first gather's buffer
    fourth = stager.gather(host, torch.arange(140, 150))
    assert fourth.slot == 0 and torch.equal(staged[0].rows[:10], host[140:150])


def test_hyscale_cpu_trainer_gets_the_cores_the_accelerators_do_not_need():
    from gnntrain.plan import build_mode

    mode = build_mode(compose(["mode=hyscale", "mode.cpu_trainers=1", "mode.accel_trainers=2"]))
    # each GPU trainer reserves an even share (16 // 3 = 5) for its sampler pool, loader and feeding
    # thread
    assert mode.rank_threads(("cpu", "cuda:0", "cuda:1"), 3, 16) == (6, 5, 5)
    assert mode.rank_threads(("cpu", "cpu", "cpu"), 3, 16) == (5, 5, 5)  # CPU-only: even shares
    pinned = build_mode(
        compose(
            [
                "mode=hyscale",
                "mode.cpu_trainers=1",
                "mode.accel_trainers=2",
                "mode.sampler_threads=4",
            ]
        )
    )
    # 4 samplers + loader + feeder
    assert pinned.rank_threads(("cpu", "cuda:0", "cuda:1"), 3, 16) == (4, 6, 6)
    from gnntrain.plan import build_plan

    plan = build_plan(compose(["mode=hyscale", "dataset=csbm", "dataset.num_nodes=300"]))
    assert plan.rank_threads == () and plan.threads_of(1) == plan.threads_per_rank
