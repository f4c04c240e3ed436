"""``mode=hyscale``'s cost model: its checks, the performance model's epoch (HyScale-GNN §V), the
host threads per trainer and the plan's details."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch

from gnntrain.errors import PlanError
from gnntrain.modes.base import ModePlanner
from gnntrain.modes.cost import CommEstimate, Details, Work, detail
from gnntrain.modes.hyscale.batches import initial_shares
from gnntrain.modes.hyscale.perf_model import per_seed_costs, predict_times
from gnntrain.modes.hyscale.sampler import resolve_sampler
from gnntrain.modes.hyscale.threads import rank_budgets, split_threads
from gnntrain.sizing import host_cores, place_ranks


@dataclass(frozen=True)
class HyScaleDetails(Details):
    trainers: Dict[str, int]  # CPU and accelerator
    fanouts: List[int]
    global_batch: int
    initial_shares: List[float]
    prefetch: bool
    drm: bool
    sampler: str
    performance_model: Dict[str, float] = detail("performance model (per iteration)")
    predicted_v0: List[float] = detail("predicted |V0| per trainer")
    threads_per_trainer: Dict[str, Dict[str, int]]
    # what each rank's initial split reads (with its own measured T_samp): seconds per seed
    model_seconds_per_seed: Dict[str, Any]


class HyScalePlanner(ModePlanner):
    @property
    def trainers(self) -> int:
        return int(self.options.cpu_trainers) + int(self.options.accel_trainers)

    def world_size(self, hardware_world_size: int) -> int:
        return max(0, self.trainers)  # one rank per trainer, whatever hardware.ranks_per_node says

    def num_parts(self, world_size: int) -> int:
        return 1  # no partitioning: every trainer reads the whole graph from host memory

    @property
    def host_ranks(self) -> Optional[int]:
        """The CPU trainers come first; the accelerator trainers take the GPUs in turn."""
        return int(self.options.cpu_trainers)

    def validate(self, ctx) -> List[str]:
        o, model = self.options, self.settings.model
        cpu, acc = int(o.cpu_trainers), int(o.accel_trainers)
        if cpu < 0 or acc < 0 or cpu + acc == 0:
            raise PlanError(
                "mode.cpu_trainers/mode.accel_trainers",
                f"{cpu} CPU + {acc} accelerator trainers: "
                "at least one trainer is needed and neither count may be negative.",
                "set mode.cpu_trainers=1 mode.accel_trainers=1",
            )
        fanouts = [int(f) for f in o.fanouts]
        if len(fanouts) != int(model.layers):
            layers = int(model.layers)
            example = "[" + ",".join(["10"] * layers) + "]"
            fix = f"give {layers} fanouts, e.g. mode.fanouts={example}"
            if fanouts:
                fix += f", or set model.layers={len(fanouts)}"
            raise PlanError(
                "mode.fanouts",
                f"{len(fanouts)} fanouts for a {layers}-layer model: one "
                "fanout per layer is needed.",
                fix,
            )
        if any(f == 0 or f < -1 for f in fanouts):
            raise PlanError(
                "mode.fanouts",
                f"fanouts {fanouts}: each must be a positive count or -1 (all neighbours).",
                "use e.g. mode.fanouts=[25,10] or [-1,-1]",
            )
        if int(o.batch_size) < cpu + acc:
            raise PlanError(
                "mode.batch_size",
                f"a global batch of {o.batch_size} cannot give each of the "
                f"{cpu + acc} trainers a seed.",
                f"use mode.batch_size >= {cpu + acc}",
            )
        if acc > 0 and self.settings.device == "cuda" and not torch.cuda.is_available():
            raise PlanError(
                "mode.accel_trainers",
                f"{acc} accelerator trainers on a CUDA profile, but no CUDA "
                "device is available here.",
                "use hardware=local-cpu (accelerator trainers then run "
                "as CPU processes), or mode.accel_trainers=0",
            )
        for key, values in (("mode.shares", o.shares), ("mode.slowdown", o.slowdown)):
            if values and len(values) != cpu + acc:
                raise PlanError(
                    key,
                    f"{len(values)} values for {cpu + acc} trainers.",
                    f"give one value per trainer, or leave {key} empty",
                )
        if o.shares and any(float(s) <= 0 for s in o.shares):
            raise PlanError(
                "mode.shares",
                f"shares {list(o.shares)} must all be positive.",
                "use positive fractions, e.g. [0.3, 0.7]",
            )
        if any(float(s) < 1 for s in o.slowdown):
            raise PlanError(
                "mode.slowdown",
                "a slowdown factor below 1 would speed a trainer up.",
                "use factors >= 1 (1 = as fast as the hardware)",
            )
        if not 0.0 <= float(o.drm_min_share) <= 1.0 / (cpu + acc):
            raise PlanError(
                "mode.drm_min_share",
                f"{o.drm_min_share} is outside [0, 1/{cpu + acc}]: the floors "
                "could not sum to at most the whole batch.",
                "use e.g. mode.drm_min_share=0.05",
            )
        if int(o.sampler_threads) < 0:
            raise PlanError(
                "mode.sampler_threads",
                f"{o.sampler_threads} sampler threads: the count must be 0 "
                "(derived from the host's cores) or positive.",
                "use mode.sampler_threads=0",
            )
        if not 0.0 < float(o.drm_ema) <= 1.0:
            raise PlanError(
                "mode.drm_ema", f"{o.drm_ema} is outside (0, 1].", "use e.g. mode.drm_ema=0.5"
            )
        warnings = []
        if acc and self.settings.device == "cpu":
            warnings.append(
                f"CPU-only profile: the {acc} accelerator trainer(s) run as CPU processes"
            )
        return warnings

    def rank_threads(
        self, rank_devices: Tuple[str, ...], ranks_per_node: int, cores: int
    ) -> Tuple[int, ...]:
        """HyScale reserves host cores for the accelerator trainers' sampling and loading (§III-B):
        a rank with a device gets its sampler pool (``mode.sampler_threads``, 0 = an even share)
        plus a loader and a feeding thread, the CPU trainers share the rest; never more than
        ``cores`` in all (:func:`~gnntrain.modes.hyscale.threads.rank_budgets`)."""
        return rank_budgets(
            [d.startswith("cuda") for d in rank_devices], cores, int(self.options.sampler_threads)
        )

    def thread_plan(self) -> Tuple[Tuple[str, ...], Tuple[int, ...], List[Dict[str, int]]]:
        """(devices, host threads, their split into sampler pool / loader / training) per
        trainer."""
        hw = self.settings.hardware
        devices = place_ranks(
            self.settings.device,
            self.trainers,
            int(hw.ranks_per_node),
            hw.gpus_per_node,
            self.host_ranks,
        )
        budgets = self.rank_threads(
            devices, min(self.trainers, int(hw.ranks_per_node)), host_cores(hw)
        )
        return (
            devices,
            budgets,
            [split_threads(b, d.startswith("cuda")) for d, b in zip(devices, budgets)],
        )

    def _threads(self) -> List[int]:
        """Training threads per trainer, for the performance model."""
        return [split["T_TC"] for split in self.thread_plan()[2]]

    def is_exact(self) -> bool:
        return False  # mini-batch training on sampled neighbourhoods (HyScale-GNN §III)

    def work(self, ctx) -> Work:
        """HyScale-GNN §V: T_exec per iteration (eqs. 6-13, from the calibrated host bandwidth and
        GEMM rate the profile holds) times ceil(train nodes / batch) iterations, plus each
        iteration's fixed layer and step overheads. Sampling is not modelled, as in the paper."""
        model = predict_times(ctx, self.settings.hardware, self.options, self._threads())
        iterations = max(1, -(-ctx.train_nodes // int(self.options.batch_size)))
        work = Work(
            fixed_s=model["T_exec_s"] * iterations,
            layers=(len(ctx.dims) - 1) * iterations,
            steps=iterations,
        )
        if ctx.world_size > 1:
            work.collectives += [("allreduce", ctx.param_bytes)] * iterations
        return work

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        model = predict_times(ctx, self.settings.hardware, self.options, self._threads())
        acc = int(self.options.accel_trainers)
        by_kind = {"allreduce": ctx.world_size * ctx.param_bytes} if ctx.world_size > 1 else {}
        if acc:
            rows = sum(model["V0_per_trainer"][int(self.options.cpu_trainers) :])
            by_kind["h2d"] = int(rows * ctx.feat_dim * ctx.dtype_bytes)
        return CommEstimate(
            None,
            by_kind,
            "per iteration (x ceil(train nodes / batch_size) per epoch): allreduce = "
            "trainers x model bytes; h2d = sum over accelerator trainers |V0_i| x f0 x dtype bytes "
            "(features; + the sampled topology)",
        )

    def details(self, ctx) -> HyScaleDetails:
        o = self.options
        model = predict_times(ctx, self.settings.hardware, o, self._threads())
        ms = {
            k[:-2] + " ms": round(v * 1e3, 4)
            for k, v in model.items()
            if k.endswith("_s") and isinstance(v, float)
        }
        _, budgets, splits = self.thread_plan()
        costs = per_seed_costs(model)
        return HyScaleDetails(
            trainers={"CPU": int(o.cpu_trainers), "accelerator": int(o.accel_trainers)},
            fanouts=list(o.fanouts),
            global_batch=int(o.batch_size),
            initial_shares=[round(s, 4) for s in initial_shares(o, self.trainers)],
            prefetch=bool(o.prefetch),
            drm=bool(o.drm),
            sampler=resolve_sampler(o.sampler.value)
            + (" (auto)" if o.sampler.value == "auto" else ""),
            performance_model=ms,
            predicted_v0=model["V0_per_trainer"],
            threads_per_trainer={
                f"{'accel' if r >= int(o.cpu_trainers) else 'cpu'}{r}": {
                    "all": b,
                    "sampler pool": sp["T_SC"],
                    "loader": sp["T_Load"],
                    "training": sp["T_TC"],
                }
                for r, (b, sp) in enumerate(zip(budgets, splits))
            },
            model_seconds_per_seed={
                k: ([float(f"{x:.4g}") for x in v] if isinstance(v, list) else float(f"{v:.4g}"))
                for k, v in costs.items()
            },
        )
