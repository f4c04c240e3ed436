"""The emulated cluster network (gnntrain/launch/netem.py): hosts as network namespaces on one
bridge, each link shaped by tc, one torchrun agent per host.

Needs root, iproute2 and tc (skipped with the reason otherwise).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import SHARED_DGL, assert_exact, compose, requires_shared

from gnntrain.errors import GnnTrainError
from gnntrain.launch import netem, netem_cli, netem_jobs

NAME = f"gtn{os.getpid() % 100000}"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# Sends BYTES from the client's namespace to the server's and prints the server's measured Mbit/s.
THROUGHPUT = textwrap.dedent("""
    import socket, sys, time
    BYTES = 12_500_000
    if sys.argv[1] == "server":
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((sys.argv[2], 5599)); s.listen(1); print("ready", flush=True)
        c, _ = s.accept(); got = len(c.recv(1 << 20)); start = time.perf_counter()
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            got += len(b)
        print(got * 8 / 1e6 / (time.perf_counter() - start), flush=True)
    else:
        c = socket.create_connection((sys.argv[2], 5599)); c.sendall(b"x" * BYTES); c.close()
""")


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(netem, "STATE_DIR", tmp_path / "state")
    return tmp_path / "state"


@pytest.fixture
def cluster(state_dir):
    reason = netem.unavailable_reason()
    if reason:
        pytest.skip(reason)
    try:
        made = netem.create(NAME, 2, netem.Link(gbit_s=0.1))
    except GnnTrainError as exc:
        pytest.skip(f"cannot make network namespaces here: {exc}")
    yield made
    netem.destroy(NAME)


def _mbit_s(cluster, script: Path) -> float:
    server = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            cluster.namespace(1),
            sys.executable,
            str(script),
            "server",
            cluster.address(1),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == "ready"
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                cluster.namespace(0),
                sys.executable,
                str(script),
                "client",
                cluster.address(1),
            ],
            check=True,
            timeout=60,
        )
        return float(server.stdout.readline())
    finally:
        server.wait(timeout=30)


def test_every_link_is_shaped_to_its_bandwidth(cluster, tmp_path):
    """100 Mbit/s links carry a TCP stream at (a little under) 100 Mbit/s, not at loopback speed,
    and both directions of each link have the token bucket."""
    script = tmp_path / "throughput.py"
    script.write_text(THROUGHPUT)
    rate = _mbit_s(cluster, script)
    assert 60 < rate < 115, f"{rate:.0f} Mbit/s across a 100 Mbit/s link"
    for ns, dev in [(cluster.namespace(0), netem.INTERFACE), (cluster.switch, "p1")]:
        shown = subprocess.run(
            ["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True
        ).stdout
        assert "tbf" in shown and "rate 100Mbit" in shown, shown


def test_down_deletes_every_namespace_it_made(cluster, state_dir):
    def ours():
        return {ns for ns in netem._namespaces() if ns.startswith(NAME + "-")}

    assert ours() == {f"{NAME}-sw", f"{NAME}-h0", f"{NAME}-h1"}
    assert netem.load(NAME) == cluster
    with pytest.raises(GnnTrainError, match="exists already"):
        netem.create(NAME, 2, netem.Link(gbit_s=1))
    assert sorted(netem.destroy(NAME)) == sorted([f"{NAME}-sw", f"{NAME}-h0", f"{NAME}-h1"])
    assert ours() == set() and not (state_dir / f"{NAME}.json").exists()
    with pytest.raises(GnnTrainError, match=f"netem up --name {NAME}"):
        netem.load(NAME)


@requires_shared
def test_partition_across_emulated_hosts_equals_single(cluster, tmp_path):
    """`gnntrain netem run`'s path: one torchrun agent per host, every byte over the shaped links;
    the float64 losses are mode=single's and the summary names the emulated network."""
    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    overrides = [
        "dataset=cora",
        f"data_dir={SHARED_DGL}",
        "train.dtype=float64",
        "model.dropout=0",
        "train.epochs=3",
        "kernel=torch",
        "train.progress=false",
        "comm_timeout_s=60",
    ]
    result = netem_jobs.run_job(
        cluster,
        overrides + ["mode=partition"],
        tmp_path / "runs",
        port=29620,
        timeout_s=240,
        env={"GNNTRAIN_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.ok, result.outputs
    summary = result.summary()
    assert summary["world_size"] == 2 and summary["rank_hosts"] == [
        cluster.address(0),
        cluster.address(1),
    ]
    assert summary["network"] == f"emulated '{NAME}': 2 hosts, 100 Mbit/s per link"
    single = run_training(build_plan(compose(overrides + ["mode=single"])), tmp_path / "single")
    assert_exact(summary["losses"], single["losses"])


def test_profiles_name_their_links():
    assert netem_cli._profile_link("cpu-cluster", CONFIGS) == netem.Link(10.0, 50.0)
    assert netem_cli._profile_link("gpu-cluster", CONFIGS) == netem.Link(25.0, 10.0)
    with pytest.raises(GnnTrainError, match="names no network link.*--gbit"):
        netem_cli._profile_link("local-cpu", CONFIGS)
    with pytest.raises(GnnTrainError, match="use one of a100x4, cpu-cluster"):
        netem_cli._profile_link("nope", CONFIGS)


@pytest.mark.parametrize(
    "args, message",
    [
        (["up", "--hosts", "2"], "give exactly one of --gbit and --profile"),
        (
            ["show", "--name", "no-such-cluster"],
            "no emulated network 'no-such-cluster'. Fix: gnntrain netem up",
        ),
    ],
)
def test_cli_errors_name_the_fix(args, message, state_dir, capsys):
    from gnntrain.cli import main

    assert main(["netem", *args]) == 2
    assert message in capsys.readouterr().err


def test_dilation_is_cluster_cores_over_usable_cores():
    assert netem.dilation_for(4, 1, 2) == pytest.approx(4 / (2 * netem.CPU_HEADROOM))
    assert netem.dilation_for(8, 2, 4) == pytest.approx(16 / (4 * netem.CPU_HEADROOM))
    assert netem.dilation_for(2, 1, 16) == 1.0  # room enough: capped, not dilated


def test_an_agent_joins_its_hosts_cgroups_before_it_runs(tmp_path, monkeypatch):
    """start_job's agents join the host's cpu group and the extra groups given per host (fake
    cgroup folders: their cgroup.procs get the agent's pid, which then runs the command)."""
    groups = [tmp_path / "memory-h0", tmp_path / "other-h0"]
    for group in groups:
        group.mkdir()
    wrapped = netem_jobs.joining(groups, [sys.executable, "-c", "import os; print(os.getpid())"])
    pid = subprocess.run(wrapped, capture_output=True, text=True, check=True).stdout.strip()
    assert [(g / "cgroup.procs").read_text().strip() for g in groups] == [pid, pid]
    assert netem_jobs.joining([], ["true"]) == ["true"]
    started = []
    monkeypatch.setattr(netem_jobs.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    monkeypatch.setattr(netem_jobs, "_drain", lambda proc: None)
    cpu = tmp_path / "cpu"
    cluster = netem.EmulatedCluster(
        "c", 2, netem.Link(1.0), 1, False, cores_per_host=1, cgroup_dir=str(cpu)
    )
    memory = [[tmp_path / "m0"], [tmp_path / "m1"]]
    netem_jobs.start_job(cluster, ["mode=partition"], tmp_path / "runs", host_cgroups=memory)
    for i, cmd in enumerate(started):
        assert cmd[:3] == ["sh", "-c", cmd[2]] and cmd[3] == "2"
        assert cmd[4:6] == [
            str(cpu / f"c-h{i}" / "cgroup.procs"),
            str(memory[i][0] / "cgroup.procs"),
        ]
        assert cmd[6:10] == ["ip", "netns", "exec", f"c-h{i}"]


@pytest.mark.parametrize("v2", [False, True])
def test_cpu_caps_are_written_for_either_cgroup_version(tmp_path, v2):
    """A fake cgroup tree of each layout: the controller is found and the cap lands in its files."""
    if v2:
        (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        (tmp_path / "cgroup.subtree_control").write_text("")
    else:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    directory, is_v2 = netem._cpu_controller(tmp_path)
    assert is_v2 == v2 and directory == (tmp_path if v2 else tmp_path / "cpu")
    group = directory / "c-h0"
    netem._cap_cpu(group, is_v2, 0.45)
    quota, period = round(0.45 * netem.CPU_PERIOD_US), netem.CPU_PERIOD_US
    if v2:
        assert (group / "cpu.max").read_text() == f"{quota} {period}"
        assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    else:
        assert (group / "cpu.cfs_quota_us").read_text() == str(quota)
        assert (group / "cpu.cfs_period_us").read_text() == str(period)
    assert netem._cpu_controller(tmp_path / "nothing-here") is None


BUSY = (
    "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 1.5: pass\n"
    "print(time.process_time() / (time.perf_counter() - t))"
)


def test_a_dilated_cluster_caps_each_host_and_slows_its_links(state_dir):
    """4 hosts with a core each on a smaller machine: every link shaped to bandwidth / dilation,
    each host's processes held to 1 / dilation of a core, and down removes the cpu groups."""
    reason = netem.unavailable_reason()
    if reason:
        pytest.skip(reason)
    cores = len(os.sched_getaffinity(0))
    if cores * netem.CPU_HEADROOM >= 4:
        pytest.skip("this machine has a core per host: nothing to dilate")
    try:
        cluster = netem.create(NAME, 4, netem.Link(gbit_s=0.1), cores_per_host=1)
    except GnnTrainError as exc:
        pytest.skip(f"cannot make network namespaces or cpu groups here: {exc}")
    try:
        dilation = netem.dilation_for(4, 1, cores)
        assert cluster.dilation == pytest.approx(dilation) and "time-dilated" in cluster.describe()
        assert netem.load(NAME) == cluster
        shown = subprocess.run(
            ["tc", "-n", cluster.namespace(2), "qdisc", "show", "dev", netem.INTERFACE],
            capture_output=True,
            text=True,
        ).stdout
        assert f"rate {100 / dilation:.3g}Mbit".replace(".", "") in shown.replace(".", ""), shown
        procs = cluster.cgroup(1) / "cgroup.procs"
        share = subprocess.run(
            [
                "sh",
                "-c",
                'echo $$ > "$0" && exec "$@"',
                str(procs),
                "ip",
                "netns",
                "exec",
                cluster.namespace(1),
                sys.executable,
                "-c",
                BUSY,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert float(share) < 1.15 / dilation, f"a capped host used {float(share):.2f} of a core"
    finally:
        netem.destroy(NAME)
    assert not any(cluster.cgroup(i).exists() for i in range(4))
