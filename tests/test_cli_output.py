"""Clean output (issue #18): the plan tree, progress lines, the summary table, ``datasets`` and
``report`` at the terminal's width, and logging print plain text with units: no Python repr, no
debug line, no Hydra-formatted log line."""

from __future__ import annotations

import io
import json
import re

import pytest
from conftest import compose, run_cli

from gnntrain.modes import MODE_REGISTRY

MODES = sorted(MODE_REGISTRY)  # every registered mode, a new one included


def _render(fn, *args, width: int = 80, **kwargs) -> str:
    """What ``fn`` prints on a terminal ``width`` columns wide."""
    from rich.console import Console

    out = Console(file=io.StringIO(), width=width, color_system=None)
    fn(*args, out=out, **kwargs)
    return out.file.getvalue()


def assert_no_python_repr(text: str, lists: bool = True) -> None:
    """What a Python object's repr leaves behind in terminal output, never there."""
    assert "None" not in text, text
    assert "see formula" not in text, text
    assert "{'" not in text and not re.search(r"\{\d+: ", text), text  # dict reprs
    assert not re.search(r"\(\d+(\.\d+)?, ", text), text  # tuple reprs such as (16, 7)
    assert not re.search(r"\bTrue\b|\bFalse\b", text), text
    assert not re.search(r"\bnan\b", text), text
    if lists:
        assert not re.search(r"\[\d+(\.\d+)?, ", text), text  # list reprs such as [25, 10]


def _plan(mode: str, cache_dir):
    from gnntrain.plan import build_plan

    cfg = compose([f"mode={mode}", f"cache_dir={cache_dir}"])
    return cfg, build_plan(cfg)


@pytest.mark.parametrize("mode", MODES)
def test_plan_tree_has_no_python_reprs(mode, cache_dir):
    """Every mode's details, the estimates and the graph figures print as plain text with units."""
    import dataclasses

    from gnntrain.cli.tasks import _load_and_partition
    from gnntrain.metrics.report import print_graph_report, print_plan
    from gnntrain.modes import MODE_REGISTRY, ModePlanner
    from gnntrain.plan import build_mode

    cfg, plan = _plan(mode, cache_dir)
    text = _render(print_plan, plan) + _render(print_plan, plan, brief=True)
    # a mode's formula is its own notation (it may write a list as [8, 6]); everything else holds no
    # list repr
    assert_no_python_repr(text, lists=False)
    if plan.comm_per_epoch is not None:
        assert "formula" in text
        plan = dataclasses.replace(plan, comm_per_epoch=dict(plan.comm_per_epoch, formula=""))
    assert_no_python_repr(_render(print_plan, plan))
    assert "MiB" in text or "KiB" in text
    # the partitioner only where the graph is split (one part: none ran, whatever the config names)
    parts = (
        "the whole graph, unpartitioned"
        if plan.num_parts == 1
        else f"{plan.num_parts} parts ({plan.partitioner})"
    )
    assert parts in text, text
    if MODE_REGISTRY[mode].planner.graph_report is not ModePlanner.graph_report:
        data, part, _ = _load_and_partition(cfg, plan)
        report = build_mode(cfg).graph_report(data, part, plan)
        assert_no_python_repr(_render(print_graph_report, plan, report))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("width", [60, 80, 120])
def test_plan_tree_follows_the_width_and_breaks_between_phrases(mode, width, cache_dir):
    from rich.cells import cell_len

    from gnntrain.metrics.report import print_plan

    _, plan = _plan(mode, cache_dir)
    lines = _render(print_plan, plan, width=width).splitlines()
    assert all(cell_len(line.rstrip()) <= width for line in lines)
    text = "\n".join(lines)
    assert f"{plan.threads_per_rank} thread" in text and "per rank" in text
    # launch facts stay whole phrases on one line each
    assert re.search(rf"backend {plan.backend}, device [^\n]*?, \d+ threads? per rank\n", text), (
        text
    )
    for line, nxt in zip(lines, lines[1:]):
        continued = re.match(r"^[│ ]*[^│ ├└]", nxt)  # not a new node: the line above wrapped
        if continued:  # ... and never between a number and the word it counts ("50000 / nodes")
            assert not (
                re.search(r"(^|\s)\d+(\.\d+)?\s*$", line) and re.match(r"^[│ ]*[A-Za-z]", nxt)
            ), f"{line!r} / {nxt!r}"


