"""One rank's side of a run, whoever started it (the local launcher, torchrun, srun):
:func:`rank_main` joins the process group, agrees with the other ranks on one plan
(:func:`handshake`), trains and, on rank 0, writes the summary; :func:`_spawned_rank` is a locally
spawned rank's entry and exit. Also the rank's intra-op thread count (:func:`threads_here`)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from gnntrain.errors import PlanError, RankFailure
from gnntrain.interrupts import graceful_stop
from gnntrain.metrics import RunRecorder, build_summary
from gnntrain.models.kernels import SPMM_CALLS


def local_ranks(world_size: int, env: Optional[Dict[str, str]] = None) -> int:
    """How many ranks share this host: torchrun says (LOCAL_WORLD_SIZE); under srun each task
    has its own CPU set already (1); the local launcher runs them all here."""
    env = os.environ if env is None else env
    if "LOCAL_WORLD_SIZE" in env:
        return max(1, int(env["LOCAL_WORLD_SIZE"]))
    if "SLURM_PROCID" in env:
        return 1
    return max(1, world_size)


def threads_here(planned: int, world_size: int) -> int:
    """The planned intra-op threads, but never more than this rank's share of the cores it may
    run on (a profile's cores_per_node describes its nodes, not the machine a run lands on)."""
    share = max(1, len(os.sched_getaffinity(0)) // local_ranks(world_size))
    return max(1, min(int(planned), share))


def _set_threads(threads: int) -> None:
    """Intra-op threads of this rank (spawned ranks also get OMP_NUM_THREADS from the launcher)."""
    import torch

    torch.set_num_threads(threads)


def rank_main(
    rank: int,
    plan,
    shard,
    run_dir: Optional[str],
    master_addr: str,
    port: int,
    partition: Dict[str, Any],
    preprocess_s: float,
    in_process: bool = False,
    spawned: bool = False,
) -> Optional[Dict[str, Any]]:
    """Entry point of one rank, whoever started it (``in_process``: the launcher's own process,
    where a second Ctrl-C unwinds to the launcher, which records it, instead of leaving at once)."""
    _set_threads(threads_here(plan.threads_of(rank), plan.world_size))
    import torch

    from gnntrain.comm import Communicator
    from gnntrain.comm.peers import describe_lost_peers, describe_missing_peers
    from gnntrain.plan import plan_mode
    from gnntrain.runtime import RankContext
    from gnntrain.training import train_rank

    distributed = plan.world_size > 1
    if distributed:
        import torch.distributed as dist

        # under torchrun the agent already serves the rendezvous store at MASTER_ADDR:MASTER_PORT
        init = "env://" if os.environ.get("TORCHELASTIC_RUN_ID") else f"tcp://{master_addr}:{port}"
        timeout_s = float(plan.config["comm_timeout_s"])
        try:
            dist.init_process_group(
                plan.backend,
                init_method=init,
                rank=rank,
                world_size=plan.world_size,
                timeout=timedelta(seconds=timeout_s),
            )
        except RuntimeError as exc:  # DistStoreError: a peer that never joined
            missing = describe_missing_peers(str(exc), rank, plan.world_size, timeout_s)
            if missing is None:
                raise
            raise RankFailure(missing) from None
    device = torch.device(plan.rank_devices[rank])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    recorder = None
    if rank == 0 and run_dir is not None:
        recorder = RunRecorder(Path(run_dir), plan, progress=bool(plan.config["train"]["progress"]))
    comm = Communicator(rank, plan.world_size, timeout_s=float(plan.config["comm_timeout_s"]))
    try:
        hosts, plan = handshake(plan, comm, rank, master_addr)
    except RuntimeError as exc:  # a peer lost before the hosts were known: named by its address
        lost = describe_lost_peers(str(exc), [], rank, comm.timeout_s) if distributed else None
        if lost is None:
            raise
        raise RankFailure(lost) from None
    ctx = RankContext(
        plan=plan,
        comm=comm,
        device=device,
        run_dir=Path(run_dir) if run_dir else None,
        recorder=recorder,
        preprocess_s=preprocess_s,
    )
    mode = plan_mode(plan)
    SPMM_CALLS.clear()  # this rank's run only (in-process ranks run one after another)
    try:
        # Ctrl-C, SIGTERM: finish the epoch, agree, stop (gnntrain.interrupts)
        with graceful_stop(hard_exit=not in_process, sigterm=not spawned), profiled(rank):
            result = train_rank(mode, shard, ctx)
    except RuntimeError as exc:
        lost = describe_lost_peers(str(exc), hosts, rank, comm.timeout_s) if distributed else None
        if lost is None:
            raise
        raise RankFailure(lost) from None
    finally:
        if recorder is not None:
            recorder.stop()
    summary = None
    if rank == 0:
        summary = build_summary(plan, {**result, "rank_hosts": hosts}, partition)
        if recorder is not None:
            recorder.finish(summary)
    if distributed:
        # Leave together, then let process exit release the group: gloo's
        # destroy_process_group (torch 2.2) can block forever when a peer has
        # already torn down its side.
        ctx.comm.barrier()
    return summary


@contextmanager
def profiled(rank: int) -> Iterator[None]:
    """Where ``GNNTRAIN_PROFILE_DIR`` is set, this rank's training (set-up, epochs, evaluation)
    runs under cProfile and its stats go to ``<dir>/rank<rank>.prof`` (read them with ``python -m
    pstats``): where a mode's epoch goes beside ``single``'s, rank by rank."""
    folder = os.environ.get("GNNTRAIN_PROFILE_DIR")
    if not folder:
        yield
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        Path(folder).mkdir(parents=True, exist_ok=True)
        profile.dump_stats(str(Path(folder) / f"rank{rank}.prof"))


def agreed_settings(plan) -> Dict[str, Any]:
    """What every rank of one job must have planned alike: the settings a checkpoint pins (mode,
    dataset, model, partitioner, world size, dtype, seed) and the training settings (lr, epochs,
    ...)."""
    from gnntrain.checkpoint import current_settings, pinned_settings

    return {
        **pinned_settings(plan.config_obj),
        **current_settings(plan.config_obj),
        "world_size": plan.world_size,
    }


def handshake(plan, comm, rank: int, master_addr: str):
    """The one start-up exchange: every rank's (host, kernel choice, settings digest), gathered
    once. Under torchrun or srun each rank builds its own plan from its own command line: ranks
    whose settings differ stop with one line naming the keys; a host whose ``kernel=auto`` measured
    another kernel takes rank 0's, so every rank runs one plan. Returns (hosts by rank, the plan to
    run)."""
    import dataclasses
    import hashlib
    import json
    import logging

    from gnntrain.comm.peers import gather_text, local_address

    if plan.world_size == 1:  # nobody to agree with: the host is this one, the plan this rank's
        return [local_address(master_addr)], plan
    settings = agreed_settings(plan)
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]
    records = [
        json.loads(r)
        for r in gather_text(
            comm,
            json.dumps(
                {"host": local_address(master_addr), "kernel": plan.kernel, "settings": digest}
            ),
            size=256,
        )
    ]
    hosts = [r["host"] for r in records]
    differing = [
        r for r, record in enumerate(records) if record["settings"] != records[0]["settings"]
    ]
    if differing:  # every rank sees the same records, so all stop here together
        everyone = [
            json.loads(t) for t in gather_text(comm, json.dumps(settings, default=str), size=16384)
        ]
        other = differing[0]
        first, theirs = everyone[0], everyone[other]
        keys = [
            f"{k} {first.get(k)} (rank 0) vs {theirs.get(k)} (rank {other})"
            for k in sorted(set(first) | set(theirs))
            if first.get(k) != theirs.get(k)
        ]
        raise PlanError(
            "ranks",
            f"the ranks planned different runs: {'; '.join(keys[:6]) or 'settings differ'} "
            f"({'ranks' if len(differing) > 1 else 'rank'} {', '.join(map(str, differing))} "
            f"{'differ' if len(differing) > 1 else 'differs'} from rank 0).",
            "start every rank with the same overrides (torchrun/srun run one command line per "
            "host).",
        )
    kernels = [r["kernel"] for r in records]
    if kernels[0] == plan.kernel:
        return hosts, plan
    logging.getLogger(__name__).warning(
        "rank %d resolved kernel=%s, rank 0 %s: using rank 0's", rank, plan.kernel, kernels[0]
    )
    return hosts, dataclasses.replace(
        plan, kernel=kernels[0], kernel_note=f"rank 0's choice ({plan.kernel_note})"
    )


def _spawned_rank(rank: int, plan, source, environment: Dict[str, str], *args) -> None:
    # a fork server's child has the server's environment: take the launcher's as it was at this
    # start
    os.environ.clear()
    os.environ.update(environment)
    from gnntrain.launch.output_relay import redirect_rank_output
    from gnntrain.logs import setup_logging

    redirect_rank_output(rank)  # a launcher in a notebook relays it (launch.output_relay)

    # a fresh interpreter: rank 0 logs info, the others warnings and errors only
    setup_logging(rank)
    shard, _ = source.shard(plan, rank)  # its own part only, from the store where the mode has one
    rank_main(rank, plan, shard, *args, spawned=True)
    # A finished rank leaves without interpreter teardown: destroying gloo's
    # process group there raced its worker threads ("terminate called without
    # an active exception", SIGABRT) after every output was already written,
    # and the launcher then reported a completed run as a dead rank.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
