"""``gnntrain calibrate``: measure this host's costs and write a hardware profile the cost models
use.

The probes (docs/design.md#cost-models), each at every intra-op thread count a plan on the profile
can give a rank (cores / ranks, for 1..ranks_per_node ranks), run by that many processes at once so
that each sees the host as a rank of a busy node does:

* SpMM forward+backward per edge and per edge x column (widths 8 and 128), with ``kernel=auto``'s
  kernel;
* GEMM multiply-adds per second;
* elementwise bytes per second (host memory bandwidth as torch's kernels see it), a hidden layer's
  relu + dropout per element, and rows picked and added back by index per element;
* the fixed costs the rates do not explain, fitted on real training runs of a 2000-node graph: per
  layer and per optimizer step (mode=single, 1 and 3 layers, at each thread count) and per
  collective call (mode=partition on 2 ranks);
* per mode, the factor between measured and modelled compute that grows with the graph, on a
  40 000-node graph (``mode_factor``);
* host→device bandwidth where the profile's device is CUDA;
* one 2-rank probe of all_to_all_single, all_reduce and all_gather on the profile's backend (latency
  from 64-byte calls, bandwidth from 4 MiB ones); probe processes fork from the ranks' preloaded
  server.

The profile is the composed one with ``cost`` filled in,
``host_mem_gbps``/``core_gmacs``/``h2d_gbps`` replaced by the measurements, written as ``<user
config dir>/hardware/<name>.yaml`` (the user config dir is ``$GNNTRAIN_USER_CONFIG_DIR``, else
``~/.config/gnntrain``; ``gnntrain`` adds it to Hydra's search path, so ``hardware=<name>`` composes
it).

The probes live in :mod:`gnntrain.launch.host_probes` (rates, collectives) and
:mod:`gnntrain.launch.training_probes` (fixed costs, per-mode factors); this module runs them and
writes the profile.
"""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any, Callable, Dict, List

from gnntrain.config.schema import option_value
from gnntrain.errors import PlanError
from gnntrain.launch.host_probes import GEMM_WIDTHS, probe_collectives, probe_h2d, rates_under_load
from gnntrain.launch.training_probes import fit_mode_factors, fit_overheads
from gnntrain.sizing import host_cores


def user_config_dir() -> Path:
    return Path(os.environ.get("GNNTRAIN_USER_CONFIG_DIR") or Path.home() / ".config" / "gnntrain")


