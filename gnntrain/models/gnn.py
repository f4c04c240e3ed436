"""The model every mode trains: a stack of registered layers (gnntrain.models.registry) in
aggregate → update form, with the hidden activation, dropout and norms between them.

Each layer splits into

* ``aggregate(h, agg)``: the neighbourhood part, ``agg`` being a callable
  that maps the rows this process holds to their aggregated rows (a local
  SpMM in ``single``; halo exchange + SpMM in ``partition``; ...), and
* ``update(h, z)``: the dense per-row part.

Modes differ only in the ``agg`` they pass, so every mode trains the same
network with the same parameters (the exactness tests rely on it). Dropout
masks are a hash of (seed, epoch, layer, global row, column), so every mode
drops the same entries while drawing only the rows it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import torch
from torch import nn

from gnntrain.seeding import Stream, derive_words
from gnntrain.sizing import model_dims

Aggregate = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ModelSpec:
    name: str  # a registered model (gnntrain.models.registry), or custom
    in_dim: int
    hidden: int
    out_dim: int
    layers: int
    dropout: float
    # GCN and SAGE; None = DGL's rule (aggregate unless narrowing)
    aggregate_first: Optional[bool] = None
    layer_options: Tuple[
        Tuple[str, Any], ...
    ] = ()  # the model's own options (ModelFamily.option_parameters)
    # > 0: a learnable label embedding for label-propagation rows (SuperGCN §2 and §3 Eq. (5);
    # docs/design.md#supergcn)
    label_classes: int = 0
    # "layer": LayerNorm on each hidden layer's output, before its relu (row-local)
    norm: str = "none"
    target: Optional[str] = None  # name "custom": the user's layer class (gnntrain.models.custom)

    @property
    def dims(self) -> List[int]:
        return model_dims(self.in_dim, self.hidden, self.out_dim, self.layers)


def _signed(value: int, bits: int) -> int:
    """An unsigned constant as the two's-complement value torch's signed integers hold."""
    return value - (1 << bits) if value >= (1 << (bits - 1)) else value


def _shift_right_logical(z: torch.Tensor, k: int, bits: int) -> torch.Tensor:
    return (z >> k) & ((1 << (bits - k)) - 1)


def _mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors (multiplication wraps modulo 2^64)."""
    z = (z ^ _shift_right_logical(z, 30, 64)) * _signed(0xBF58476D1CE4E5B9, 64)
    z = (z ^ _shift_right_logical(z, 27, 64)) * _signed(0x94D049BB133111EB, 64)
    return z ^ _shift_right_logical(z, 31, 64)


def hash_uniform(keys: torch.Tensor, stream: int) -> torch.Tensor:
    """float64 in [0, 1) per int64 key, a counter-based draw: a hash of (stream, key), so any
    process draws the same number for a key without drawing the others (link prediction's
    negatives, :mod:`gnntrain.tasks.link_prediction.negatives`)."""
    z = _mix64(keys.to(torch.int64) * _signed(0x9E3779B97F4A7C15, 64) + _signed(stream, 64))
    return _shift_right_logical(z, 11, 64).to(torch.float64) * (2.0**-53)


def hash_stream(*values: int) -> int:
    """One 64-bit stream id from small integers (a seed, an epoch), for :func:`hash_uniform`."""
    z = torch.tensor([0], dtype=torch.int64)
    for v in values:
        z = _mix64(z * _signed(0xD1B54A32D192ED03, 64) + int(v))
    return int(z.item()) % (1 << 64)


def row_hash_keep_mask(rows: torch.Tensor, width: int, stream: int, p: float) -> torch.Tensor:
    """Keep mask (len(rows) × width) of a counter-based dropout: entry (r, c) is a hash of
    (stream, global row id r, column c), so any process draws the same bits for a row
    without drawing the others.

    A 64-bit mix of each row id and of each column id (small vectors), xored per entry
    and finished with one 32-bit multiply-xorshift-multiply round; the entry is kept when
    the signed 32-bit result is at or above the p-quantile (P(keep) = 1 - p to 2^-32).
    On the CPU the native C build computes the same bits in one pass where it loads
    (:func:`gnntrain.models._native.c_keep_mask`); elsewhere these tensor operations do.
    """
    threshold = -(1 << 31) + int(round(p * (1 << 32)))
    if rows.device.type == "cpu":
        from gnntrain.models._native import c_keep_mask

        native = c_keep_mask()
        if native is not None:
            return native(rows, width, stream, threshold)
    return torch_keep_mask(rows, width, stream, threshold)


