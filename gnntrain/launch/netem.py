"""An emulated cluster network on one machine: k "hosts" as network namespaces, each joined to one
bridge by a veth link that ``tc`` shapes to a bandwidth (and a latency where the kernel has netem),
and one ``torchrun`` agent per host (docs/design.md#emulated-network).

On loopback a distributed run has effectively infinite bandwidth, so the papers' communication
savings never show in wall time; across shaped links they do. Every byte between two ranks crosses
the sender's shaped uplink and the receiver's shaped downlink, like a NIC on a non-blocking switch.

Layout of a cluster named N (nothing is made in the caller's namespace, so tearing down is deleting
the namespaces this module made):
- ``N-sw``: the switch, a bridge ``br0`` with one port ``p<i>`` per host;
- ``N-h<i>``: host i, interface ``eth0`` with address ``10.79.<net>.<i+1>/24``;
- each link is shaped in both directions: ``eth0``'s egress is the host's upload, ``p<i>``'s egress
  its download;
- with ``cores_per_host``, host i's processes also run in a cpu cgroup ``N-h<i>`` capped at that
  many cores, time-dilated where the machine has fewer cores than the cluster (see
  ``dilation_for``).

Running ``gnntrain run`` across a cluster is :mod:`gnntrain.launch.netem_jobs`; the
``gnntrain netem`` command, :mod:`gnntrain.launch.netem_cli`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from gnntrain.errors import GnnTrainError

STATE_DIR = Path(os.environ.get("GNNTRAIN_NETEM_STATE", "/run/gnntrain-netem"))
INTERFACE = "eth0"
MAX_HOSTS = 64
CGROUP_ROOT = Path(os.environ.get("GNNTRAIN_CGROUP_ROOT", "/sys/fs/cgroup"))
# the share of the machine's cores the hosts get together; the rest runs the kernel's network path
# (veth, bridge, tbf) and the torchrun agents, which no host's cap accounts for
CPU_HEADROOM = 0.9
# a short quota period, so a capped host is slowed evenly, not in 100 ms stalls
CPU_PERIOD_US = 5000


@dataclass(frozen=True)
class Link:
    """One host's link to the switch: bandwidth in Gbit/s each way, one-way latency in µs."""

    gbit_s: float
    latency_us: float = 0.0

    def describe(self) -> str:
        rate = f"{self.gbit_s:g} Gbit/s" if self.gbit_s >= 1 else f"{self.gbit_s * 1000:g} Mbit/s"
        return rate + (f", {self.latency_us:g} us" if self.latency_us else "")


@dataclass(frozen=True)
class EmulatedCluster:
    name: str
    hosts: int
    link: Link
    net: int  # third octet of 10.79.<net>.0/24
    latency_emulated: bool  # False where the kernel has no netem (then bandwidth only)
    cores_per_host: int = 0  # 0: the hosts share the machine's cores freely; else each is capped
    dilation: float = 1.0  # real seconds per emulated second (time dilation; 1 = real time)
    cgroup_dir: str = ""  # the cpu controller's directory holding the hosts' groups ("" = none)
    cgroup_v2: bool = False

    def namespace(self, host: int) -> str:
        return f"{self.name}-h{host}"

    @property
    def switch(self) -> str:
        return f"{self.name}-sw"

    def address(self, host: int) -> str:
        return f"10.79.{self.net}.{host + 1}"

    def cgroup(self, host: int) -> Optional[Path]:
        return Path(self.cgroup_dir) / self.namespace(host) if self.cgroup_dir else None

    def describe(self) -> str:
        latency = (
            ""
            if self.latency_emulated or not self.link.latency_us
            else " (latency not emulated: no netem)"
        )
        cores = ""
        if self.cores_per_host:
            cores = f", {self.cores_per_host} core{'s' if self.cores_per_host > 1 else ''} per host"
            if self.dilation > 1:
                cores += f", time-dilated x{self.dilation:.2f}"
        return f"{self.hosts} hosts, {self.link.describe()} per link{latency}{cores}"


