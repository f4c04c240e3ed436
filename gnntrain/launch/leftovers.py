"""What a job can leave behind on the hosts of an emulated cluster (gnntrain/launch/netem.py) once
it has ended: processes and listening ports in the hosts' namespaces, shared memory segments,
held file locks, disk-tier tables and half-written files (:func:`sweep`). The chaos suite
(gnntrain/launch/chaos.py) sweeps after every killed job and again after its resume.

Lock files themselves stay by design (``gnntrain.atomic.file_lock``: an ``flock`` that the kernel
releases when its holder dies), so a lock is left behind only while some process still holds it.
A killed rank's disk-tier tables are removed by the next run that uses the folder
(``remove_stale_scratch``: the resume), never by its peers on other hosts, and the temp file of a
write it was making by the resume (``Checkpointer.remove_partial``), so right after a kill only
those are allowed (``allowed_disk_owners``, ``half_written=False``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Dict, Iterable, List, Set

from gnntrain.launch.netem import EmulatedCluster

SHM = Path("/dev/shm")
DISK_TIER_OWNER = "owner"  # gnntrain.modes.hongtu.tiers.OWNER: "<host> <pid>" in a rank folder


@dataclass(frozen=True)
class Leftover:
    """One thing left behind: its kind, where (a host's namespace or a folder) and what."""

    kind: str  # process | port | shm | lock | disk-tier | partial-file
    where: str
    what: str

    def describe(self) -> str:
        return f"{self.kind} {self.what} ({self.where})"


def _netns(*args: str) -> str:
    proc = subprocess.run(["ip", "netns", *args], capture_output=True, text=True, timeout=20)
    return proc.stdout


def namespace_pids(cluster: EmulatedCluster) -> Dict[int, List[int]]:
    """Host -> the pids running in its namespace."""
    return {
        host: [int(p) for p in _netns("pids", cluster.namespace(host)).split()]
        for host in range(cluster.hosts)
    }


def process_command(pid: int) -> str:
    """The command line of ``pid`` (its first 120 characters), or "?" for one gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:120] or "?"


def process_environment(pid: int) -> Dict[str, str]:
    """The environment ``pid`` started with ({} for one gone or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def parent_pid(pid: int) -> int:
    """The parent of ``pid`` (0 for one gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def processes(cluster: EmulatedCluster) -> List[Leftover]:
    return [
        Leftover("process", cluster.namespace(host), f"pid {pid}: {process_command(pid)}")
        for host, pids in namespace_pids(cluster).items()
        for pid in pids
    ]


def ports(cluster: EmulatedCluster) -> List[Leftover]:
    """Listening TCP and bound UDP sockets in the hosts' namespaces."""
    found = []
    for host in range(cluster.hosts):
        ns = cluster.namespace(host)
        for line in _netns("exec", ns, "ss", "-Htlnu").splitlines():
            fields = line.split()
            if len(fields) >= 5:
                found.append(Leftover("port", ns, f"{fields[0]} {fields[4]}"))
    return found


def shm_names() -> Set[str]:
    """The shared memory segments (and POSIX semaphores) now in /dev/shm."""
    with contextlib.suppress(OSError):
        return {p.name for p in SHM.iterdir()}
    return set()


def _shm_holders() -> Dict[str, Set[int]]:
    """/dev/shm name -> the pids that have it open or mapped."""
    holders: Dict[str, Set[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        pid = int(proc.name)
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith(f"{SHM}/"):
                    holders.setdefault(target[len(str(SHM)) + 1 :].split(" ")[0], set()).add(pid)
        with contextlib.suppress(OSError):
            for line in (proc / "maps").read_text().splitlines():
                path = line.split(maxsplit=5)[5:]
                if path and path[0].startswith(f"{SHM}/"):
                    holders.setdefault(path[0][len(str(SHM)) + 1 :].split(" ")[0], set()).add(pid)
    return holders


def shm_segments(before: Collection[str], ours: Collection[int] = ()) -> List[Leftover]:
    """Segments made since ``before`` that no process outside ``ours`` holds: the job's (this
    machine's /dev/shm is shared with whatever else runs here; a segment another program still
    holds is not the job's)."""
    new = shm_names() - set(before)
    if not new:
        return []
    holders = _shm_holders()
    mine = set(ours)
    return [
        Leftover("shm", str(SHM), name)
        for name in sorted(new)
        if not (holders.get(name, set()) - mine)
    ]


def _files(folders: Iterable[Path], pattern: str) -> List[Path]:
    return sorted(p for f in folders if Path(f).exists() for p in Path(f).rglob(pattern))


def held_locks(folders: Iterable[Path]) -> List[Leftover]:
    """``*.lock`` files under ``folders`` that some process still holds (``flock``)."""
    held = []
    for path in _files(folders, "*.lock"):
        try:
            with open(path, "a+") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        except BlockingIOError:
            held.append(Leftover("lock", str(path.parent), f"{path.name} (held)"))
        except OSError:
            continue
    return held


def disk_tier(folders: Iterable[Path], allowed_owners: Collection[int] = ()) -> List[Leftover]:
    """Files in disk-tier folders, but for the rank folders of the processes in
    ``allowed_owners`` (a killed rank's tables, which the next run removes)."""
    found = []
    allowed = {int(p) for p in allowed_owners}
    for folder in folders:
        for path in _files([folder], "*"):
            if not path.is_file():
                continue
            owner = path.parent / DISK_TIER_OWNER
            with contextlib.suppress(OSError, ValueError, IndexError):
                if int(owner.read_text().split()[1]) in allowed:
                    continue
            found.append(Leftover("disk-tier", str(folder), str(path.relative_to(folder))))
    return found


def partial_files(folders: Iterable[Path]) -> List[Leftover]:
    """The temp files of interrupted atomic writes (``gnntrain.atomic``: ``.NAME.XXXX.tmp``)."""
    return [
        Leftover("partial-file", str(p.parent), p.name)
        for p in _files(folders, ".*.tmp")
        if p.is_file()
    ]


def sweep(
    cluster: EmulatedCluster,
    folders: Iterable[Path],
    disk_tier_folders: Iterable[Path],
    shm_before: Collection[str],
    allowed_disk_owners: Collection[int] = (),
    half_written: bool = True,
) -> List[Leftover]:
    """Everything a job that has ended left on the cluster's hosts: processes and ports in their
    namespaces, new shared memory segments nobody else holds, held locks and (``half_written``)
    half-written files under ``folders`` (the job's cache and run folders), disk-tier files but
    the allowed owners'. Right after a kill the killed ranks' own tables and half-written files
    are allowed (``allowed_disk_owners``, ``half_written=False``): only the next run can remove
    them."""
    folders = list(folders)
    ours = [pid for pids in namespace_pids(cluster).values() for pid in pids]
    return (
        processes(cluster)
        + ports(cluster)
        + shm_segments(shm_before, ours)
        + held_locks(folders)
        + disk_tier(disk_tier_folders, allowed_disk_owners)
        + (partial_files(folders) if half_written else [])
    )