def torch_keep_mask(rows: torch.Tensor, width: int, stream: int, threshold: int) -> torch.Tensor:
    """:func:`row_hash_keep_mask` in tensor operations, on any device (``threshold``: its signed
    32-bit cut)."""
    rows = rows.to(torch.int64)
    row_key = _mix64(rows * _signed(0x9E3779B97F4A7C15, 64) + stream) >> 32
    cols = torch.arange(width, dtype=torch.int64, device=rows.device)
    col_key = _mix64(cols * _signed(0xD1B54A32D192ED03, 64) + (stream ^ 0x5BD1E995)) >> 32
    x = row_key.to(torch.int32).unsqueeze(1) ^ col_key.to(torch.int32).unsqueeze(0)
    x.mul_(_signed(0x7FEB352D, 32))
    x.bitwise_xor_(_shift_right_logical(x, 15, 32))
    x.mul_(_signed(0x846CA68B, 32))
    # above every int32 (p within 2^-33 of 1): a scalar compare would wrap
    if threshold > (1 << 31) - 1:
        return torch.zeros_like(x, dtype=torch.bool)
    return x >= threshold


class GlobalDropout:
    """Dropout whose mask is a function of (seed, epoch, layer, global row, column).

    Each process computes the mask of the rows it holds (``global_ids``; all
    rows when None) with :func:`row_hash_keep_mask`, so single and distributed
    runs drop the same entries, and a rank's cost is its own rows, not the graph.
    """

    def __init__(
        self, p: float, seed: int, num_global_nodes: int, global_ids: Optional[torch.Tensor]
    ):
        self.p, self.seed, self.num_global_nodes, self.global_ids = (
            p,
            seed,
            num_global_nodes,
            global_ids,
        )
        self.epoch = 0
        self._on_device: Optional[torch.Tensor] = None  # global_ids on a GPU, for masks drawn there

    def stream(self, layer: int) -> int:
        """A 63-bit key of (seed, epoch, layer)."""
        return int(derive_words(self.seed, Stream.dropout, self.epoch, layer)[0]) >> 1

    def keep_mask(
        self,
        width: int,
        layer: int,
        rows: Optional[slice] = None,
        device: Optional[torch.device] = None,
    ) -> torch.Tensor:
        """The boolean keep mask of this epoch and layer for the held rows (``rows``: a slice of
        them), drawn on ``device`` (the host by default; on a GPU the tensor formula draws it there,
        the same bits, instead of drawing on the host and copying)."""
        return row_hash_keep_mask(self._rows(rows, device), width, self.stream(layer), self.p)

    def _rows(self, rows: Optional[slice], device: Optional[torch.device]) -> torch.Tensor:
        """Global ids of the held rows (or a slice of them) on ``device``; a GPU's copy is kept."""
        device = torch.device("cpu") if device is None else torch.device(device)
        if self.global_ids is None:
            start, stop, _ = (rows or slice(None)).indices(self.num_global_nodes)
            return torch.arange(start, stop, device=device)
        held = self.global_ids
        if device.type != "cpu":
            if self._on_device is None or self._on_device.device != device:
                self._on_device = held.to(device)
            held = self._on_device
        return held if rows is None else held[rows]

    def for_rows(self, rows: slice) -> "GlobalDropout":
        """The same masks, for a slice of the held rows (a pipeline chunk's)."""
        held = (
            self.global_ids if self.global_ids is not None else torch.arange(self.num_global_nodes)
        )
        view = GlobalDropout(self.p, self.seed, self.num_global_nodes, held[rows])
        view.epoch = self.epoch
        return view

    def apply_mask(self, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return h * keep.to(device=h.device, dtype=h.dtype) / (1.0 - self.p)

    def __call__(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        if self.p <= 0:
            return h
        return self.apply_mask(h, self.keep_mask(h.shape[1], layer, device=h.device))


class GNN(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        dims = spec.dims
        from gnntrain.models.registry import model_family

        family = model_family(spec.name, spec.target)
        options = dict(spec.layer_options)
        layers: List[nn.Module] = [
            family.build(d_in, d_out, spec.aggregate_first, options)
            for d_in, d_out in zip(dims[:-1], dims[1:])
        ]
        self.layers = nn.ModuleList(layers)
        # LayerNorm normalises each row on its own, so a mode holding any subset of the rows
        # computes the same values; its initial weights are constants (no random draw, the layers
        # keep their init)
        self.norms = (
            nn.ModuleList(nn.LayerNorm(d) for d in dims[1:-1]) if spec.norm == "layer" else None
        )
        if spec.label_classes:  # created last, so models without it keep their initial weights
            self.label_embedding = nn.Parameter(torch.empty(spec.label_classes, spec.in_dim))
            nn.init.xavier_uniform_(self.label_embedding)
        else:
            self.label_embedding = None

    def with_label_inputs(
        self, x: torch.Tensor, labels: torch.Tensor, mask: Optional[torch.Tensor]
    ) -> torch.Tensor:
        """x + Y·W_embed on the label-propagation rows (``mask``); other rows' labels are never
        read."""
        if mask is None or self.label_embedding is None:
            return x
        rows = mask.nonzero().flatten()
        return x.index_add(0, rows, self.label_embedding[labels[rows]])

    def forward(
        self, x: torch.Tensor, agg: Aggregate, dropout: Optional[GlobalDropout] = None
    ) -> torch.Tensor:
        return run_layers(
            self, x, lambda i, layer, h: layer.update(h, layer.aggregate(h, agg)), dropout
        )

    def comm_widths(self) -> List[int]:
        """Feature width each layer hands to its aggregation (what a halo carries)."""
        return [layer.comm_width() for layer in self.layers]

    def hidden_norm(self, layer: int) -> Optional[nn.Module]:
        """The norm applied to the input of layer ``layer`` > 0, if any."""
        return None if self.norms is None else self.norms[layer - 1]


Dropout = Callable[[torch.Tensor, int], torch.Tensor]  # (h, layer index) -> h with dropout applied
# (index, layer, input) -> output
LayerStep = Callable[[int, nn.Module, torch.Tensor], torch.Tensor]


def hidden_activation(
    h: torch.Tensor, layer: int, dropout: Optional[Dropout] = None, norm: Optional[nn.Module] = None
) -> torch.Tensor:
    """The input of layer ``layer`` > 0: the previous layer's output, normalised (``model.norm``),
    through relu, then dropout."""
    h = torch.relu(h if norm is None else norm(h))
    return h if dropout is None else dropout(h, layer)


def run_layers(
    model: nn.Module, x: torch.Tensor, step: LayerStep, dropout: Optional[Dropout] = None
) -> torch.Tensor:
    """The layer stack every mode runs: ``step`` computes each layer (aggregate + update in
    the mode's own layout), :func:`hidden_activation` sits between layers; dropout only
    while ``model.training``."""
    h = x
    for i, layer in enumerate(model.layers):
        if i > 0:
            h = hidden_activation(h, i, dropout if model.training else None, model.hidden_norm(i))
        h = step(i, layer, h)
    return h


def layer_input(model: GNN, forward: Callable[[], torch.Tensor], layer: int) -> torch.Tensor:
    """The input of layer ``layer`` (1..layers-1; 0 or less: the last layer's), computed by
    ``forward()`` with the layer stack cut after layer ``layer`` - 1 and the hidden activation
    applied: any forward that runs ``model.layers`` (a mode's own layout, or a plain adjacency)
    yields the embeddings that way."""
    layers = model.layers
    depth = len(layers)
    k = depth - 1 if layer <= 0 else int(layer)
    if not 1 <= k <= depth - 1:
        raise ValueError(
            f"embeddings are the inputs of layers 1..{depth - 1} (this model has {depth} layers)"
        )
    model.layers = nn.ModuleList(list(layers)[:k])
    try:
        h = forward()
    finally:
        model.layers = layers
    return hidden_activation(h, k, None, model.hidden_norm(k))


def build_model(spec: ModelSpec, seed: int, dtype: torch.dtype) -> GNN:
    """Identical initial weights on every process: one seeded generator."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = GNN(spec).to(dtype)
    torch.random.set_rng_state(state)
    return model
