"""Who started this rank when an external launcher did: ``torchrun``
(``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``) or SLURM ``srun``
(``SLURM_PROCID``/``SLURM_NTASKS``, the master at the first host of the job's node list, by its
``NodeAddr``)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional

from gnntrain.launch.forkserver import launched_externally


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    source: str  # torchrun | slurm


def expand_nodelist(nodelist: str) -> List[str]:
    """Expand a SLURM node list such as ``node[01-03,07],login``."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
        if out:
            return out
    except Exception:
        pass
    hosts: List[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,]+)", nodelist):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            if "-" in part:
                lo, hi = part.split("-")
                hosts.extend(f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1))
            else:
                hosts.append(prefix + part)
    return hosts


def node_address(node: str) -> str:
    """A SLURM node's ``NodeAddr`` (its NodeName need not resolve), else the name itself."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "-o", node],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        match = re.search(r"\bNodeAddr=(\S+)", out)
        if match:
            return match.group(1)
    except Exception:
        pass
    return node


def external_identity(env: Optional[Dict[str, str]] = None) -> Optional[RankIdentity]:
    """This process's rank when an external launcher started several ranks."""
    env = dict(os.environ) if env is None else env
    launcher = launched_externally(env)
    if launcher == "torchrun":
        return RankIdentity(
            int(env["RANK"]),
            int(env["WORLD_SIZE"]),
            int(env.get("LOCAL_RANK", 0)),
            env.get("MASTER_ADDR", "127.0.0.1"),
            int(env.get("MASTER_PORT", 29500)),
            "torchrun",
        )
    if launcher == "slurm":
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "127.0.0.1"
        master = env.get("MASTER_ADDR") or node_address(expand_nodelist(nodelist)[0])
        port = int(env.get("MASTER_PORT") or 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
        return RankIdentity(
            int(env["SLURM_PROCID"]),
            int(env["SLURM_NTASKS"]),
            int(env.get("SLURM_LOCALID", 0)),
            master,
            port,
            "slurm",
        )
    return None
