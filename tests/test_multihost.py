"""Two hosts for real: two network namespaces joined by a veth pair, each with an address of the
test's own, one ``torchrun --nnodes=2`` agent in each (docs/design.md#launcher).

Needs root and ``ip netns`` (skipped with the reason otherwise). Every byte between the ranks
crosses the veth pair; nothing else is reached.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
from conftest import SHARED_DGL, assert_exact, compose, requires_shared

SUFFIX = f"{os.getpid() % 100000}"
# the test's own addresses, inside its own namespaces
HOSTS = {"h1": "10.77.0.1", "h2": "10.77.0.2"}
BIN = Path(sys.executable).parent


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture(scope="module")
def two_hosts():
    """{host name: (namespace, interface, address)}; torn down afterwards."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("two-host tests need root and iproute2 (ip netns)")
    names = {h: (f"gt{SUFFIX}{h}", f"gtv{SUFFIX}{h[-1]}", addr) for h, addr in HOSTS.items()}
    made = []
    try:
        for ns, _, _ in names.values():
            if _ip("netns", "add", ns).returncode != 0:
                pytest.skip(f"cannot create network namespace {ns} here (ip netns add failed)")
            made.append(ns)
        (ns1, if1, a1), (ns2, if2, a2) = names.values()
        steps = [
            ("link", "add", if1, "type", "veth", "peer", "name", if2),
            ("link", "set", if1, "netns", ns1),
            ("link", "set", if2, "netns", ns2),
            ("-n", ns1, "addr", "add", f"{a1}/24", "dev", if1),
            ("-n", ns2, "addr", "add", f"{a2}/24", "dev", if2),
            ("-n", ns1, "link", "set", if1, "up"),
            ("-n", ns2, "link", "set", if2, "up"),
            ("-n", ns1, "link", "set", "lo", "up"),
            ("-n", ns2, "link", "set", "lo", "up"),
        ]
        for step in steps:
            proc = _ip(*step)
            if proc.returncode != 0:
                pytest.skip(
                    f"cannot build the veth pair (ip {' '.join(step)}: {proc.stderr.strip()})"
                )
        yield names
    finally:
        for ns in made:
            _ip("netns", "del", ns)


