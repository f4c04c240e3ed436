"""The ``gnntrain netem up|run|show|down|chaos`` command: its arguments, and a link taken from a
hardware profile's ``link_gbit_s``/``link_latency_us``. The cluster itself is
gnntrain/launch/netem.py; the chaos suite, gnntrain/launch/chaos.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from gnntrain.errors import GnnTrainError
from gnntrain.launch import netem
from gnntrain.launch.netem import Link, create, destroy, load
from gnntrain.launch.netem_jobs import run_job


def _profile_link(profile: str, config_root: Path) -> Link:
    import yaml

    path = config_root / "hardware" / f"{profile}.yaml"
    if not path.exists():
        names = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise GnnTrainError(f"no hardware profile '{profile}'. Fix: use one of {', '.join(names)}")
    raw = yaml.safe_load(path.read_text())
    if not raw.get("link_gbit_s"):
        raise GnnTrainError(
            f"hardware profile '{profile}' names no network link (link_gbit_s). Fix: give --gbit"
        )
    return Link(float(raw["link_gbit_s"]), float(raw.get("link_latency_us") or 0.0))


def netem_command(argv: Sequence[str], config_root: Path) -> int:
    """``gnntrain netem up|run|show|down``: see gnntrain.launch.netem's docstring and the README.
    ``config_root`` holds the hardware profiles that ``--profile`` reads."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="gnntrain netem", description=netem.__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="make k hosts on a shaped network")
    up.add_argument("--hosts", type=int, required=True)
    up.add_argument("--gbit", type=float, help="link bandwidth in Gbit/s, each way")
    up.add_argument("--latency-us", type=float, default=None, help="one-way latency (needs netem)")
    up.add_argument(
        "--profile", help="take the link from a hardware profile's link_gbit_s/link_latency_us"
    )
    up.add_argument(
        "--cores-per-host",
        type=int,
        default=0,
        help="cap each host at this many cores (a cpu cgroup); where the machine has fewer than "
        "hosts x cores, the cluster runs time-dilated (links and caps scaled alike)",
    )
    run = sub.add_parser("run", help="gnntrain run across the hosts, one torchrun agent per host")
    run.add_argument("--ranks-per-host", type=int, default=1)
    run.add_argument("--port", type=int, default=29610)
    run.add_argument("--run-dir", default="outputs/netem", help="host i writes RUN_DIR/host<i>")
    run.add_argument(
        "overrides", nargs=argparse.REMAINDER, help="gnntrain run overrides (after --)"
    )
    sub.add_parser("show", help="describe the cluster")
    sub.add_parser("down", help="delete the cluster's namespaces")
    _chaos_arguments(sub)
    for p in sub.choices.values():
        default = "gtchaos" if p.prog.endswith(" chaos") else "gtnet"
        p.add_argument("--name", default=default, help=f"the cluster's name (default {default})")
    args = parser.parse_args(list(argv))
    try:
        if args.action == "up":
            if (args.gbit is None) == (args.profile is None):
                raise GnnTrainError("netem up: give exactly one of --gbit and --profile")
            link = (
                _profile_link(args.profile, config_root) if args.profile else Link(args.gbit, 0.0)
            )
            if args.latency_us is not None:
                link = Link(link.gbit_s, args.latency_us)
            cluster = create(args.name, args.hosts, link, args.cores_per_host)
            print(
                f"emulated network '{cluster.name}' is up: {cluster.describe()}; host 0 is "
                f"{cluster.address(0)} in namespace {cluster.namespace(0)}"
            )
            if cluster.dilation > 1:
                print(
                    f"time dilation x{cluster.dilation:.2f}: links shaped to "
                    f"{link.gbit_s / cluster.dilation:.3g} "
                    f"Gbit/s and hosts capped at {cluster.cores_per_host / cluster.dilation:.2f} "
                    "cores; the runs' "
                    "times are real seconds, so divide them by the dilation"
                )
            return 0
        if args.action == "down":
            gone = destroy(args.name)
            print(
                f"deleted {', '.join(gone)}"
                if gone
                else f"no namespaces of '{args.name}' were left"
            )
            return 0
        if args.action == "chaos":
            return _chaos(args)
        cluster = load(args.name)
        if args.action == "show":
            print(
                f"{cluster.name}: {cluster.describe()}; addresses "
                + ", ".join(cluster.address(i) for i in range(cluster.hosts))
            )
            return 0
        overrides = [o for o in args.overrides if o != "--"]
        result = run_job(cluster, overrides, Path(args.run_dir), args.ranks_per_host, args.port)
        for i, (rc, out) in enumerate(zip(result.returncodes, result.outputs)):
            if i == 0 or rc != 0:
                print(f"--- host {i} (exit {rc}) ---\n{out.rstrip()}")
        if result.dilation > 1:
            print(
                f"time dilation x{result.dilation:.2f}: the times above are real; the emulated "
                "cluster's are "
                f"{1 / result.dilation:.3f}x them (summary.json records time_dilation)"
            )
        return 0 if result.ok else 1
    except GnnTrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _chaos_arguments(sub) -> None:
    from gnntrain.launch.chaos_schedule import MODES, ChaosSettings

    chaos = sub.add_parser(
        "chaos",
        help="kill a rank or a host of training jobs at seeded random times, on a cluster made for "
        "it; check each job's end, what it left behind and its resume (gnntrain/launch/chaos.py)",
    )
    chaos.add_argument("--trials", type=int, default=50)
    chaos.add_argument("--seed", type=int, default=0)
    chaos.add_argument("--hosts", type=int, default=ChaosSettings.hosts)
    chaos.add_argument("--ranks-per-host", type=int, default=ChaosSettings.ranks_per_host)
    chaos.add_argument("--modes", default=",".join(MODES), help="comma-separated")
    chaos.add_argument("--epochs", type=int, default=ChaosSettings.epochs)
    chaos.add_argument("--gbit", type=float, default=1.0, help="link bandwidth in Gbit/s")
    chaos.add_argument(
        "--startup-share",
        type=float,
        default=0.0,
        help="the share of trials killed while the job starts, not while it trains (default 0)",
    )
    chaos.add_argument(
        "--workdir", default="outputs/chaos", help="the runs; a failed trial's folder is kept"
    )
    chaos.add_argument("--out", help="write every trial's record and the figures here (JSON)")


def _chaos(args) -> int:
    """``gnntrain netem chaos``: one line per trial, then the figures; exit 1 if any failed."""
    import json

    from gnntrain.launch.chaos import chaos_on_new_cluster
    from gnntrain.launch.chaos_schedule import MODES, ChaosSettings, figures, schedule

    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes or args.trials < 1:
        raise GnnTrainError(
            f"netem chaos: modes {', '.join(unknown) or '(none)'} / {args.trials} trials; use "
            f"--modes from {','.join(MODES)} and --trials >= 1"
        )
    settings = ChaosSettings(
        hosts=args.hosts,
        ranks_per_host=args.ranks_per_host,
        modes=modes,
        epochs=args.epochs,
        startup_share=args.startup_share,
    )
    records = chaos_on_new_cluster(
        args.name,
        Link(args.gbit, 0.0),
        schedule(args.seed, args.trials, settings),
        settings,
        Path(args.workdir),
        progress=lambda r: print(r.line(settings.end_limit_s), flush=True),
    )
    summary = figures(records, settings)
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "seed": args.seed,
                    "figures": summary,
                    "trials": [r.to_json(settings.end_limit_s) for r in records],
                },
                indent=1,
            )
        )
    return 0 if summary["passed"] == summary["trials"] else 1