def test_plan_cli_output_is_clean(tmp_path):
    proc = run_cli(
        ["plan", f"hydra.run.dir={tmp_path}", f"cache_dir={tmp_path}/cache"],
        cwd=tmp_path,
        timeout=120,
        env_extra={"COLUMNS": "80"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_no_python_repr(proc.stdout, lists=False)
    assert "widths communicated: 16, 7" in proc.stdout  # a list in the mode's details, joined
    # the graph is partitioned for the report, so the plan states the bytes (the total the report
    # adds up)
    assert "depends on the graph" not in proc.stdout
    total = int(re.search(r"total: (\d+)", proc.stdout).group(1))
    from gnntrain.sizing import format_bytes

    assert f"estimated communication per epoch: {format_bytes(total)}" in proc.stdout


def test_run_output_is_clean(tmp_path):
    """`gnntrain run` (the default job): the brief plan, progress, the table; no debug line, no
    placeholder, no repr, no Hydra-formatted log line; the partition store's build and reuse logged
    on stderr."""
    args = ["run", "train.epochs=3", f"cache_dir={tmp_path}/cache"]
    first = run_cli(
        args + [f"hydra.run.dir={tmp_path}/a"], cwd=tmp_path, env_extra={"COLUMNS": "80"}
    )
    long_dir = tmp_path / ("a-run-folder-whose-name-is-longer-than-a-terminal-is-wide-" * 2)
    second = run_cli(
        args + [f"hydra.run.dir={long_dir}"], cwd=tmp_path, env_extra={"COLUMNS": "80"}
    )
    for proc in (first, second):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = proc.stdout + proc.stderr
        assert "feature widths communicated" not in out
        assert_no_python_repr(out)
        assert "][INFO]" not in out and "Traceback" not in out
        assert "accuracy train/val/test" in proc.stdout
        # piped: plain progress lines, not a bar drawn at the end
        assert "epoch 3/3  loss" in proc.stdout
    # the second run reuses the partition store the first one built: said once, on stderr
    assert "partition store built" in first.stderr and "partition store hit" in second.stderr
    assert "partition store" not in second.stdout
    # a path is never wrapped at the terminal's width: one line to copy
    assert f"outputs: {tmp_path}/a\n" in first.stdout
    assert f"outputs: {long_dir}\n" in second.stdout


def test_progress_without_a_terminal_is_a_line_every_few_seconds(tmp_path):
    """Piped to a log file: a plain line at most every line_every_s (5 s) of wall time, never more
    than 10 s apart while epochs finish, with the running median epoch time and an ETA; the last
    epoch always."""
    from types import SimpleNamespace

    from rich.console import Console

    from gnntrain.metrics.recorder import RunRecorder

    out = Console(file=io.StringIO(), width=200, force_terminal=False)
    recorder = RunRecorder(tmp_path, SimpleNamespace(mode="partition", dataset="csbm"), console=out)
    now = [0.0]
    recorder._clock = lambda: now[0]
    recorder.start(40)
    for epoch in range(40):
        now[0] += 3.0 if epoch != 7 else 30.0  # one slow epoch: the median stays put
        recorder.epoch(
            {"epoch": epoch, "loss": 1.0 / (epoch + 1), "epoch_time_s": 3.0 if epoch != 7 else 30.0}
        )
    lines = [line for line in out.file.getvalue().splitlines() if line.startswith("epoch ")]
    assert lines[0].startswith("epoch 1/40") and lines[-1].startswith("epoch 40/40")
    assert 10 <= len(lines) <= 21  # every second 3 s epoch: 6 s apart, never more than 10 s
    assert all("3000.0 ms/epoch (median)" in line for line in lines[1:])
    assert "ETA 0m00s" in lines[-1] and "ETA 1m57s" in lines[0]


def test_summary_table_shows_a_dash_for_missing_accuracy():
    from rich.console import Console

    from gnntrain.metrics.recorder import summary_table

    base = {
        "status": "completed",
        "mode": "hyscale",
        "dataset": "csbm",
        "model": "gcn",
        "world_size": 2,
        "dtype": "float32",
        "losses": [1.0],
        "epoch_time_median_s": 0.01,
    }
    for accuracy, expect in (
        ({"train": 0.5, "val": float("nan"), "test": 0.25}, "0.5000 / — / 0.2500"),
        ({"test": 0.25}, "— / — / 0.2500"),
        ({}, None),
        (None, None),
    ):
        out = Console(file=io.StringIO(), width=80)
        out.print(summary_table(dict(base, accuracy=accuracy)))
        text = out.file.getvalue()
        assert "nan" not in text and "None" not in text
        if expect is None:
            assert "accuracy" not in text  # no epoch evaluated: no row of dashes
        else:
            assert expect in text


def test_datasets_and_report_follow_the_terminal_width(tmp_path):
    from rich.cells import cell_len

    for columns in (80, 200):
        proc = run_cli(["datasets"], cwd=tmp_path, env_extra={"COLUMNS": str(columns)})
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert max(cell_len(line.rstrip()) for line in lines) <= columns
        for name in (
            "csbm",
            "rmat",
            "cora",
            "citeseer",
            "pubmed",
            "reddit",
            "ogbn-arxiv",
            "ogbn-products",
        ):
            assert re.search(rf"│ {re.escape(name)}\s", proc.stdout), name  # never folded or cut
        assert "…" not in proc.stdout
    assert "where it comes from" in proc.stdout  # wide enough: the one-row-per-column table

    run = tmp_path / "runs" / "15-37-02-partition-csbm"  # a run folder's name as Hydra makes it
    run.mkdir(parents=True)
    (run / "summary.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "mode": "partition",
                "dataset": "csbm",
                "world_size": 2,
                "losses": [1.0],
                "accuracy": {"test": float("nan")},
                "epoch_time_median_s": 0.01,
                "comm_bytes": {"per_epoch": 2048},
                "peak_memory_bytes": {"host_max_rank": 2**29},
            }
        )
    )
    for columns in (80, 60, 200):
        proc = run_cli(
            ["report", str(tmp_path / "runs")], cwd=tmp_path, env_extra={"COLUMNS": str(columns)}
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert max(cell_len(line.rstrip()) for line in proc.stdout.splitlines()) <= columns
        assert "…" not in proc.stdout and "nan" not in proc.stdout and "2.00 KiB" in proc.stdout
        # the run's name and what it was are read on one line, never folded over several
        if columns < 200:
            assert re.search(
                r"^ ?1  15-37-02-partition-csbm(: |\n   )partition on csbm, 2 ranks, completed$",
                proc.stdout,
                re.M,
            ), proc.stdout


def test_logging_setup_rank_levels_warnings_and_hydra_handler(capsys):
    import logging
    import sys
    import warnings

    from gnntrain.logs import HANDLER_NAME, process_rank, setup_logging

    root = logging.getLogger()
    saved, saved_format = (list(root.handlers), root.level), warnings.formatwarning
    hydra_console = logging.StreamHandler(sys.stdout)  # what Hydra's job logging installs
    root.addHandler(hydra_console)
    try:
        handler = setup_logging(rank=1)
        assert hydra_console not in root.handlers
        assert [h.get_name() for h in root.handlers].count(HANDLER_NAME) == 1
        assert handler.level == logging.WARNING  # other ranks: warnings and errors only
        logging.getLogger("gnntrain.test").info("an info line from rank 1")
        handler = setup_logging(rank=0)
        assert [h.get_name() for h in root.handlers].count(HANDLER_NAME) == 1  # idempotent
        logging.getLogger("gnntrain.test").info("an info line from rank 0")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            # setup_logging routed warnings through the handler
            warnings.warn("a routed warning", stacklevel=2)
        captured = capsys.readouterr()
        assert "an info line from rank 0" in captured.err and "rank 1" not in captured.err
        assert "WARNING" in captured.err and "a routed warning" in captured.err
        assert captured.out == ""
    finally:
        logging.captureWarnings(False)
        warnings.formatwarning = saved_format
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
    assert process_rank({"RANK": "3", "WORLD_SIZE": "4"}) == 3
    assert process_rank({"SLURM_PROCID": "2", "SLURM_NTASKS": "4"}) == 2
    assert process_rank({"RANK": "0", "WORLD_SIZE": "1"}) == 0 and process_rank({}) == 0
