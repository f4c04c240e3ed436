"""Thin wrapper over torch.distributed that accounts every byte it moves.

Modes never call ``torch.distributed`` directly for training traffic; they
call these methods with a ``kind`` from the contract (``allreduce``,
``allgather``, ``halo_fwd``, ...). ``world_size == 1`` makes every call a
local no-op, so ``mode=single`` runs the same code without a process group.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import List, Optional, Sequence

import torch

from gnntrain.comm.accounting import CommLedger
from gnntrain.metrics.clock import timed


class Communicator:
    def __init__(
        self,
        rank: int,
        world_size: int,
        ledger: Optional[CommLedger] = None,
        timeout_s: Optional[float] = None,
    ):
        self.rank = rank
        self.world_size = world_size
        self.ledger = ledger if ledger is not None else CommLedger()
        self.timeout_s = timeout_s  # the run's comm_timeout_s, for sub-groups too

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def _bookkeeping_device(self) -> torch.device:
        """Where small bookkeeping tensors (counts, statistics) must live for the backend:
        NCCL only reduces CUDA buffers (an all-CUDA plan picks it), gloo host ones."""
        if self.distributed:
            import torch.distributed as dist

            if dist.get_backend() == "nccl":
                return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    # ---------------------------------------------------------------- groups
    def new_group(self, ranks: Sequence[int]):
        """Create a sub-group; every rank must call this for every group, in order.

        The group gets the run's ``comm_timeout_s``: torch's ``new_group`` (and
        ``init_device_mesh``, which has no timeout argument in torch 2.2) would give it
        the 30-minute default, so a stalled peer would hang a 1.5D row all-reduce that long.
        """
        if not self.distributed:
            return None
        import torch.distributed as dist

        timeout = None if self.timeout_s is None else timedelta(seconds=float(self.timeout_s))
        return dist.new_group(ranks=list(ranks), timeout=timeout)

    # ------------------------------------------------------------ collectives
    def all_reduce(
        self,
        tensor: torch.Tensor,
        kind: str,
        group=None,
        group_size: Optional[int] = None,
        op: str = "sum",
    ) -> torch.Tensor:
        """In-place all-reduce; counts the buffer size once per rank (see accounting.py)."""
        size = self.world_size if group is None else (group_size or 0)
        if size <= 1:
            return tensor
        import torch.distributed as dist

        reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[
            op
        ]
        now = timed(tensor.device)  # on CUDA: the collective's work, not its launch
        start = now()
        dist.all_reduce(tensor, op=reduce_op, group=group)
        nbytes = tensor.numel() * tensor.element_size()
        self.ledger.record(kind, nbytes, nbytes, now() - start)
        return tensor

    def all_to_all(
        self, send: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int], kind: str
    ) -> torch.Tensor:
        """``all_to_all_single`` with uneven splits along dim 0 (rows).

        ``send`` holds the rows for rank 0, then rank 1, ...; the result holds
        the rows from rank 0, then rank 1, .... The chunk for this rank itself
        is copied locally and not counted.
        """
        row_shape = tuple(send.shape[1:])
        if not self.distributed:
            return send.clone()
        import torch.distributed as dist

        recv = send.new_empty((int(sum(recv_counts)),) + row_shape)
        now = timed(send.device)
        start = now()
        dist.all_to_all_single(
            recv,
            send.contiguous(),
            output_split_sizes=list(map(int, recv_counts)),
            input_split_sizes=list(map(int, send_counts)),
        )
        self.ledger.record(kind, *self._peer_bytes(send, send_counts, recv_counts), now() - start)
        return recv

    def all_to_all_start(
        self, send: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int], kind: str
    ) -> "PendingExchange":
        """Like :meth:`all_to_all`, but returns at once; ``.wait()`` gives the received rows.

        Bytes are recorded when the exchange starts; the time spent blocked in
        ``wait`` is the communication time that overlap did not hide.
        """
        if not self.distributed:
            return PendingExchange(send.clone(), None, self.ledger, kind)
        import torch.distributed as dist

        recv = send.new_empty((int(sum(recv_counts)),) + tuple(send.shape[1:]))
        work = dist.all_to_all_single(
            recv,
            send.contiguous(),
            output_split_sizes=list(map(int, recv_counts)),
            input_split_sizes=list(map(int, send_counts)),
            async_op=True,
        )
        self.ledger.record(kind, *self._peer_bytes(send, send_counts, recv_counts))
        return PendingExchange(recv, work, self.ledger, kind)

    def broadcast_start(self, tensor: torch.Tensor, src: int, kind: str) -> "PendingExchange":
        """Rank ``src`` sends ``tensor`` to every rank of the world (the others receive into their
        ``tensor``, which must have the root's shape); returns at once, ``.wait()`` gives the
        tensor.

        Bytes follow the point-to-point convention (accounting.py): the root counts its buffer once
        per destination, (p - 1) x its bytes, as sent; every other rank counts the buffer as
        received.
        """
        if not self.distributed:
            return PendingExchange(tensor, None, self.ledger, kind)
        import torch.distributed as dist

        work = dist.broadcast(tensor, src=int(src), async_op=True)
        nbytes = tensor.numel() * tensor.element_size()
        root = self.rank == int(src)
        self.ledger.record(
            kind, (self.world_size - 1) * nbytes if root else 0, 0 if root else nbytes
        )
        return PendingExchange(tensor, work, self.ledger, kind)

    def all_to_all_quantized_start(
        self,
        send: torch.Tensor,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        kind: str,
        quantizer,
        direction: str,
    ) -> "PendingDecode":
        """Code rows with ``quantizer`` (a :class:`~gnntrain.comm.quantize.RowQuantizer`) and start
        their exchange; ``.wait()`` gives the received rows decoded, in ``send``'s dtype.

        The packed codes are counted under ``kind`` and the per-row scale and
        zero point under ``quant_params``.
        """
        packed, params = quantizer.encode(send, direction)
        data = self.all_to_all_start(packed, send_counts, recv_counts, kind)
        # parameters travel as raw bytes (gloo has no bfloat16 all-to-all)
        raw = params.contiguous().view(torch.uint8).reshape(params.shape[0], -1)
        meta = self.all_to_all_start(raw, send_counts, recv_counts, "quant_params")
        return PendingDecode(data, meta, quantizer, params.dtype, send.shape[1], send.dtype)

    def record_copy(
        self, kind: str, nbytes: int, seconds: float = 0.0, ledger: Optional[CommLedger] = None
    ) -> None:
        """A copy between this rank's host memory and its device (``h2d``/``d2h``), or bytes a
        copy avoided (``reused``): not a collective, but accounted in the same ledger (or in
        ``ledger``, for a copy made ahead that :meth:`CommLedger.absorb` counts later)."""
        (self.ledger if ledger is None else ledger).record(kind, nbytes, nbytes, seconds)

    def _peer_bytes(
        self, send: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int]
    ):
        """(sent, received) bytes of an all-to-all, leaving out the chunk this rank keeps."""
        row_bytes = send.element_size() * math.prod(tuple(send.shape[1:]))
        me = self.rank
        return (
            sum(int(c) for j, c in enumerate(send_counts) if j != me) * row_bytes,
            sum(int(c) for j, c in enumerate(recv_counts) if j != me) * row_bytes,
        )

    def exchange_counts(self, counts: Sequence[int], kind: str = "setup") -> List[int]:
        """Tell every peer how many items this rank will send it; learn theirs."""
        if not self.distributed:
            return list(counts)
        send = torch.tensor(list(counts), dtype=torch.int64, device=self._bookkeeping_device())
        recv = self.all_to_all(send, [1] * self.world_size, [1] * self.world_size, kind)
        return recv.tolist()

    def broadcast_object(self, obj: object, src: int = 0) -> object:
        """Rank ``src``'s picklable ``obj`` on every rank (the others pass anything, e.g. None).
        Bookkeeping, not training traffic: it is not recorded in the ledger."""
        if not self.distributed:
            return obj
        import torch.distributed as dist

        box = [obj if self.rank == int(src) else None]
        dist.broadcast_object_list(box, src=int(src), device=self._bookkeeping_device())
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    # ------------------------------------------------------- device transfers
    def to_device(
        self,
        tensor: torch.Tensor,
        device: torch.device,
        kind: str = "h2d",
        non_blocking: bool = True,
        ledger: Optional[CommLedger] = None,
    ) -> torch.Tensor:
        """Copy ``tensor`` to ``device`` and count its bytes under ``kind`` (``h2d`` or ``d2h``),
        in this rank's ledger or in ``ledger`` (see :meth:`record_copy`).

        A copy between two host buffers (an accelerator trainer emulated on a
        CPU-only host) is still a real copy and is counted the same way. With
        ``non_blocking`` a pinned source overlaps with compute; the caller
        synchronises (a CUDA event) before it reads the result.
        """
        now = timed(device if torch.device(device).type != "cpu" else tensor.device)
        start = now()
        if torch.device(device) == tensor.device:
            out = tensor.clone()
        else:
            out = tensor.to(device, non_blocking=non_blocking)
        nbytes = tensor.numel() * tensor.element_size()
        self.record_copy(kind, nbytes, now() - start, ledger)
        return out

    # ------------------------------------------------------- metrics traffic
    def reduce_stats(self, values: Sequence[float], op: str = "sum") -> List[float]:
        """All-reduce a few float64 statistics (losses, counts, byte counters).

        Bookkeeping, not training traffic: it is not recorded in the ledger.
        """
        t = torch.tensor(list(values), dtype=torch.float64, device=self._bookkeeping_device())
        if self.distributed:
            import torch.distributed as dist

            reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op]
            dist.all_reduce(t, op=reduce_op)
        return t.tolist()


class PendingExchange:
    """An all-to-all in flight."""

    def __init__(self, recv: torch.Tensor, work, ledger: CommLedger, kind: str):
        self.recv, self.work, self.ledger, self.kind = recv, work, ledger, kind

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            # NCCL's wait only orders streams: settle to see the transfer
            now = timed(self.recv.device)
            start = now()
            self.work.wait()
            self.ledger.add_seconds(self.kind, now() - start)
            self.work = None
        return self.recv


class PendingDecode:
    """A quantized all-to-all in flight: codes and parameters, decoded on ``wait``."""

    def __init__(
        self,
        data: PendingExchange,
        meta: PendingExchange,
        quantizer,
        param_dtype: torch.dtype,
        width: int,
        dtype: torch.dtype,
    ):
        self.data, self.meta, self.quantizer = data, meta, quantizer
        self.param_dtype, self.width, self.dtype = param_dtype, width, dtype

    def wait(self) -> torch.Tensor:
        packed, raw = self.data.wait(), self.meta.wait()
        params = raw.contiguous().view(self.param_dtype).reshape(-1, 2)
        return self.quantizer.decode(packed, params, self.width, self.dtype)
