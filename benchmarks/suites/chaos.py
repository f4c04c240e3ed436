"""The `chaos` suite (#57, "Reliability you can measure"): seeded trials on an emulated cluster
(`gnntrain netem`), each killing a rank or a host of a training job at a random time and checking
that the job ends within 60 s naming what was lost, that nothing is left behind on any host, and
that ``train.resume=true`` ends bit-identical to an uninterrupted run (gnntrain/launch/chaos.py).

Sizes: ``CHAOS_TRIALS`` trials (default 50; ``--quick``: 5), seed ``CHAOS_SEED`` (default 0),
``CHAOS_HOSTS`` hosts (default 2). ``make chaos`` runs it. Failed trials keep their folders in
``CHAOS_WORKDIR`` (default a new folder under /var/tmp), which the notes name.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import List, Sequence

from benchmarks.harness import SuiteResult
from benchmarks.registry import suite

TITLE = (
    "Chaos: a rank or a host killed at a seeded random time in training, on an emulated cluster; "
    "the job's end, what it left behind and its resume"
)
COLUMNS = [
    "mode",
    "trials",
    "rank / host kills",
    "kill points (epochs done)",
    "kill points (s into training)",
    "max time to end (s)",
    "loss named",
    "leftovers found",
    "resumes identical",
    "passed",
]


def _row(name: str, records: Sequence, end_limit_s: float) -> List[str]:
    killed = [r for r in records if r.kill_s is not None]
    ends = [r.time_to_end_s for r in killed if r.time_to_end_s is not None]
    epochs = [r.kill_epoch for r in killed]
    seconds = [r.kill_s for r in killed]
    return [
        name,
        str(len(records)),
        f"{sum(r.victim == 'rank' for r in records)} / {sum(r.victim == 'host' for r in records)}",
        f"{min(epochs)}-{max(epochs)}" if epochs else "-",
        f"{min(seconds):.2f}-{max(seconds):.2f}" if seconds else "-",
        f"{max(ends):.1f}" if ends else "-",
        f"{sum(r.named for r in records)}/{len(records)}",
        str(sum(len(r.leftovers) for r in records)),
        f"{sum(r.identical for r in records)}/{len(records)}",
        f"{sum(r.ok(end_limit_s) for r in records)}/{len(records)}",
    ]


@suite("chaos")
def suite_chaos(quick: bool) -> SuiteResult:
    from gnntrain.launch import netem
    from gnntrain.launch.chaos import chaos_on_new_cluster
    from gnntrain.launch.chaos_schedule import ChaosSettings, figures, schedule

    trials = 5 if quick else int(os.environ.get("CHAOS_TRIALS", 50))
    seed = int(os.environ.get("CHAOS_SEED", 0))
    settings = ChaosSettings(hosts=int(os.environ.get("CHAOS_HOSTS", 2)))
    reason = netem.unavailable_reason()
    if reason:
        return SuiteResult(TITLE, COLUMNS, [], notes=f"not run: {reason}")
    workdir = Path(
        os.environ.get("CHAOS_WORKDIR")
        or tempfile.mkdtemp(prefix="gnntrain-chaos-", dir="/var/tmp")
    )
    records = chaos_on_new_cluster(
        "gtchaosb",
        netem.Link(gbit_s=1.0),
        schedule(seed, trials, settings),
        settings,
        workdir,
        progress=lambda r: print("  " + r.line(settings.end_limit_s), flush=True),
    )
    summary = figures(records, settings)
    failed = summary["trials"] - summary["passed"]
    if not failed:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [
        _row(mode, [r for r in records if r.mode == mode], settings.end_limit_s)
        for mode in settings.modes
        if any(r.mode == mode for r in records)
    ] + [_row("all", records, settings.end_limit_s)]
    trial_s = [r.phases_s.get("kill", 0) + r.phases_s.get("resume", 0) for r in records]
    reference_s = [r.phases_s["reference"] for r in records if r.phases_s.get("reference", 0) > 0]
    notes = (
        f"{summary['trials']} trials (seed {seed}) on {settings.hosts} emulated hosts "
        f"({settings.ranks_per_host} rank each, 1 Gbit/s links), csbm {settings.num_nodes} nodes, "
        f"{settings.epochs} epochs, a checkpoint every epoch, comm_timeout_s "
        f"{settings.comm_timeout_s:g}. Each trial: one mode (seeded shuffled rounds of all five), "
        "a victim (a rank: its process; a host: every process in its namespace, the torchrun agent "
        "too), a kill point drawn in the first 90% of the training window: the killed run's own "
        "epoch it falls in, then the rest timed from the reference's epochs. Passed = ended within "
        f"{settings.end_limit_s:g} s with a line naming the victim's rank and host, no leftovers "
        "(processes and listening ports in the hosts' namespaces, new /dev/shm segments nobody "
        "else holds, held locks, disk-tier tables but the killed ranks' own right after the kill "
        "and none after the resume, half-written files), and the resume's losses and model.pt "
        "bit-identical to an uninterrupted run of the same config (one per mode). Every mode runs "
        "deterministically here: hyscale with one rank per trainer and static shares "
        "(mode.drm=false: DRM moves shares by measured times, which no rerun replays), hongtu "
        "with every vertex table on the disk tier (host_budget=0), supergcn's int2 quantization "
        "seeded per (rank, epoch). "
        f"Time per trial (the killed run, its end, the sweeps and the resume): median "
        f"{statistics.median(trial_s):.1f} s, max {max(trial_s):.1f} s; each mode's reference run "
        f"once: median {statistics.median(reference_s or [0]):.1f} s. Start-up kills (torchrun's "
        "rendezvous, loading, the process group) are not in this schedule: `gnntrain netem chaos "
        "--startup-share` draws them (docs/design.md#chaos)."
        + (f" FAILED: {failed} trial(s); their folders are in {workdir}." if failed else "")
        + (" Errors: " + "; ".join(summary["errors"]) + "." if summary["errors"] else "")
    )
    return SuiteResult(
        TITLE,
        COLUMNS,
        rows,
        notes=notes,
        extra={
            "seed": seed,
            "figures": summary,
            "trials": [r.to_json(settings.end_limit_s) for r in records],
        },
    )
