"""``mode=hongtu``: full-graph training with host-resident vertex data, chunked
layer-major execution, a recomputation–caching hybrid and deduplicated transfers (HongTu: Scalable
Full-Graph GNN Training on Multiple GPUs (via communication-optimized CPU data offloading);
docs/design.md#hongtu).

Placement (§4). Each rank is one device with its host memory. The host holds,
for the rank's partition, every layer's input x^l, its gradient ∇x^l and the
cached aggregation outputs; the device (a GPU, or on CPU hosts an accounted
memory arena capped by ``mode.device_memory``) holds one chunk's working set
at a time. A row another rank's host owns reaches this device over
torch.distributed; it is still counted as ``h2d`` (on one node it would cross
PCIe from shared host memory), while device-to-device copies are ``peer``.

Schedule (Algorithm 1). Forward is layer-major: for each layer, for each
batch, gather x^l[N_ij], run the layer on chunk G_ij, write x^{l+1}[V_ij] (and
the aggregation a^l[V_ij]) back to the host. The loss is taken on the host;
backward runs the layers in reverse, each batch reloading ∇x^{l+1}[V_ij] and
recomputing from the cached a^l (GCN/SAGE/GIN: only the update is redone) or
from reloaded neighbours (GAT: the whole layer). ∇x^l[N_ij] is ⊕-added into
host memory. Parameter gradients are all-reduced once per epoch (SUM) by the
shared full-graph loop, which sees the whole schedule as one autograd node.

Deduplication (§5). ``p2p``: within a batch each row is loaded by its owner
only, others get it by peer exchange. ``reuse``: rows needed by the next batch
stay on the device; gradient rows still needed stay and keep accumulating.
Both follow one general keep/flush rule (keep D_t ∩ D_{t+1}, where D_t is
what the device holds at batch t), not the paper's reverse-order assumption.

Modules: :mod:`.config` (options), :mod:`.arena` (device memory cap), :mod:`.schedule` (sweeps),
:mod:`.indices` (their index tensors on the device), :mod:`.transfer_model` (the §5.3 transfer
model and a chunk's device working set), :mod:`.chunking` (the chunk layout and its figures on a
graph), :mod:`.transfers` (loads, write-backs, carried buffers), :mod:`.engine` (the layer-major
engine), :mod:`.tiers` (host and disk tables), :mod:`.direct` (the direct path), :mod:`.strategy`
(the rank side), :mod:`.cost` (the planners of the engine and the direct path: checks, cost model,
plan details), :mod:`.mode` and :mod:`.direct_mode` (prepare and strategy of each) and
:mod:`.spec` (the registered spec).
"""

from gnntrain.modes.hongtu.config import HongTuConfig, parse_bytes
from gnntrain.modes.hongtu.cost import DirectPlanner, HongTuPlanner
from gnntrain.modes.hongtu.spec import HONGTU

__all__ = ["HONGTU", "DirectPlanner", "HongTuConfig", "HongTuPlanner", "parse_bytes"]
