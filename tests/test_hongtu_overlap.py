"""HongTu's chunk loop overlaps transfers with compute (HongTu §4.2; issue 58): checked on a CPU
host with the deferred paths that CUDA takes (docs/design.md#hongtu, "Overlapped transfers").

- write-backs are queued, never copied synchronously, and a step's land only after the next step's
  loads and compute were issued, in issue order (so the sums are the same bits);
- index tensors go to the device once per run where they fit, else one step ahead, from one pack per
  step;
- the device timeline measures overlap from intervals, never by settling the device.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import EXACT, assert_exact, single_losses

from gnntrain.metrics.clock import DeviceTimeline, _intersection, _union
from gnntrain.modes import staging
from gnntrain.modes.hongtu import engine as engine_module
from gnntrain.modes.hongtu.indices import DeviceIndices, as_slice, pick
from gnntrain.modes.hongtu.schedule import build_sweep
from gnntrain.partition.chunks import ChunkLayout, chunk_layout

SMALL = ["dataset=csbm", "dataset.num_nodes=400"]


class _LoggedQueue(staging.DeviceToHostQueue):
    """The deferred write-back path on the CPU, logging issues and landings."""

    log: list = []
    made: list = []

    def __init__(self, device, staged=None, timeline=None):
        super().__init__(device, staged=True, timeline=timeline)
        _LoggedQueue.made.append(self)

    def write(self, host, index, rows, accumulate=None):
        self.log.append(("write", len(self.closed)))
        return super().write(host, index, rows, accumulate)

    def settle(self, keep=0):
        before = self.settled
        super().settle(keep)
        if self.settled > before:
            self.log.append(("landed", self.settled - before))


class _LoggedStager(staging.HostToDeviceStager):
    def __init__(self, device, buffers=2, staged=None, timeline=None):
        super().__init__(device, buffers, staged=True, timeline=timeline)

    def load(self, host, index):
        _LoggedQueue.log.append(("load", None))
        return super().load(host, index)


@pytest.fixture
def deferred(monkeypatch):
    _LoggedQueue.log, _LoggedQueue.made = [], []
    monkeypatch.setattr(engine_module, "DeviceToHostQueue", _LoggedQueue)
    monkeypatch.setattr(engine_module, "HostToDeviceStager", _LoggedStager)
    return _LoggedQueue


@pytest.mark.parametrize(
    "model,dedup,chunks",
    [("gcn", "p2p+reuse", 4), ("sage", "none", 3), ("gcn", "reuse", 1), ("sage", "reuse", 4)],
)
def test_deferred_write_backs_keep_hongtu_exact(train, deferred, model, dedup, chunks):
    """Every write-back goes through the queue and lands later, yet losses equal single's to 1e-9
    (one rank in this process: the patched queue does not reach rank processes)."""
    graph = SMALL + [f"model={model}"]
    run = train(
        graph
        + EXACT
        + [
            "mode=hongtu",
            f"mode.dedup={dedup}",
            f"mode.chunks={chunks}",
            "hardware.ranks_per_node=1",
        ]
    )
    assert_exact(run["losses"], single_losses(train, graph + EXACT))
    queues = deferred.made
    assert queues and all(q.issued == q.settled > 0 for q in queues)  # every queued copy landed


def test_a_step_lands_only_after_the_next_steps_loads(train, deferred):
    """Between a step's write-backs and their landing the next step's loads were issued: the loop
    never waits for a chunk's copies before starting the next chunk (only a layer's last chunk lands
    at once: the next layer reads it)."""
    train(
        SMALL
        + EXACT
        + [
            "model=gcn",
            "mode=hongtu",
            "mode.chunks=4",
            "mode.dedup=none",
            "train.epochs=1",
            "hardware.ranks_per_node=1",
        ]
    )
    unlanded, overlapped, landings = [], 0, 0
    log = deferred.log
    for i, (kind, count) in enumerate(log):
        if kind == "write":
            unlanded.append(i)
        elif kind == "landed":
            landed, unlanded = unlanded[:count], unlanded[count:]
            landings += 1
            overlapped += any(kind2 == "load" for kind2, _ in log[max(landed) + 1 : i])
    # forward: 3 layers x 4 chunks, 3 of each layer's 4 landings overlap; backward flushes likewise
    assert landings >= 12 and overlapped >= 9 and overlapped < landings


def test_write_back_queue_lands_in_issue_order_and_keeps_in_flight_steps():
    host = torch.zeros(6, 2)
    queue = staging.DeviceToHostQueue(torch.device("cpu"), staged=True)
    queue.write(host, slice(0, 2), torch.ones(2, 2))
    rows = torch.tensor([1, 3])
    queue.write(
        host, rows, torch.full((2, 2), 2.0), lambda landed: host.index_add_(0, rows, landed)
    )
    queue.close_group()
    done = []
    queue.then(lambda: done.append("released"))
    queue.write(host, slice(4, 6), torch.full((2, 2), 5.0))
    queue.close_group()
    assert host.sum() == 0 and queue.settled == 0  # nothing lands before the queue settles
    queue.settle(keep=1)
    assert (
        host[:4].tolist() == [[1, 1], [3, 3], [0, 0], [2, 2]] and host[4:].sum() == 0 and not done
    )
    queue.settle(keep=0)
    assert (
        host[4:].tolist() == [[5, 5], [5, 5]]
        and done == ["released"]
        and queue.issued == queue.settled == 3
    )
    immediate = staging.DeviceToHostQueue(torch.device("cpu"))
    immediate.write(host, slice(0, 1), torch.full((1, 2), 7.0))
    assert host[0].tolist() == [7, 7]  # a CPU device writes at once


def _layout(n: int = 60, chunks: int = 3, seed: int = 0) -> ChunkLayout:
    gen = np.random.default_rng(seed)
    dst = np.sort(gen.integers(0, n, 4 * n))
    src = gen.integers(0, n, 4 * n)
    return chunk_layout(src, dst, np.array([0, n], dtype=np.int64), chunks)


def test_index_packs_upload_once_per_run_where_they_fit_else_one_step_ahead():
    layout = _layout()
    order = np.arange(layout.chunks_per_part).reshape(-1, 1)
    sweeps = {
        "fwd": build_sweep(layout, order, 0, "reuse").steps,
        "bwd": build_sweep(layout, order[::-1], 0, "reuse").steps,
    }
    v_pos = {c: torch.tensor([0, 2, 3]) for c in range(layout.offsets.size - 1)}
    meta = torch.device("meta")
    once = DeviceIndices(meta, sweeps, v_pos, p2p=False, headroom=None)
    for _epoch in range(3):
        for name, steps in sweeps.items():
            for t in range(len(steps)):
                idx = once.step(name, t)
                assert all(
                    v is None or isinstance(v, slice) or v.device.type == "meta"
                    for k, v in idx.values.items()
                    if k not in ("load_rows", "flush_rows")
                )
    assert once.resident and once.uploads == 1 and once.bytes_held() == once.total_bytes
    tight = DeviceIndices(meta, sweeps, v_pos, p2p=False, headroom=once.total_bytes - 1)
    steps = len(sweeps["fwd"])
    for t in range(steps):
        tight.step("fwd", t)
        # the current step's pack and the next one's, issued ahead
        assert tight._current[0] == ("fwd", t)
        assert tight._ahead is None if t + 1 == steps else tight._ahead[0] == ("fwd", t + 1)
    assert not tight.resident and tight.uploads == steps  # one per step, each issued once
    cpu = DeviceIndices(torch.device("cpu"), sweeps, v_pos, p2p=False, headroom=None)
    cpu.step("fwd", 0)
    assert cpu.uploads == 0 and cpu.bytes_held() == 0


def test_contiguous_indices_become_slices():
    assert as_slice(torch.arange(5, 9)) == slice(5, 9)
    index = torch.tensor([1, 2, 4])
    assert as_slice(index) is index
    assert pick(slice(5, 9), slice(1, 3)) == slice(6, 8)
    assert torch.equal(pick(index, slice(0, 2)), index[:2])


def test_timeline_measures_overlap_from_intervals():
    assert _union([(0, 1), (0.5, 2), (3, 4)]) == [(0, 2), (3, 4)]
    assert _intersection([(0, 2), (3, 4)], [(1, 3.5)]) == pytest.approx(1.5)
    timeline = DeviceTimeline("cpu")
    with timeline.span("compute"):
        sum(range(10000))
    with timeline.span("h2d"):
        sum(range(10000))
    figures = timeline.resolve()
    assert figures["compute_s"] > 0 and figures["h2d_s"] > 0
    assert figures["h2d_overlapped_s"] == 0  # a serial CPU loop overlaps nothing
    assert figures["wall_s"] >= figures["compute_s"] + figures["h2d_s"]


def test_a_flush_into_untouched_rows_of_a_zeroed_table_is_a_plain_write():
    """The ⊕-add of a gradient flush becomes a write (no host-side add) for rows not yet written
    since the table was zeroed; rows written before, and any table added to by index, keep the
    add."""
    from types import SimpleNamespace

    from gnntrain.modes.hongtu.engine import HongTuEngine
    from gnntrain.modes.hongtu.tiers import VertexTables

    engine = SimpleNamespace(_written={}, tables=VertexTables({}, None))
    grad = torch.zeros(10, 2)
    engine._written[grad.data_ptr()] = []
    fresh = lambda index: HongTuEngine._fresh(engine, grad, index)
    assert fresh(slice(0, 4)) and fresh(slice(4, 6))
    assert not fresh(slice(5, 8))  # row 5 was written
    assert fresh(slice(8, 10))
    assert not fresh(torch.tensor([1, 9])) and not fresh(slice(0, 1))  # by index: adds from now on
    other = torch.zeros(3, 2)
    assert not HongTuEngine._fresh(engine, other, slice(0, 3))  # a table the engine did not zero


def test_write_backs_in_flight_stay_within_the_limit():
    from types import SimpleNamespace

    from gnntrain.modes.hongtu.engine import HongTuEngine

    queue = staging.DeviceToHostQueue(torch.device("cpu"), staged=True)
    engine = SimpleNamespace(d2h=queue, in_flight_limit=None)
    host = torch.zeros(8, 4)
    queue.write(host, slice(0, 4), torch.ones(4, 4))
    # the CPU stand-in keeps no device rows: say 64 bytes are in flight
    queue.in_flight_bytes = lambda: 64
    HongTuEngine._bound_write_backs(engine)
    assert queue.settled == 0  # no budget: they stay in flight
    engine.in_flight_limit = 32
    HongTuEngine._bound_write_backs(engine)
    assert queue.settled == 1 and host[:4].sum() == 16  # past the limit: landed at once
