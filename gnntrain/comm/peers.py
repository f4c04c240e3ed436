"""Which host each rank runs on, learned once at start-up, so that a lost connection is reported
as the rank(s) lost rather than as a socket error (docs/design.md#launcher).

When a host dies, its peers' pending gloo operations fail at once ("Read error [ADDR]:PORT:
Connection reset by peer", "Connection closed by peer [ADDR]:PORT"); a host that hangs is caught
by ``comm_timeout_s``. Either way the job ends with one message that names the ranks on the lost
host, which the rendezvous store could no longer tell (it may have lived on that host).
"""

from __future__ import annotations

import re
import socket
from typing import List, Optional

import torch

HOST_BYTES = 64  # one fixed-size record per rank: gathered as a tensor, no pickle
_PEER_ADDRESS = re.compile(r"\[([0-9a-fA-F:.]+)\]:\d+")  # gloo: "Read error [10.0.0.2]:38087: ..."
_TIMEOUT = re.compile(r"timed out|timeout", re.IGNORECASE)


def local_address(master_addr: str, port: int = 9) -> str:
    """The address this host uses to reach ``master_addr`` (what its peers see), else its name."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((master_addr, port))  # UDP: picks the route, sends nothing
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()


def gather_text(comm, text: str, size: int = HOST_BYTES) -> List[str]:
    """Every rank's ``text`` (at most ``size`` bytes of UTF-8), in rank order (a collective: every
    rank passes the same ``size``)."""
    if comm is None or not comm.distributed:
        return [text]
    import torch.distributed as dist

    raw = text.encode()[:size].ljust(size, b"\0")
    record = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(comm._bookkeeping_device())
    records = [torch.empty_like(record) for _ in range(comm.world_size)]
    dist.all_gather(records, record)
    return [r.cpu().numpy().tobytes().rstrip(b"\0").decode(errors="replace") for r in records]


def describe_lost_peers(
    message: str, hosts: List[str], rank: int, timeout_s: Optional[float]
) -> Optional[str]:
    """One sentence for a collective that failed because peers went away; None when ``message``
    is not such a failure (an ordinary error keeps its own text)."""
    lowered = message.lower()
    match = _PEER_ADDRESS.search(message)
    if match and any(
        word in lowered for word in ("closed", "reset", "connection", "read error", "write error")
    ):
        address = match.group(1)
        lost = [r for r, host in enumerate(hosts) if host == address and r != rank]
        who = (
            f"rank{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} on host {address}"
            if lost
            else f"the rank(s) on host {address}"
        )
        return (
            f"lost {who}: rank {rank}'s connection to it broke (the host or its processes died). "
            f"The job stops; restart it with resume= to continue from the last checkpoint."
        )
    if _TIMEOUT.search(message) and ("gloo" in lowered or "nccl" in lowered or "wait" in lowered):
        waited = f"{timeout_s:g} s (comm_timeout_s)" if timeout_s else "the collective timeout"
        return (
            f"rank {rank}: Timed out after {waited} waiting for its peers in a collective; a rank "
            "or host "
            f"is down or stalled (hosts by rank: {', '.join(hosts)}). Raise comm_timeout_s for "
            "slow networks."
        )
    return None


_WAITED_KEYS = re.compile(r"keys: ?\[?([^\]\n]+)")  # the store keys a rank waited for: ".../<rank>"
_JOINED = re.compile(r"(\d+)/(\d+) clients joined")


def describe_missing_peers(
    message: str, rank: int, world_size: int, timeout_s: Optional[float]
) -> Optional[str]:
    """One sentence for a process group that never formed because peers did not join (a host or
    rank that died, or stalled, while the job started); None when ``message`` is not such a
    time-out. The hosts are not known yet (the handshake learns them), so it names ranks: those
    whose store keys this rank waited for (torchrun), else the other rank of a pair."""
    if not _TIMEOUT.search(message):
        return None
    keys = _WAITED_KEYS.search(message)
    missing = sorted(
        {
            int(key.strip().rsplit("/", 1)[-1])
            for key in (keys.group(1).split(",") if keys else [])
            if key.strip().rsplit("/", 1)[-1].isdigit()
        }
        - {rank}
    )
    if not missing and world_size == 2:
        missing = [1 - rank]
    joined = _JOINED.search(message)
    if missing:
        who = f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not join"
    elif joined:
        who = f"only {joined.group(1)} of {joined.group(2)} ranks joined"
    else:
        who = "not every rank joined"
    waited = f"comm_timeout_s ({timeout_s:g} s)" if timeout_s else "the start-up timeout"
    return (
        f"rank {rank}: {who} within {waited}: a host or rank died or stalled while the job "
        "started. The job stops; start it again (train.resume=true continues from the last "
        "checkpoint)."
    )
