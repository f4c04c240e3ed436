"""Hydra multirun sweeps (own run dir, own port, own summary; a failed job
does not stop the others) and `gnntrain report` (table, report.md, plots)."""

from __future__ import annotations

import json

from conftest import run_cli


def test_sweep_runs_every_job_and_survives_a_failure(tmp_path):
    sweep = tmp_path / "sweep"
    # dataset.num_nodes=3 with 4 ranks is an impossible plan for partition, fine for single
    proc = run_cli(
        [
            "run",
            "-m",
            "mode=single,partition",
            "dataset.num_nodes=3,300",
            "dataset.avg_degree=2",
            "train.epochs=2",
            "train.progress=false",
            f"hydra.sweep.dir={sweep}",
            f"cache_dir={tmp_path}/cache",
            "hardware.ranks_per_node=4",
        ],
        cwd=tmp_path,
        timeout=400,
    )
    # the sweep ran every job, then says which did not complete and fails (a CI job must see it)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    closing = [line for line in proc.stderr.splitlines() if "sweep:" in line]
    assert closing == [
        "error: sweep: 1 job(s) did not complete: mode=partition dataset.num_nodes=3 (invalid plan)"
    ]
    summaries = {p.parent.name: json.loads(p.read_text()) for p in sweep.rglob("summary.json")}
    assert len(summaries) == 4, sorted(summaries)
    failed = [name for name, s in summaries.items() if s["status"] == "failed"]
    assert failed == ["2-partition-csbm"] and "world size" in summaries["2-partition-csbm"]["error"]
    assert all(s["status"] == "completed" for name, s in summaries.items() if name not in failed)
    # every job has its own run directory with its own plan
    assert all(
        (sweep / name / "plan.yaml").exists() for name, s in summaries.items() if name not in failed
    )


def test_unknown_mode_in_a_sweep_fails_at_composition(tmp_path):
    proc = run_cli(
        ["run", "-m", "mode=single,nosuchmode", f"hydra.sweep.dir={tmp_path}/s"], cwd=tmp_path
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "nosuchmode" in out and "Traceback" not in out


def test_report_gathers_runs_into_table_markdown_and_plots(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(
        [
            "run",
            "-m",
            "mode=single,partition",
            "train.epochs=3",
            "train.progress=false",
            f"hydra.sweep.dir={sweep}",
            f"cache_dir={tmp_path}/cache",
            "kernel=torch",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rep = run_cli(["report", str(sweep)], cwd=tmp_path)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    md = (sweep / "report.md").read_text()
    # the markdown table, read by column: run directory names hold the modes too, so a bare
    # "partition" in md would pass even with a wrong mode column
    table = [line for line in md.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table]
    header, rule, rows = cells[0], cells[1], cells[2:]
    assert "mode" in header and "status" in header and all(set(c) <= {"-"} for c in rule), table[:2]
    assert all(len(r) == len(header) for r in rows), table
    runs = [dict(zip(header, r)) for r in rows]
    assert len(runs) == 2, table
    assert {r["mode"]: r["world size"] for r in runs} == {"single": "1", "partition": "2"}, table
    assert all(r["status"] == "completed" for r in runs), table
    for name in ("report_loss.png", "report_time.png", "report_comm.png"):
        png = sweep / name
        assert (
            png.exists()
            and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            and png.stat().st_size > 10_000
        )
        assert f"]({name})" in md
    assert "completed" in rep.stdout


def test_report_rejects_missing_directory(tmp_path):
    proc = run_cli(["report", str(tmp_path / "nope")], cwd=tmp_path)
    assert proc.returncode == 2 and "not a directory" in proc.stderr and proc.stdout == ""