def _agents(names, node_args: List[str], tmp_path: Path, port: int) -> Dict[str, subprocess.Popen]:
    """Start one torchrun agent per host; each host gets its own run and cache folders."""
    procs = {}
    master = HOSTS["h1"]
    for node_rank, (host, (ns, iface, _)) in enumerate(names.items()):
        env = dict(
            os.environ,
            GLOO_SOCKET_IFNAME=iface,
            GNNTRAIN_CACHE_DIR=str(tmp_path / f"cache-{host}"),
            OMP_NUM_THREADS="1",
        )
        cmd = [
            "ip",
            "netns",
            "exec",
            ns,
            str(BIN / "torchrun"),
            "--nnodes=2",
            "--nproc-per-node=1",
            f"--node-rank={node_rank}",
            f"--master-addr={master}",
            f"--master-port={port}",
            "--no-python",
            str(BIN / "gnntrain"),
            "run",
            *node_args,
            f"hydra.run.dir={tmp_path / f'run-{host}'}",
        ]
        procs[host] = subprocess.Popen(
            cmd,
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    return procs


CORA_F64 = [
    "dataset=cora",
    f"data_dir={SHARED_DGL}",
    "train.dtype=float64",
    "model.dropout=0",
    "train.epochs=3",
    "train.seed=3",
    "kernel=torch",
    "train.progress=false",
]


@requires_shared
@pytest.mark.parametrize("mode", ["partition", "mop"])
def test_two_host_torchrun_equals_single(two_hosts, tmp_path, mode):
    """partition and MoP across two hosts (one rank each, gloo over the veth pair) give
    mode=single's float64 losses to 1e-9."""
    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    overrides = CORA_F64 + [
        f"mode={mode}",
        "hardware.nodes=2",
        "hardware.ranks_per_node=1",
        "comm_timeout_s=60",
    ]
    procs = _agents(two_hosts, overrides, tmp_path, 29533 + (mode == "mop"))
    outs = {host: proc.communicate(timeout=240) for host, proc in procs.items()}
    for host, proc in procs.items():
        assert proc.returncode == 0, f"{host}: {outs[host][1][-3000:]}"
    summary = json.loads((tmp_path / "run-h1" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 2
    single = run_training(build_plan(compose(CORA_F64 + ["mode=single"])), tmp_path / "single")
    assert_exact(summary["losses"], single["losses"])


@pytest.mark.parametrize("victim", ["h2", "h1"], ids=["worker-host", "master-host"])
def test_killing_a_host_ends_the_job_naming_the_ranks_lost(two_hosts, tmp_path, victim):
    """Every process of one host is killed mid-training (host 1 also holds rank 0 and the rendezvous
    store): the other host's agent exits non-zero within 60 s, naming the rank lost and its host."""
    overrides = [
        "dataset=csbm",
        "dataset.num_nodes=2000",
        "mode=partition",
        "hardware.nodes=2",
        "hardware.ranks_per_node=1",
        "train.epochs=100000",
        "train.eval_every=1000",
        "kernel=torch",
        "train.progress=false",
        "comm_timeout_s=120",
    ]
    procs = _agents(two_hosts, overrides, tmp_path, 29540 + (victim == "h1"))
    metrics = tmp_path / "run-h1" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while not (metrics.exists() and metrics.stat().st_size > 0):
        assert time.monotonic() < deadline, "training did not start"
        assert all(p.poll() is None for p in procs.values()), [
            p.stderr.read()[-2000:] for p in procs.values()
        ]
        time.sleep(0.5)
    survivor = "h1" if victim == "h2" else "h2"
    killed = time.monotonic()
    for pid in _ip("netns", "pids", two_hosts[victim][0]).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        _, err = procs[survivor].communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(procs[survivor].pid, signal.SIGKILL)
        pytest.fail(f"{survivor} still running 60 s after {victim} was killed")
    elapsed = time.monotonic() - killed
    procs[victim].wait(timeout=10)
    assert procs[survivor].returncode != 0
    assert elapsed < 60
    lost_rank = 1 if victim == "h2" else 0
    assert f"lost rank {lost_rank} on host {HOSTS[victim]}" in err, err[-3000:]
    if victim == "h2":  # rank 0 survives and writes the failed summary
        summary = json.loads((tmp_path / "run-h1" / "summary.json").read_text())
        assert summary["status"] == "failed" and "lost rank 1" in summary["error"]
    first_lines = "\n".join(err.splitlines()[:6])
    print(
        f"{survivor} ended {elapsed:.1f} s after {victim} was killed; its first "
        f"lines:\n{first_lines}"
    )


@pytest.mark.parametrize(
    "message, expected",
    [
        (
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:525] Read error [10.77.0.2]:38087: "
            "Connection reset by peer",
            "lost rank 1 on host 10.77.0.2",
        ),
        (
            "[pair.cc:589] Connection closed by peer [10.77.0.3]:5000",
            "lost ranks 2, 3 on host 10.77.0.3",
        ),
        (
            "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
            "20000ms for recv operation "
            "to complete",
            "Timed out after 20 s (comm_timeout_s) waiting for its peers",
        ),
        ("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)", None),
    ],
    ids=["reset", "closed-two-ranks", "timeout", "not-a-peer-failure"],
)
def test_lost_peers_are_named_from_gloos_messages(message, expected):
    from gnntrain.comm.peers import describe_lost_peers

    hosts = ["10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.3"]
    described = describe_lost_peers(message, hosts, rank=0, timeout_s=20.0)
    assert (described is None) if expected is None else (expected in described)


def test_every_rank_runs_rank_zeros_kernel_and_ranks_that_planned_otherwise_stop(monkeypatch):
    """One start-up exchange: kernel=auto is measured per host, and a host that chose otherwise
    takes rank 0's choice; a rank started with other overrides (torchrun runs one command line per
    host) stops the job with one line naming the keys, instead of training a different model beside
    the others."""
    import dataclasses
    import json

    from gnntrain.comm import peers
    from gnntrain.errors import PlanError
    from gnntrain.launch import rank as rank_side
    from gnntrain.plan import build_plan

    base = ["dataset=csbm", "dataset.num_nodes=300", "kernel=torch"]
    # as if this host had measured DGL faster
    plan = dataclasses.replace(build_plan(compose(base)), kernel="dgl")
    other = build_plan(compose(base + ["model.hidden=32", "train.lr=0.5"]))

    def gathered(rank0_plan, rank0_kernel):
        def gather(comm, text, size=64):
            mine = json.loads(text)
            if "host" in mine:
                zero = {"host": "10.0.0.1", "kernel": rank0_kernel, "settings": ""}
                import hashlib

                zero["settings"] = hashlib.sha1(
                    json.dumps(
                        rank_side.agreed_settings(rank0_plan), sort_keys=True, default=str
                    ).encode()
                ).hexdigest()[:16]
                return [json.dumps(zero), text]
            return [json.dumps(rank_side.agreed_settings(rank0_plan), default=str), text]

        return gather

    monkeypatch.setattr(peers, "gather_text", gathered(plan, "torch"))
    hosts, agreed = rank_side.handshake(plan, None, 1, "127.0.0.1")
    assert (
        agreed.kernel == "torch"
        and "rank 0's choice" in agreed.kernel_note
        and hosts[0] == "10.0.0.1"
    )
    monkeypatch.setattr(peers, "gather_text", gathered(plan, "dgl"))
    assert rank_side.handshake(plan, None, 1, "127.0.0.1")[1] is plan
    monkeypatch.setattr(peers, "gather_text", gathered(other, "torch"))
    with pytest.raises(PlanError) as err:
        rank_side.handshake(plan, None, 1, "127.0.0.1")
    assert (
        "the ranks planned different runs: model.hidden 32 (rank 0) vs 16 (rank 1); train.lr 0.5 "
        "(rank 0) vs "
        "0.01 (rank 1) (rank 1 differs from rank 0)" in str(err.value)
    )


def test_a_rank_whose_peers_never_join_ends_with_one_line(tmp_path):
    """A host that dies while the job starts (before the process group forms) leaves its peers
    waiting for it in init_process_group: they end after comm_timeout_s with one line that says so
    (the chaos suite's start-up kills printed DistStoreError's traceback instead)."""
    from conftest import run_cli

    from gnntrain.launch.launcher import find_free_port

    env = {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(find_free_port()),
    }
    args = ["run", "dataset.num_nodes=300", "kernel=torch", "train.progress=false"]
    args += ["hardware.ranks_per_node=2", "comm_timeout_s=3", f"hydra.run.dir={tmp_path}/run"]
    proc = run_cli(args, cwd=tmp_path, env_extra=env, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (
        len(errors) == 1
        and "rank 0: rank 1 did not join within comm_timeout_s (3 s)" in (errors[0])
    ), proc.stderr[-3000:]


@pytest.mark.parametrize(
    "message, world_size, expected",
    [
        # torchrun (the agent's store): the keys rank 0 waited for end in the missing ranks
        ("wait timeout after 20000ms, keys: /default_pg/0//cpu//0/2", 3, "rank 2 did not join"),
        # rank 0's own store (tcp://): a pair names the other rank, a larger job counts
        ("Timed out after 4 seconds waiting for clients. 1/2 clients joined.", 2, "rank 1 did"),
        ("Timed out after 4 seconds waiting for clients. 2/3 clients joined.", 3, "only 2 of 3"),
        ("Connection refused", 2, None),
    ],
    ids=["torchrun-keys", "pair", "count", "not-a-timeout"],
)
def test_peers_that_never_joined_are_named_from_the_stores_message(message, world_size, expected):
    from gnntrain.comm.peers import describe_missing_peers

    described = describe_missing_peers(message, rank=0, world_size=world_size, timeout_s=20.0)
    assert (described is None) if expected is None else (expected in described), described
