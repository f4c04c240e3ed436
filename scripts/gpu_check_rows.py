"""One table row per GPU-check record (scripts/gpu_check.py): check, mode, status, median epoch, and
what the record showed, in words."""

from __future__ import annotations

import statistics
from typing import List


def _ms(seconds) -> str:
    if isinstance(seconds, list):
        seconds = statistics.median(seconds[1:] if len(seconds) > 1 else seconds)
    return f"{seconds * 1e3:.1f}" if seconds is not None else ""


def row(r: dict) -> List[str]:
    """One table row: check, mode, status, median epoch, what it showed."""
    shown = []
    if "exact_vs_cpu_rel" in r:
        shown.append(f"max rel gap vs CPU {r['exact_vs_cpu_rel']:.1e} (goal <= 1e-9)")
    if "device_peak_bytes" in r:
        shown.append(
            f"device peak {r['device_peak_bytes'] / 2**30:.3f} GiB of "
            f"{r['device_budget_bytes'] / 2**30:.3f}"
            f" GiB budget, {r['chunks_per_part']} chunks; {r['slowdown_vs_single']:.2f}x single's "
            "epoch "
            f"({_ms(r['single_epoch_time_s'])} ms; paper 1.3-3.8x)"
        )
    if "accel_share_first_last" in r:
        first, last = r["accel_share_first_last"]
        per_seed = " / ".join(f"{t * 1e6:.1f}" for t in r.get("train_s_per_seed", []))
        shown.append(
            f"GPU trainer's share {first:.3f} -> {last:.3f} (train us per seed {per_seed}); "
            f"GPU-only {_ms(r['gpu_only_epoch_time_s'])} ms, "
            f"CPU-only {_ms(r['cpu_only_epoch_time_s'])} ms per epoch"
        )
        if "hybrid_over_gpu_only" in r:
            pools = r.get("sampler_pool_threads")
            shown.append(
                f"hybrid {r['hybrid_over_gpu_only']:.2f}x GPU-only (steady epochs, goal <= 1.0; "
                "sampler "
                f"pools {pools}, GPU-only {r.get('gpu_only_sampler_pool_threads')})"
            )
        if "min_share_0_01_epoch_time_s" in r:
            shown.append(
                "with mode.drm_min_share=0.01: share -> "
                f"{r['min_share_0_01_accel_share_last']:.3f}, "
                f"{_ms(r['min_share_0_01_epoch_time_s'])} ms per epoch"
            )
    if "ratio_vs_pyg" in r:
        shown.append(
            f"{r['ratio_vs_pyg']:.2f}x PyG GCNConv ({_ms(r['pyg_epoch_time_s'])} ms), kernel "
            f"{r['kernel']}"
        )
        if "ratio_vs_pyg_recomputing" in r:
            shown.append(
                f"{r['ratio_vs_pyg_recomputing']:.2f}x with A·x recomputed every epoch like PyG "
                f"({_ms(r['recomputing_epoch_time_s'])} ms)"
            )
    if "paper_ratio_vs_single" in r:
        shown.append(
            f"{r['paper_ratio_vs_single']:.2f}x single's epoch ({_ms(r['single_epoch_time_s'])} "
            "ms; "
            f"both recompute A·x; single keeping it: {_ms(r['single_cached_epoch_time_s'])} ms); "
            f"paper 1.3-3.8x"
        )
    if "timeline" in r:
        t = r["timeline"]
        shown.append(
            f"last epoch on the device: compute {t.get('compute_s', 0) * 1e3:.0f} ms, h2d "
            f"{t.get('h2d_s', 0) * 1e3:.0f} ms, d2h {t.get('d2h_s', 0) * 1e3:.0f} ms, host add "
            f"{t.get('host_accumulate_s', 0) * 1e3:.0f} ms, wall {t.get('wall_s', 0) * 1e3:.0f} "
            "ms; "
            f"{100 * t['copy_share_under_compute']:.0f}% of copy time under compute"
        )
    if "measured_disk_bytes_per_epoch" in r:
        measured = r["measured_disk_bytes_per_epoch"]
        tables = ", ".join(r["tables_on_disk"])
        shown.append(
            f"disk tier {tables}: {measured.get('disk_read', 0) / 2**20:.1f} MiB read, "
            f"{measured.get('disk_write', 0) / 2**20:.1f} MiB written per epoch (predicted "
            f"{'equal' if measured == r['predicted_disk_bytes_per_epoch'] else 'DIFFERENT'})"
        )
    if "rows" in r:
        shown.append(f"{r['rows']} rows under the user's IDs")
    if "seconds" in r:
        shown.append(f"{r['seconds']:.0f} s")
    if r.get("error"):
        shown.append(r["error"].splitlines()[-1][:200])
    return [r["name"], r["mode"], r["status"], _ms(r.get("epoch_time_s")), "; ".join(shown)]
