"""GCN, GraphSAGE-mean, GIN and one-head GAT in aggregate → update form.

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
from typing import Callable, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from gnntrain.seeding import Stream, derive_words
from gnntrain.sizing import aggregates_first, model_dims

Aggregate = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ModelSpec:
    name: str  # gcn | sage | gin | gat
    in_dim: int
    hidden: int
    out_dim: int
    layers: int
    dropout: float
    aggregate_first: Optional[bool] = None  # GCN and SAGE; None = DGL's rule (aggregate unless narrowing)
    gin_eps_learnable: bool = True
    # > 0: a learnable label embedding for label-propagation rows (SuperGCN §2 and §3 Eq. (5); docs/design.md#supergcn)
    label_classes: int = 0
    norm: str = "none"  # "layer": LayerNorm on each hidden layer's output, before its relu (row-local)
    target: Optional[str] = None  # name "custom": the user's layer class (gnntrain.models.custom)

    @property
    def dims(self) -> List[int]:
        return model_dims(self.in_dim, self.hidden, self.out_dim, self.layers)


class GCNLayer(nn.Module):
    """h' = Â·h·W + b (Kipf & Welling); order of Â and W chosen per layer."""

    def __init__(self, d_in: int, d_out: int, aggregate_first: Optional[bool]):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_in, d_out))
        self.bias = nn.Parameter(torch.zeros(d_out))
        nn.init.xavier_uniform_(self.weight)
        self.aggregate_first = aggregates_first("gcn", d_in, d_out, aggregate_first)

    def comm_width(self) -> int:
        return self.weight.shape[0] if self.aggregate_first else self.weight.shape[1]

    def aggregate(self, h: torch.Tensor, agg: Aggregate, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        return agg(h) if self.aggregate_first else agg(h @ self.weight)

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return (z @ self.weight if self.aggregate_first else z) + self.bias


class SAGELayer(nn.Module):
    """h' = h·W_self + mean_{u∈N(v)} h_u · W_neigh + b (Hamilton et al., mean aggregator).

    The mean is linear, so mean(h)·W_neigh = mean(h·W_neigh): like DGL's ``SAGEConv``
    the narrower side is aggregated (``aggregate_first`` None: aggregate unless the
    layer narrows), which halves neither accuracy nor exactness, only the SpMM width."""

    def __init__(self, d_in: int, d_out: int, aggregate_first: Optional[bool] = None):
        super().__init__()
        self.aggregate_first = aggregates_first("sage", d_in, d_out, aggregate_first)
        self.fc_self = nn.Linear(d_in, d_out, bias=False)
        self.fc_neigh = nn.Linear(d_in, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out))
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)

    def comm_width(self) -> int:
        return self.fc_self.weight.shape[1] if self.aggregate_first else self.fc_self.weight.shape[0]

    def aggregate(self, h: torch.Tensor, agg: Aggregate, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        return agg(h) if self.aggregate_first else agg(self.fc_neigh(h))

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.fc_self(h) + (self.fc_neigh(z) if self.aggregate_first else z) + self.bias


class GINLayer(nn.Module):
    """h' = MLP((1+ε)·h + Σ_{u∈N(v)} h_u) (Xu et al.); ε lives on the aggregation side."""

    def __init__(self, d_in: int, d_out: int, eps_learnable: bool):
        super().__init__()
        eps = torch.zeros(1)
        if eps_learnable:
            self.eps = nn.Parameter(eps)
        else:
            self.register_buffer("eps", eps)
        self.mlp = nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU(), nn.Linear(d_out, d_out))

    def comm_width(self) -> int:
        return self.mlp[0].weight.shape[1]

    def aggregate(self, h: torch.Tensor, agg: Aggregate, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``rows``: when ``agg`` yields only these destination rows (MoP's pipeline chunks)."""
        return self.self_term(h if rows is None else h[rows]) + agg(h)

    def self_term(self, h: torch.Tensor) -> torch.Tensor:
        """(1+ε)·h: row-local, so a mode that splits the aggregation by columns may add it on the
        row side instead (``self_term(h) + agg(h)`` is the same sum either way)."""
        return (1 + self.eps) * h

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.mlp(z)


class GATLayer(nn.Module):
    """One-head GAT (Veličković et al.; DGL ``GATConv`` with ``num_heads=1`` and no
    feature/attention dropout): e_uv = LeakyReLU(a_l·Wh_u + a_r·Wh_v), α = softmax
    of e over v's in-edges, h'_v = Σ_u α_uv·Wh_u + b.

    The attention needs both endpoints, so ``aggregate`` takes the edge list
    from ``agg.edge_index()`` (a :class:`SparseAdjacency`) instead of an SpMM;
    modes that split the graph call :meth:`attend` on their own row blocks.
    """

    def __init__(self, d_in: int, d_out: int, negative_slope: float = 0.2):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, d_out))
        self.attn_r = nn.Parameter(torch.empty(1, d_out))
        self.bias = nn.Parameter(torch.zeros(d_out))
        self.negative_slope = negative_slope
        gain = nn.init.calculate_gain("relu")
        for weight in (self.fc.weight, self.attn_l, self.attn_r):
            nn.init.xavier_normal_(weight, gain=gain)

    def comm_width(self) -> int:
        return self.fc.weight.shape[1]

    def attend(self, h_src: torch.Tensor, dst: torch.Tensor, src: torch.Tensor,
               dst_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attention-weighted sum into the destinations; ``src`` indexes ``h_src``, ``dst``
        the destinations, whose own rows are ``h_src[dst_rows]`` (all of ``h_src`` if None)."""
        z = self.fc(h_src)
        z_dst = z if dst_rows is None else z[dst_rows]
        el = (z * self.attn_l).sum(-1)
        er = (z_dst * self.attn_r).sum(-1)
        e = F.leaky_relu(el[src] + er[dst], self.negative_slope)
        num_dst = z_dst.shape[0]
        e_max = torch.full((num_dst,), float("-inf"), dtype=e.dtype, device=e.device)
        e_max = e_max.scatter_reduce(0, dst, e.detach(), "amax")  # a shift: softmax is invariant to it
        w = torch.exp(e - e_max[dst])
        denom = torch.zeros(num_dst, dtype=e.dtype, device=e.device).index_add(0, dst, w)
        alpha = (w / denom[dst]).unsqueeze(1)
        return torch.zeros_like(z_dst).index_add(0, dst, alpha * z[src])

    def aggregate(self, h: torch.Tensor, agg, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        dst, src = agg.edge_index()
        return self.attend(h, dst, src)

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return z + self.bias


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


def row_hash_keep_mask(rows: torch.Tensor, width: int, stream: int, p: float) -> torch.Tensor:
    """Keep mask (len(rows) × width) of a counter-based dropout: entry (r, c) is a hash of
    (stream, global row id r, column c), so any process draws the same bits for a row
    without drawing the others.

    A 64-bit mix of each row id and of each column id (small vectors), xored per entry
    and finished with one 32-bit multiply-xorshift-multiply round; the entry is kept when
    the signed 32-bit result is at or above the p-quantile (P(keep) = 1 - p to 2^-32).
    """
    rows = rows.to(torch.int64)
    row_key = _mix64(rows * _signed(0x9E3779B97F4A7C15, 64) + stream) >> 32
    cols = torch.arange(width, dtype=torch.int64, device=rows.device)
    col_key = _mix64(cols * _signed(0xD1B54A32D192ED03, 64) + (stream ^ 0x5BD1E995)) >> 32
    x = row_key.to(torch.int32).unsqueeze(1) ^ col_key.to(torch.int32).unsqueeze(0)
    x.mul_(_signed(0x7FEB352D, 32))
    x.bitwise_xor_(_shift_right_logical(x, 15, 32))
    x.mul_(_signed(0x846CA68B, 32))
    return x >= -(1 << 31) + int(round(p * (1 << 32)))


class GlobalDropout:
    """Dropout whose mask is a function of (seed, epoch, layer, global row, column).

    Each process computes the mask of the rows it holds (``global_ids``; all
    rows when None) with :func:`row_hash_keep_mask`, so single and distributed
    runs drop the same entries, and a rank's cost is its own rows, not the graph.
    """

    def __init__(self, p: float, seed: int, num_global_nodes: int, global_ids: Optional[torch.Tensor]):
        self.p, self.seed, self.num_global_nodes, self.global_ids = p, seed, num_global_nodes, global_ids
        self.epoch = 0

    def stream(self, layer: int) -> int:
        """A 63-bit key of (seed, epoch, layer)."""
        return int(derive_words(self.seed, Stream.dropout, self.epoch, layer)[0]) >> 1

    def keep_mask(self, width: int, layer: int) -> torch.Tensor:
        """The boolean keep mask of this epoch and layer for the held rows (CPU)."""
        rows = self.global_ids if self.global_ids is not None else torch.arange(self.num_global_nodes)
        return row_hash_keep_mask(rows, width, self.stream(layer), self.p)

    def for_rows(self, rows: slice) -> "GlobalDropout":
        """The same masks, for a slice of the held rows (a pipeline chunk's)."""
        held = self.global_ids if self.global_ids is not None else torch.arange(self.num_global_nodes)
        view = GlobalDropout(self.p, self.seed, self.num_global_nodes, held[rows])
        view.epoch = self.epoch
        return view

    def apply_mask(self, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return h * keep.to(device=h.device, dtype=h.dtype) / (1.0 - self.p)

    def __call__(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        if self.p <= 0:
            return h
        return self.apply_mask(h, self.keep_mask(h.shape[1], layer))


class GNN(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        dims = spec.dims
        layers: List[nn.Module] = []
        custom = None
        if spec.name == "custom":
            from gnntrain.models.custom import resolve_layer_class

            custom = resolve_layer_class(spec.target)
        for d_in, d_out in zip(dims[:-1], dims[1:]):
            if custom is not None:
                layers.append(custom(d_in, d_out))
            elif spec.name == "gcn":
                layers.append(GCNLayer(d_in, d_out, spec.aggregate_first))
            elif spec.name == "sage":
                layers.append(SAGELayer(d_in, d_out, spec.aggregate_first))
            elif spec.name == "gin":
                layers.append(GINLayer(d_in, d_out, spec.gin_eps_learnable))
            elif spec.name == "gat":
                layers.append(GATLayer(d_in, d_out))
            else:
                raise ValueError(f"model {spec.name!r} is not available in aggregate/update form")
        self.layers = nn.ModuleList(layers)
        # LayerNorm normalises each row on its own, so a mode holding any subset of the rows computes the
        # same values; its initial weights are constants (no random draw, the layers keep their init)
        self.norms = nn.ModuleList(nn.LayerNorm(d) for d in dims[1:-1]) if spec.norm == "layer" else None
        if spec.label_classes:  # created last, so models without it keep their initial weights
            self.label_embedding = nn.Parameter(torch.empty(spec.label_classes, spec.in_dim))
            nn.init.xavier_uniform_(self.label_embedding)
        else:
            self.label_embedding = None

    def with_label_inputs(self, x: torch.Tensor, labels: torch.Tensor,
                          mask: Optional[torch.Tensor]) -> torch.Tensor:
        """x + Y·W_embed on the label-propagation rows (``mask``); other rows' labels are never read."""
        if mask is None or self.label_embedding is None:
            return x
        rows = mask.nonzero().flatten()
        return x.index_add(0, rows, self.label_embedding[labels[rows]])

    def forward(self, x: torch.Tensor, agg: Aggregate, dropout: Optional[GlobalDropout] = None) -> torch.Tensor:
        return run_layers(self, x, lambda i, layer, h: layer.update(h, layer.aggregate(h, agg)), dropout)

    def comm_widths(self) -> List[int]:
        """Feature width each layer hands to its aggregation (what a halo carries)."""
        return [layer.comm_width() for layer in self.layers]

    def hidden_norm(self, layer: int) -> Optional[nn.Module]:
        """The norm applied to the input of layer ``layer`` > 0, if any."""
        return None if self.norms is None else self.norms[layer - 1]


Dropout = Callable[[torch.Tensor, int], torch.Tensor]  # (h, layer index) -> h with dropout applied
LayerStep = Callable[[int, nn.Module, torch.Tensor], torch.Tensor]  # (index, layer, input) -> output


def hidden_activation(h: torch.Tensor, layer: int, dropout: Optional[Dropout] = None,
                      norm: Optional[nn.Module] = None) -> torch.Tensor:
    """The input of layer ``layer`` > 0: the previous layer's output, normalised (``model.norm``),
    through relu, then dropout."""
    h = torch.relu(h if norm is None else norm(h))
    return h if dropout is None else dropout(h, layer)


def run_layers(model: nn.Module, x: torch.Tensor, step: LayerStep, dropout: Optional[Dropout] = None) -> torch.Tensor:
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
    """The input of layer ``layer`` (1..layers-1; 0 or less: the last layer's), computed by ``forward()`` with the
    layer stack cut after layer ``layer`` - 1 and the hidden activation applied: any forward that runs
    ``model.layers`` (a mode's own layout, or a plain adjacency) yields the embeddings that way."""
    layers = model.layers
    depth = len(layers)
    k = depth - 1 if layer <= 0 else int(layer)
    if not 1 <= k <= depth - 1:
        raise ValueError(f"embeddings are the inputs of layers 1..{depth - 1} (this model has {depth} layers)")
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
