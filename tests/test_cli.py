"""The CLI end to end through a subprocess: output files, summary fields, help, the commands besides
run, and every error as one line on stderr. What the commands print (the plan tree, progress, the
tables, logging) is clean: test_cli_output.py."""

from __future__ import annotations

import json
import time

import pytest
from conftest import CORA, read_summary, requires_shared, run_cli

from gnntrain.metrics.recorder import SUMMARY_FIELDS


def test_help_starts_fast_and_lists_commands(tmp_path):
    start = time.perf_counter()
    proc = run_cli(["--help"], cwd=tmp_path)
    assert proc.returncode == 0
    for command in ("run", "plan", "partition", "report", "datasets"):
        assert command in proc.stdout
    assert time.perf_counter() - start < 10


def test_help_does_not_import_torch_or_dgl():
    import subprocess
    import sys

    code = (
        "import sys; import gnntrain.cli; "
        "sys.exit(int('torch' in sys.modules or 'dgl' in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_rank_paths_do_not_import_dgl():
    """A rank holding its shard as tensors trains with the torch kernel without DGL."""
    import subprocess
    import sys

    code = (
        "import sys; from gnntrain.modes import partition, single, fullgraph; "
        "from gnntrain.launch import launcher; sys.exit(int('dgl' in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_default_run_end_to_end(tmp_path):
    proc = run_cli(
        ["run", f"hydra.run.dir={tmp_path}/run", "train.epochs=5", f"cache_dir={tmp_path}/cache"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "run"
    for name in ("plan.yaml", "metrics.jsonl", "summary.json"):
        assert (run / name).exists(), name
    summary = read_summary(run)
    for key in SUMMARY_FIELDS:
        assert key in summary, key
    assert (
        summary["status"] == "completed"
        and summary["world_size"] == 2
        and len(summary["losses"]) == 5
    )
    assert set(summary["accuracy"]) == {"train", "val", "test"}
    assert summary["comm_bytes"]["per_epoch"] > 0 and summary["comm_bytes"]["max_rank_send"] > 0
    assert summary["peak_memory_bytes"]["host_max_rank"] > 0
    assert {"compute", "comm"} <= set(summary["time_breakdown_s"])
    assert summary["partition"]["num_parts"] == 2
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == list(range(5))
    assert all({"epoch", "loss", "epoch_time_s", "comm_bytes", "val_acc"} <= set(x) for x in lines)
    assert "completed" in proc.stdout and "accuracy" in proc.stdout  # final table


@requires_shared
def test_single_on_cora_through_cli(tmp_path):
    proc = run_cli(
        [
            "run",
            "mode=single",
            f"hydra.run.dir={tmp_path}/run",
            "train.epochs=3",
            f"cache_dir={tmp_path}/cache",
        ]
        + CORA,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = read_summary(tmp_path / "run")
    assert s["dataset"] == "cora" and s["world_size"] == 1 and s["comm_bytes"]["per_epoch"] == 0


def test_run_with_missing_dataset_fails_cleanly(tmp_path):
    proc = run_cli(
        [
            "run",
            "dataset=citeseer",
            f"data_dir={tmp_path}/nothing",
            f"hydra.run.dir={tmp_path}/run",
            f"cache_dir={tmp_path}/cache",
        ],
        cwd=tmp_path,
        env_extra={"GNNTRAIN_OFFLINE": "1"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "citeseer" in out and "Traceback" not in out
    s = read_summary(tmp_path / "run")
    assert s["status"] == "failed" and "citeseer" in s["error"]


def test_datasets_command_lists_all(tmp_path):
    proc = run_cli(["datasets"], cwd=tmp_path)
    assert proc.returncode == 0
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
        assert name in proc.stdout


def test_partition_command_reports_metrics_and_cache(tmp_path):
    args = [
        "partition",
        f"hydra.run.dir={tmp_path}/p",
        f"cache_dir={tmp_path}/cache",
        "hardware.ranks_per_node=4",
    ]
    first = run_cli(args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "total communication volume" in first.stdout and "built and cached" in first.stdout
    second = run_cli(args, cwd=tmp_path)
    assert "cache hit" in second.stdout


def test_unknown_command(tmp_path):
    proc = run_cli(["train"], cwd=tmp_path)
    assert proc.returncode == 2 and "unknown command" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(
    "args,needle",
    [
        (["plan", "train.epochs=0"], "train.epochs"),
        (["plan", "dataset.feat_dim=-5"], "dataset.feat_dim"),
        (["run", "dataset.feat_dim=-5"], "dataset.feat_dim"),
        (["plan", "dataset=rmat", "dataset.rmat_abcd=[0.5,0.5,0.5,0.1]"], "dataset.rmat_abcd"),
        (["run", "dataset.train_fraction=0.7", "dataset.val_fraction=0.5"], "fractions"),
        (["plan", "dataset.intra_ratio=1.5"], "dataset.intra_ratio"),
    ],
)
def test_errors_go_to_stderr_as_one_line(tmp_path, args, needle):
    proc = run_cli(
        args + [f"hydra.run.dir={tmp_path}", f"cache_dir={tmp_path}/cache"],
        cwd=tmp_path,
        timeout=120,
        env_extra={"COLUMNS": "80"},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error" not in proc.stdout.lower() and "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], proc.stderr


@pytest.mark.parametrize(
    "args,line",
    [
        (
            ["plan", "+train.epoch=5"],
            "error: invalid plan: train.epoch: is not an option (appended with +, it would be "
            "ignored). Fix: did you mean train.epochs? Set existing keys without '+'.",
        ),
        (
            ["plan", "+model._target_=my.Model"],
            "error: invalid plan: model._target_: is not an option (appended with +, "
            "it would be ignored). Fix: did you mean model.target? Set existing keys "
            "without '+'.",
        ),
        (
            ["plan", "dataset=dataset_schema"],
            "error: dataset=dataset_schema: dataset_schema is the schema of the dataset "
            "group, not a dataset. Use one of: citeseer, communities, cora, csbm, files, "
            "ogbn-arxiv, ogbn-products, pubmed, reddit, rmat.",
        ),
        (
            ["run", "mode=single_schema"],
            "error: mode=single_schema: single_schema is the schema of the mode group, not a "
            "mode. Use one of: auto, hongtu, hyscale, mop, partition, single, supergcn.",
        ),
        (  # a name that is no stored schema is Hydra's "Could not find", not "the schema"
            ["plan", "mode=nosuch_schema"],
            "error: mode=nosuch_schema: no such mode. Use one of: auto, hongtu, hyscale, mop, "
            "partition, single, supergcn.",
        ),
    ],
)
def test_appended_keys_and_schema_names_are_one_line(tmp_path, args, line):
    proc = run_cli(
        args + [f"hydra.run.dir={tmp_path}/r"], cwd=tmp_path, env_extra={"COLUMNS": "300"}
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert line in proc.stderr.splitlines(), proc.stderr


def _broken_profile(tmp_path) -> str:
    folder = tmp_path / "conf" / "hardware"
    folder.mkdir(parents=True)
    (folder / "broken.yaml").write_text(
        "defaults:\n  - hardware_schema\nname: broken\n  cores_per_node: [1, 2\n"
    )
    return f"hydra.searchpath=[file://{tmp_path / 'conf'}]"


@pytest.mark.parametrize(
    "case,args,line",
    [
        (
            "yaml",
            ["plan", "hardware=broken"],
            "error: {tmp}/conf/hardware/broken.yaml:4:17: YAML syntax error: mapping "
            "values are not allowed here. Fix that line of the file (indentation, an unclosed "
            "bracket or quote, a ':' "
            "inside an unquoted value).",
        ),
        (
            "run dir",
            ["run", "hydra.run.dir={tmp}/a-file/run"],
            "error: cannot create the run folder {tmp}/a-file/run: a "
            "folder on its path is a file. Set hydra.run.dir=DIR (hydra.sweep.dir=DIR with -m) to "
            "a writable folder, or "
            "run from one.",
        ),
        (
            "cache dir",
            ["plan", "cache_dir={tmp}/a-file"],
            "error: invalid plan: cache_dir: {tmp}/a-file is a file, not a "
            "folder. Fix: set cache_dir=DIR (or GNNTRAIN_CACHE_DIR) to a writable folder.",
        ),
        (
            "no key",
            ["plan", "train.epoch=5"],
            "error: train.epoch: not an option. Did you mean train.epochs?",
        ),
        (
            "no option",
            ["plan", "hardware=local_cpu"],
            "error: hardware=local_cpu: no such hardware. Did you mean "
            "hardware=local-cpu? Use one of: a100x4, cpu-cluster, gpu-1, gpu-cluster, local-cpu.",
        ),
        (
            "type",
            ["plan", "train.dtype=float16"],
            "error: train.dtype: Invalid value 'float16', expected one of [float32, float64]",
        ),
        (
            "grammar",
            ["plan", "train.lr=["],
            "error: train.lr=[: no viable alternative at input '[' See "
            "https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details",
        ),
        (
            "cluster here",
            ["run", "hardware=cpu-cluster", "dataset.num_nodes=300"],
            "error: hardware.nodes: the plan spans "
            "4 nodes (8 ranks, hardware=cpu-cluster), but no cluster launcher started this run, so "
            "all ranks would start on "
            "this machine. Fix: submit it with -m hydra/launcher=slurm, start it on every node "
            "with torchrun (README: "
            "torchrun), or run here with hardware=local-cpu.",
        ),
        (
            "degree",
            ["plan", "dataset.num_nodes=100", "dataset.avg_degree=100000"],
            "error: invalid plan: "
            "dataset.avg_degree: 100000.0 is more than a simple graph on num_nodes=100 nodes "
            "allows (at most 99: each node "
            "links to every other once). Fix: lower dataset.avg_degree or raise dataset.num_nodes",
        ),
    ],
)
def test_config_and_path_errors_are_one_line(tmp_path, case, args, line):
    """A YAML syntax error, an unusable run or cache folder, a key or group option that does not
    exist (each used to be a Hydra traceback or a multi-line listing), a cluster profile run without
    a cluster launcher (it started 8 local ranks), a degree no graph of that size has (the kernel
    probe tried to allocate 26 GB)."""
    (tmp_path / "a-file").write_text("")
    args = [a.format(tmp=tmp_path) for a in args]
    extra = [_broken_profile(tmp_path)] if case == "yaml" else []
    extra += (
        [] if any(a.startswith("hydra.run.dir") for a in args) else [f"hydra.run.dir={tmp_path}/r"]
    )
    extra += [] if any(a.startswith("cache_dir") for a in args) else [f"cache_dir={tmp_path}/cache"]
    proc = run_cli(args + extra, cwd=tmp_path, env_extra={"COLUMNS": "400"}, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert line.format(tmp=tmp_path) in proc.stderr.splitlines(), proc.stderr
    assert len([x for x in proc.stderr.splitlines() if x.strip()]) == 1, proc.stderr


def test_help_lists_no_schemas(tmp_path):
    proc = run_cli(["run", "--help"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    groups = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith(("dataset: ", "mode: ", "hardware: "))
    ]
    assert len(groups) == 3 and "_schema" not in "".join(groups), groups
    assert "mode: auto, hongtu, hyscale, mop, partition, single, supergcn" in groups


def test_one_command_table_gives_the_usage_the_dispatch_and_the_unknown_command_line(
    capsys, monkeypatch
):
    import gnntrain.cli as cli

    # main() sets up logging for the process (warnings routed once); this test leaves it as it was
    monkeypatch.setattr("gnntrain.logs.setup_logging", lambda *args, **kwargs: None)
    text = cli.usage()
    assert all(f"\n  {c.name} {c.synopsis.splitlines()[0]}" in text for c in cli.COMMANDS)
    assert cli.main(["rnu"]) == 2
    err = capsys.readouterr().err
    assert (
        "unknown command 'rnu'. Did you mean 'run'?" in err
        and ", ".join(c.name for c in cli.COMMANDS) in err
    )
    called = []  # a command is dispatched through its table entry
    monkeypatch.setitem(
        cli.BY_NAME, "report", cli.Command("report", "", "", lambda args: called.append(args) or 7)
    )
    assert cli.main(["report", "a", "b"]) == 7 and called == [["a", "b"]]


def test_a_hydra_command_in_process_leaves_argv_and_environment_as_they_were(
    tmp_path, monkeypatch, capsys
):
    """``gnntrain.cli.main`` runs its Hydra app from the argument list: sys.argv and os.environ
    are the same after a command that succeeds, one whose override fails, and a sweep with a
    failing job (the sweep's axes come from the arguments, not sys.argv)."""
    import logging
    import os
    import sys

    import gnntrain.cli as cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("gnntrain.logs.setup_logging", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "argv", ["pytest-probe", "--not-a-gnntrain-argument"])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    common = ["mode=single", "dataset.num_nodes=200", f"cache_dir={tmp_path}/cache"]
    runs = [
        (
            ["plan", "model.hidden=abc"],
            1,
            "error: model.hidden: Value 'abc' of type 'str' could not be converted to Integer",
        ),
        (["plan", *common, f"hydra.run.dir={tmp_path}/run"], 0, None),
        (
            ["plan", "-m", *common, "dataset.avg_degree=2,300", f"hydra.sweep.dir={tmp_path}/s"],
            1,
            "error: sweep: 1 job(s) did not complete: dataset.avg_degree=300 (invalid plan)",
        ),
    ]
    try:
        for args, code, line in runs:
            argv, environ = list(sys.argv), dict(os.environ)
            assert cli.main(list(args)) == code, capsys.readouterr()
            err = capsys.readouterr().err
            assert line is None or line in err.splitlines(), err
            assert sys.argv == argv, args
            assert dict(os.environ) == environ, (
                args,
                set(os.environ.items()) ^ set(environ.items()),
            )
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)


def test_a_command_composes_its_config_once_unless_hydra_mode_is_named(tmp_path, monkeypatch):
    """Hydra composes the whole config once to read ``hydra.mode`` before it composes it again to
    run; gnntrain's configs never set it, so a plain command composes once (a fifth of a plan's
    time), while ``hydra.mode=MULTIRUN`` still sweeps as Hydra's own command line does."""
    import contextlib
    import io

    from hydra._internal.hydra import Hydra

    import gnntrain.cli as cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("gnntrain.logs.setup_logging", lambda *args, **kwargs: None)
    composed = []
    compose = Hydra.compose_config

    def counted(self, *args, **kwargs):
        composed.append(kwargs.get("run_mode"))
        return compose(self, *args, **kwargs)

    monkeypatch.setattr(Hydra, "compose_config", counted)
    common = ["plan", "mode=single", "kernel=torch", "dataset.num_nodes=200"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main([*common, f"hydra.run.dir={tmp_path}/run"]) == 0
    assert len(composed) == 1 and out.getvalue().count("run plan") == 1
    composed.clear()
    sweep = ["hydra.mode=MULTIRUN", "model.hidden=16,32", f"hydra.sweep.dir={tmp_path}/sweep"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main([*common, *sweep]) == 0
    assert out.getvalue().count("run plan") == 2
