"""``mode=hyscale``: hybrid CPU + accelerator mini-batch training with
two-stage prefetch and dynamic resource management (HyScale-GNN: A Scalable Hybrid GNN Training
System on Single-Node Heterogeneous Architecture; docs/design.md#hyscale).

* **Trainers** (§III-B): ``cpu_trainers`` then ``accel_trainers`` ranks in one
  gloo group. Every rank holds the whole graph and the features in host
  memory. An accelerator trainer computes on its GPU on a CUDA host; on a
  CPU-only host it is a CPU process that still runs every protocol stage (its
  "transfer" is a host copy, counted as ``h2d``).
* **Batches**: ``mode.batch_size`` is the *global* batch; each iteration one
  global batch of training nodes (a seeded permutation per epoch) is cut into
  contiguous slices by the current shares (:func:`split_batch`). Each trainer
  samples its slice with DGL's ``NeighborSampler`` (``mode.fanouts``,
  -1 = every in-neighbour) and aggregates with the global-degree edge weights
  rescaled by deg/sampled-deg, the usual unbiased estimator; with fanout -1 it
  is exactly full-graph aggregation.
* **Pipeline** (§III-B, §IV-B): a pool of sampler threads draws batches ahead
  of training (:class:`~.pipeline.SamplerPool`, across epochs), a loader thread
  gathers features in k order, a transfer thread copies, the main thread trains,
  with depth-2 queues: batch i+2 is gathered while i+1 is transferred and i
  trains (pinned memory and ``non_blocking`` copies on a side stream on CUDA).
  ``prefetch=false`` runs the same stages serially.
* **Threads** (§III-B): a GPU trainer reserves host cores for its sampler pool
  and loader, the CPU trainers share the rest (:mod:`.threads`); DRM's
  balance_thread resizes the pool and the training threads of CPU trainers.
* **Initial shares** (§V): the performance model's split, with T_samp measured
  at start, unless ``mode.shares`` gives one.
* **Gradient sync** (§III-A "Synchronizer"; synchronous SGD as in §II-B): synchronous. Loss = Σ CE
  over a trainer's slice / global batch size, and gradients are all-reduced with SUM, so trainer i's
  mean gradient enters with weight b_i/B (unbiased for uneven shares).
* **DRM** (§IV-A, Algorithm 1): :func:`drm_step`, a pure function of the
  per-trainer stage times; balance_work is the damped proportional rule of
  :func:`rebalance`. A decision made after iteration t applies to batch t+3
  (the prefetch queue), in both pipeline settings, so that prefetch never
  changes which batches are drawn.
* **Performance model** (§V): :func:`predict_times`, printed by ``gnntrain
  plan`` and set against the measured stage times in summary.json.

Every draw is one unit seeded by (seed, trainer, batch), so prefetch on and off
and any number of sampler threads draw the same batches. DGL's sampler draws from
per-thread engines, so :class:`NeighborSampler` runs every draw on one dedicated
thread; the torch-native one runs on all the pool's threads.

Modules: :mod:`.config` (options), :mod:`.batches` (global batches and shares), :mod:`.sampler`
(neighbour sampling), :mod:`.drm` (dynamic resource management), :mod:`.perf_model` (performance
model), :mod:`.pipeline` (sampler pool and prefetch), :mod:`.threads` (host threads per trainer),
:mod:`.trainer` (one trainer's epochs), :mod:`.cost` (the planner: its checks, cost model and plan
details) and :mod:`.mode` (prepare, strategy and the registered spec).
"""

from gnntrain.modes.hyscale.batches import global_batches, split_batch
from gnntrain.modes.hyscale.config import HyScaleConfig
from gnntrain.modes.hyscale.cost import HyScaleDetails, HyScalePlanner
from gnntrain.modes.hyscale.drm import DRMState, algorithm1, drm_step, floor_shares, rebalance
from gnntrain.modes.hyscale.mode import HYSCALE
from gnntrain.modes.hyscale.perf_model import frontier_sizes, predict_times
from gnntrain.modes.hyscale.sampler import NeighborSampler

__all__ = [
    "DRMState",
    "HYSCALE",
    "HyScaleConfig",
    "HyScaleDetails",
    "HyScalePlanner",
    "NeighborSampler",
    "algorithm1",
    "drm_step",
    "floor_shares",
    "frontier_sizes",
    "global_batches",
    "predict_times",
    "rebalance",
    "split_batch",
]