def dilation_for(hosts: int, cores_per_host: int, machine_cores: int) -> float:
    """Time dilation (Gupta et al., "To Infinity and Beyond: Time-Warped Network Emulation", NSDI
    2006): a cluster with more cores than this machine runs slower by this factor in every resource.
    Each host is capped at ``cores_per_host / dilation`` cores and each link is shaped to its
    bandwidth / dilation, so compute and communication keep the emulated cluster's proportions, and
    real seconds / dilation are the emulated cluster's seconds."""
    return max(1.0, hosts * cores_per_host / (machine_cores * CPU_HEADROOM))


def _cpu_controller(root: Path) -> Optional[Tuple[Path, bool]]:
    """The cpu controller's directory and whether it is cgroup v2, or None where neither is
    mounted."""
    controllers = root / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return root, True
    if (root / "cpu" / "cpu.cfs_quota_us").exists():
        return root / "cpu", False
    return None


def _cap_cpu(group: Path, v2: bool, cores: float) -> None:
    """Make cpu cgroup ``group`` and cap it at ``cores`` (a quota of that many cores per period)."""
    quota = max(1000, int(round(cores * CPU_PERIOD_US)))  # the kernel's smallest quota is 1 ms
    try:
        if v2:
            # already on, or not ours to turn on (then mkdir says so)
            with contextlib.suppress(OSError):
                (group.parent / "cgroup.subtree_control").write_text("+cpu")
            group.mkdir(exist_ok=True)
            (group / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        else:
            group.mkdir(exist_ok=True)
            (group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
    except OSError as exc:
        raise GnnTrainError(
            f"emulated network: cannot cap cpu cgroup {group}: {exc}. Fix: run as root with the "
            "cpu cgroup controller mounted, or leave out --cores-per-host"
        ) from exc


def _remove_cgroup(group: Path) -> None:
    for _ in range(50):  # killed processes leave their group a moment later
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def unavailable_reason() -> Optional[str]:
    """Why an emulated cluster cannot be made here, or None."""
    if os.geteuid() != 0:
        return "an emulated network needs root (network namespaces and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"an emulated network needs iproute2's '{tool}' (apt-get install iproute2)"
    return None


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise GnnTrainError(f"emulated network: '{' '.join(args)}' failed: {proc.stderr.strip()}")
    return proc


def _state_file(name: str) -> Path:
    return STATE_DIR / f"{name}.json"


def _shape(namespace: str, device: str, link: Link) -> bool:
    """Shape one direction of a link: a token bucket at the link's rate, under a netem delay where
    the kernel has netem. Returns whether the latency is emulated."""
    rate_bytes = link.gbit_s * 1e9 / 8
    # 2 ms at line rate: enough for TSO's 64 KiB frames
    burst = max(64 * 1024, int(rate_bytes * 0.002))
    tbf = ["rate", f"{link.gbit_s * 1000:g}mbit", "burst", str(burst), "latency", "100ms"]
    if link.latency_us > 0:
        delay = ["delay", f"{link.latency_us:g}us", "limit", "100000"]
        if (
            _run(
                "tc",
                "-n",
                namespace,
                "qdisc",
                "replace",
                "dev",
                device,
                "root",
                "handle",
                "1:",
                "netem",
                *delay,
                check=False,
            ).returncode
            == 0
        ):
            _run(
                "tc",
                "-n",
                namespace,
                "qdisc",
                "add",
                "dev",
                device,
                "parent",
                "1:",
                "handle",
                "2:",
                "tbf",
                *tbf,
            )
            return True
    _run("tc", "-n", namespace, "qdisc", "replace", "dev", device, "root", "tbf", *tbf)
    return False


def create(name: str, hosts: int, link: Link, cores_per_host: int = 0) -> EmulatedCluster:
    """Make the switch and ``hosts`` hosts, shape every link and record the cluster. With
    ``cores_per_host``, cap each host's cpu and time-dilate where the machine is too small."""
    reason = unavailable_reason()
    if reason:
        raise GnnTrainError(reason)
    if not 1 <= hosts <= MAX_HOSTS:
        raise GnnTrainError(f"emulated network: hosts={hosts}; use 1 to {MAX_HOSTS}")
    if link.gbit_s <= 0 or link.latency_us < 0:
        raise GnnTrainError(
            f"emulated network: link {link} is not a link; give a positive bandwidth"
        )
    if not name.replace("-", "").isalnum() or len(name) > 20:
        raise GnnTrainError(
            f"emulated network: name '{name}' must be letters, digits and '-', at most 20"
        )
    if _state_file(name).exists() or name + "-sw" in _namespaces():
        raise GnnTrainError(
            f"emulated network '{name}' exists already. Fix: gnntrain netem down --name {name}"
        )
    if cores_per_host < 0:
        raise GnnTrainError(
            f"emulated network: cores_per_host={cores_per_host}; give a positive count (or 0)"
        )
    cpu, dilation = None, 1.0
    if cores_per_host:
        cpu = _cpu_controller(CGROUP_ROOT)
        if cpu is None:
            raise GnnTrainError(
                f"emulated network: capping each host at {cores_per_host} core(s) needs the cpu "
                f"cgroup controller, and {CGROUP_ROOT} has none. Fix: mount it, or leave out "
                "--cores-per-host"
            )
        dilation = dilation_for(hosts, cores_per_host, len(os.sched_getaffinity(0)))
    cluster = EmulatedCluster(
        name,
        hosts,
        link,
        net=zlib.crc32(name.encode()) % 250 + 1,
        latency_emulated=False,
        cores_per_host=cores_per_host,
        dilation=dilation,
        cgroup_dir=str(cpu[0]) if cpu else "",
        cgroup_v2=bool(cpu and cpu[1]),
    )
    shaped = Link(link.gbit_s / dilation, link.latency_us * dilation)
    made: List[str] = []
    try:
        for i in range(hosts if cpu else 0):
            _cap_cpu(cluster.cgroup(i), cluster.cgroup_v2, cores_per_host / dilation)
        for ns in [cluster.switch] + [cluster.namespace(i) for i in range(hosts)]:
            _run("ip", "netns", "add", ns)
            made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", cluster.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", cluster.switch, "link", "set", "br0", "up")
        latency = []
        for i in range(hosts):
            host, port = cluster.namespace(i), f"p{i}"
            _run(
                "ip",
                "link",
                "add",
                "name",
                INTERFACE,
                "netns",
                host,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                cluster.switch,
            )
            _run("ip", "-n", host, "addr", "add", f"{cluster.address(i)}/24", "dev", INTERFACE)
            _run("ip", "-n", host, "link", "set", INTERFACE, "up")
            _run("ip", "-n", cluster.switch, "link", "set", port, "master", "br0")
            _run("ip", "-n", cluster.switch, "link", "set", port, "up")
            latency += [_shape(host, INTERFACE, shaped), _shape(cluster.switch, port, shaped)]
        cluster = dataclasses.replace(cluster, latency_emulated=all(latency))
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        _state_file(name).write_text(json.dumps(asdict(cluster)))
    except BaseException:
        for ns in made:
            _run("ip", "netns", "del", ns, check=False)
        for i in range(hosts if cpu else 0):
            _remove_cgroup(cluster.cgroup(i))
        raise
    return cluster


def _namespaces() -> List[str]:
    return [
        line.split()[0]
        for line in _run("ip", "netns", "list", check=False).stdout.splitlines()
        if line
    ]


def load(name: str) -> EmulatedCluster:
    path = _state_file(name)
    if not path.exists():
        raise GnnTrainError(
            f"no emulated network '{name}'. Fix: gnntrain netem up --name {name} --hosts K"
        )
    raw = json.loads(path.read_text())
    return EmulatedCluster(**{**raw, "link": Link(**raw["link"])})


def kill_pids(pids: Sequence) -> None:
    """SIGKILL each pid (ints or their text); one already gone is skipped."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def destroy(name: str) -> List[str]:
    """Delete the namespaces of cluster ``name`` (their veth links go with them) and its cpu groups:
    the namespaces deleted."""
    cluster = load(name) if _state_file(name).exists() else None
    gone = []
    for ns in _namespaces():
        if ns == f"{name}-sw" or (ns.startswith(f"{name}-h") and ns[len(name) + 2 :].isdigit()):
            kill_pids(_run("ip", "netns", "pids", ns, check=False).stdout.split())
            _run("ip", "netns", "del", ns, check=False)
            gone.append(ns)
    for i in range(cluster.hosts if cluster and cluster.cgroup_dir else 0):
        group = cluster.cgroup(i)
        with contextlib.suppress(OSError):  # anything left outside the namespaces
            kill_pids((group / "cgroup.procs").read_text().split())
        _remove_cgroup(group)
    _state_file(name).unlink(missing_ok=True)
    return gone
