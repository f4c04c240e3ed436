"""HongTu's transfer cost model (§5.3) and the device working-set estimate per chunk."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Sequence

from gnntrain.partition.chunks import ChunkLayout

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.models.registry import ModelFamily


def bandwidths(hardware) -> Dict[str, float]:
    """Bytes/s for the cost model: host→device, device↔device, on-device reuse."""
    return {
        "h2d": float(hardware.h2d_gbps) * 1e9,
        "d2d": float(hardware.d2d_gbps) * 1e9,
        "reuse": float(hardware.device_mem_gbps) * 1e9,
    }


def cost_model(volumes: Dict[str, int], row_bytes: int, bw: Dict[str, float]) -> Dict[str, float]:
    """C = V_ru/T_hd + (V_ori − V_p2p)/T_dd + (V_p2p − V_ru)/T_ru (§5.3), seconds for rows of
    ``row_bytes``."""
    terms = {
        "host_to_device_s": volumes["ru"] * row_bytes / bw["h2d"],
        "peer_s": (volumes["ori"] - volumes["p2p"]) * row_bytes / bw["d2d"],
        "reuse_s": (volumes["p2p"] - volumes["ru"]) * row_bytes / bw["reuse"],
    }
    terms["C_s"] = sum(terms.values())
    return terms


# the largest row slice copied between the device's resident buffers and the host at once
# (engine._slices):
# the bound on those copies' device transients
STAGING_SLICE_BYTES = 4 * 2**20


def topology_bytes(v: int, e: int, nb: int, elementwise: bool, dtype_bytes: int) -> int:
    """Device bytes of one chunk's topology: one direction's CSR at a time (row pointers, int64
    column indices, values) and the two row scales, streamed from the host
    (SparseAdjacency.streamed_to); attention (whole-layer recompute) takes the chunk's edge list (2
    x int64 per edge) and its adjacency in both directions as an upper bound."""
    b = dtype_bytes
    if not elementwise:
        return 2 * e * (16 + b)
    return 8 * (max(v, nb) + 1) + e * (8 + b) + (v + nb) * b


def batch_bytes(
    v: int,
    e: int,
    nb: int,
    num_parts: int,
    model: "ModelFamily",
    dims: Sequence[int],
    dtype_bytes: int,
    param_bytes: int,
    dedup: str,
) -> int:
    """Peak device bytes of one batch: a chunk of ``v`` rows and ``e`` edges whose ``nb``
    in-neighbour rows are resident (see :func:`chunk_working_bytes`)."""
    b = dtype_bytes
    # with p2p a device also holds the rows it loads for others: at most the union of the batch
    resident = nb if "p2p" not in dedup else nb + (num_parts - 1) * v
    topo = topology_bytes(v, e, nb, model.elementwise, b)
    peak = 0
    for d_in, d_out in zip(dims[:-1], dims[1:]):
        # engine._slices: a slice and its indices
        staging = 2 * min(STAGING_SLICE_BYTES, resident * d_in * b)
        common = 5 * param_bytes + topo + 2 * resident * d_in * b + staging
        # forward: the SpMM's source-scaled copy of its input (nb rows) and the chunk's own rows h_v
        # (v); backward: autograd's gradient of the aggregation and the SpMM's scaled copy of it (v
        # rows each)
        fwd = (nb * d_in + v * (2 * d_in + 2 * d_out)) * b
        bwd = nb * d_in * b + v * (5 * d_in + 2 * d_out) * b
        if not model.elementwise:  # attention: the whole layer is recomputed
            saved = (resident * d_in + nb * (d_in + 2 * d_out + 4) + e * (d_out + 8)) * b
        else:
            saved = v * (3 * d_in + 6 * d_out) * b
        peak = max(peak, common + max(fwd, bwd + saved))
    return int(peak)


def chunk_working_bytes(
    layout: ChunkLayout,
    model: "ModelFamily",
    dims: Sequence[int],
    dtype_bytes: int,
    param_bytes: int,
    dedup: str,
) -> int:
    """Upper estimate of the peak device bytes of any rank, any layer, any batch.

    Mirrors what :class:`HongTuEngine` holds: parameters and their gradient
    sums; the resident rows of two consecutive batches while one is assembled
    (forward inputs, or backward gradient sums); the chunk's topology (both
    directions); the chunk's aggregation, output and loaded gradient rows;
    and the recompute's saved tensors (a bound per model).
    """
    return max(
        batch_bytes(
            int(layout.offsets[c + 1] - layout.offsets[c]),
            int(layout.edge_bounds[c + 1] - layout.edge_bounds[c]),
            rows.size,
            layout.num_parts,
            model,
            dims,
            dtype_bytes,
            param_bytes,
            dedup,
        )
        for c, rows in enumerate(layout.neighbours)
    )