def thread_counts(hw) -> List[int]:
    """Every intra-op thread count a rank can get on this profile: cores / r for r =
    1..ranks_per_node."""
    cores = host_cores(hw)
    return sorted({max(1, cores // r) for r in range(1, max(1, int(hw.ranks_per_node)) + 1)})


def calibrate(
    cfg, cache_dir, scratch: Path, say: Callable[[str], None] = print, quick: bool = False
) -> Dict[str, Any]:
    """Run every probe on ``cfg.hardware``; returns the profile's ``cost`` block plus the replaced
    rates. ``quick``: the per-mode factors from one short run of a smaller graph each (rougher,
    several times faster)."""
    import torch

    hw = cfg.hardware
    device = option_value(hw.device)
    if device == "cuda" and not torch.cuda.is_available():
        raise PlanError(
            "hardware.device",
            f"profile '{hw.name}' is a CUDA profile, but no CUDA device is "
            "available here, so the SpMM, GEMM and host-to-device probes cannot run on it.",
            f"run gnntrain calibrate hardware={hw.name} on the GPU host, or calibrate a CPU "
            "profile here (hardware=local-cpu)",
        )
    backend = "nccl" if device == "cuda" and torch.cuda.device_count() >= 2 else "gloo"
    previous = torch.get_num_threads()
    cost: Dict[str, Any] = {
        k: []
        for k in (
            "threads",
            "kernel",
            "spmm_ns_per_edge",
            "spmm_ns_per_edge_col",
            "gemm_gflops",
            "elementwise_gbps",
            "activation_ns_per_element",
            "gather_ns_per_element",
            "op_overhead_us",
            "epoch_overhead_us",
        )
    }
    cost["gemm_widths"] = list(GEMM_WIDTHS)
    try:
        cores = host_cores(hw)
        for threads in thread_counts(hw):
            # on CUDA each rank owns its GPU: the probes run once, on this process's device
            ranks = 1 if device == "cuda" else max(1, cores // threads)
            rate = rates_under_load(threads, ranks, device, cache_dir, scratch)
            spmm, gemm, elementwise = rate["spmm"], rate["gemm"], rate["elementwise"]
            activation, gather = rate["activation"], rate["gather"]
            for key, value in (
                ("threads", threads),
                ("kernel", spmm["kernel"]),
                ("spmm_ns_per_edge", spmm["edge_ns"]),
                ("spmm_ns_per_edge_col", spmm["ns"]),
                ("gemm_gflops", [round(r, 3) for r in gemm]),
                ("elementwise_gbps", elementwise),
                ("activation_ns_per_element", activation),
                ("gather_ns_per_element", gather),
                ("op_overhead_us", 0.0),
                ("epoch_overhead_us", 0.0),
            ):
                cost[key].append(round(value, 4) if isinstance(value, float) else value)
            rates = ", ".join(f"{r:.1f}" for r in gemm)
            say(
                f"{threads} thread(s): SpMM {spmm['edge_ns']:.2f} ns/edge + {spmm['ns']:.3f} "
                "ns/edge·col "
                f"({spmm['kernel']}), GEMM {rates} GMAC/s at "
                f"widths {', '.join(map(str, GEMM_WIDTHS))}, elementwise {elementwise:.1f} GB/s, "
                "activation "
                f"{activation:.2f} ns/element, gather {gather:.2f} ns/element"
            )
    finally:
        torch.set_num_threads(previous)
    collectives = probe_collectives(backend, scratch)
    for kind, figures in collectives.items():
        cost[f"{kind}_latency_us"] = round(figures["latency_us"], 2)
        cost[f"{kind}_gbps"] = round(figures["gbps"], 4)
        say(
            f"{kind} ({backend}, 2 ranks): latency {figures['latency_us']:.0f} µs, "
            f"{figures['gbps']:.2f} GB/s"
        )
    fit_overheads(cfg, scratch, cost, say)
    fit_mode_factors(cfg, scratch, cost, say, quick=quick)
    rates: Dict[str, Any] = {
        "host_mem_gbps": max(cost["elementwise_gbps"]),
        "core_gmacs": round(cost["gemm_gflops"][0][-1] / cost["threads"][0], 4),
    }
    if device == "cuda":
        rates["h2d_gbps"] = round(probe_h2d(), 3)
        say(f"host→device: {rates['h2d_gbps']:.1f} GB/s")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cost["calibrated"] = f"{platform.node()}, torch {torch.__version__}, {stamp}" + (
        " (quick)" if quick else ""
    )
    return {"cost": cost, **rates}


def write_profile(hw, measured: Dict[str, Any], name: str, directory: Path) -> Path:
    """The composed profile with the measurements, as ``directory/hardware/<name>.yaml``."""
    import yaml
    from omegaconf import OmegaConf

    profile = OmegaConf.to_container(hw, resolve=True, enum_to_str=True)
    profile.update(measured, name=name)
    path = directory / "hardware" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Measured by `gnntrain calibrate hardware={hw.name}` on "
        f"{measured['cost']['calibrated']}.\n"
        "# Compose it with hardware="
        + name
        + "; re-run calibrate after changing the host or torch.\n"
    )
    body = yaml.safe_dump(
        {"defaults": ["hardware_schema"], **profile}, sort_keys=False, default_flow_style=None
    )
    path.write_text(header + body)
    return path
