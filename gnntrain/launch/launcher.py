"""Run a plan: prepare the shards, start the ranks, watch them, write the summary.

Ranks come from one of three places, all ending in :func:`rank_main`:

* ``gnntrain run`` on a laptop or a single node: ``world_size`` processes
  spawned here with torch.multiprocessing, on a free port;
* ``torchrun``: ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``;
* SLURM ``srun`` (or hydra-submitit): ``SLURM_PROCID``/``SLURM_NTASKS``, with
  the master address from the first host of the job's node list.

The launcher watches its children: if any rank raises, is killed, or stops
answering (collectives carry a finite timeout), the others are terminated,
the failing rank and its traceback or signal are reported, and summary.json
says ``status: failed``.

A rank's own side is :mod:`gnntrain.launch.rank`; who started an external one,
:mod:`gnntrain.launch.rank_identity`.
"""

from __future__ import annotations

import logging
import os
import socket
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

from gnntrain.errors import GnnTrainError, Interrupted, PlanError, RankFailure
from gnntrain.interrupts import FORWARDED
from gnntrain.launch.forkserver import (
    rank_threads,
    start_fork_server,
    start_method,
    user_main_hidden,
)
from gnntrain.launch.output_relay import rank_output
from gnntrain.launch.rank import _spawned_rank, rank_main, threads_here
from gnntrain.launch.rank_identity import RankIdentity, external_identity
from gnntrain.metrics import failed_summary, write_json_atomic


def find_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_resume(plan, run_dir: Path, rank: int = 0) -> None:
    """Before any rank starts: a resume source must hold a valid checkpoint of this very plan.
    ``rank``: the process's rank under a cluster launcher (rank 0's checkpoint resumes them all)."""
    from gnntrain.checkpoint import (
        CheckpointError,
        checkpoint_dir,
        make_checkpointer,
        resume_requested,
    )

    cfg = plan.config
    if not resume_requested(cfg):
        return
    directory = checkpoint_dir(plan.config_obj, run_dir)
    checkpointer = make_checkpointer(plan.config_obj, directory, plan.plan_hash)
    state = checkpointer.load_latest()  # refuses another plan's
    skipped = len(checkpointer.candidates()) if state is None else 0
    if skipped:  # every one failed its checksum or its load (warned above): never from scratch
        option = f"resume={cfg['resume']}" if cfg.get("resume") else "train.resume=true"
        raise CheckpointError(
            f"{option}: none of the {skipped} checkpoint(s) in {directory} is valid (each failed "
            "its checksum or its load). Fix: restore a checkpoint there, or train from epoch 1 in "
            "a new run directory."
        )
    if state is None and cfg.get("resume"):
        raise CheckpointError(
            f"resume={cfg['resume']}: no valid checkpoint in {directory}. Point resume= at a "
            "run directory that was trained with train.checkpoint_every > 0."
        )
    # train.resume=true where no checkpoint was written yet: say so, then train from epoch 1 (rank 0
    # says it: another host's run folder holds none, and its rank resumes from rank 0's anyway)
    if state is None and rank == 0:
        logging.getLogger("gnntrain").warning(
            f"train.resume=true: no checkpoint in {directory} yet; training from epoch 1"
        )


def preflight(plan, run_dir: Path, identity: Optional[RankIdentity]) -> None:
    """What refuses a run before it writes anything (an earlier run's summary.json, plan.yaml and
    checkpoints in the same folder stay as they were): a cluster profile with no cluster launcher,
    a resume that finds another plan's checkpoint or none. Every rank checks (they read the same
    directory), so under torchrun or srun all refuse before any rendezvous."""
    if identity is None and plan.nodes > 1:  # every rank would start on this machine
        raise PlanError(
            "hardware.nodes",
            f"the plan spans {plan.nodes} nodes ({plan.world_size} ranks, hardware="
            f"{plan.hardware}), but no cluster launcher started this run, so all ranks would start "
            f"on this machine.",
            "submit it with -m hydra/launcher=slurm, start it on every node "
            "with torchrun (README: torchrun), or run here with hardware=local-cpu.",
        )
    check_resume(plan, run_dir, identity.rank if identity is not None else 0)


def run_training(plan, run_dir: Path, preflighted: bool = False) -> Dict[str, Any]:
    """Train ``plan``; returns the summary (raises GnnTrainError on failure after writing it).
    ``preflighted``: the caller ran :func:`preflight` already (the CLI does, before writing
    plan.yaml)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    identity = external_identity()
    if not preflighted:
        preflight(plan, run_dir, identity)  # refused before anything in run_dir is written
    if identity is not None:
        return _run_external(plan, run_dir, identity)
    try:
        if plan.world_size > 1:
            start_fork_server(_omp_threads(plan))
        from gnntrain.launch.shards import shard_source

        source, partition, preprocess_s = shard_source(plan)
        if plan.world_size == 1:
            summary = rank_main(
                0,
                plan,
                source.shard(plan, 0)[0],
                str(run_dir),
                "127.0.0.1",
                0,
                partition,
                preprocess_s,
                in_process=True,
            )
            return summary
        fixed_port = int(plan.config.get("port") or 0)
        for attempt in range(3):
            try:
                stopped_by = _spawn_and_watch(
                    plan, source, partition, preprocess_s, run_dir, fixed_port or find_free_port()
                )
                if stopped_by is not None:
                    _name_the_signal(run_dir, stopped_by)
                break
            except RankFailure as exc:
                # a free port picked here can be taken by another process before rank 0 binds it
                if fixed_port or attempt == 2 or "address already in use" not in str(exc).lower():
                    raise
    except Interrupted as exc:
        write_json_atomic(run_dir / "summary.json", interrupted_summary(plan, exc.signal, run_dir))
        raise
    # before the ranks trained (loading, partitioning) or in a one-process run
    except KeyboardInterrupt:
        write_json_atomic(run_dir / "summary.json", interrupted_summary(plan, "SIGINT", run_dir))
        raise Interrupted("SIGINT", 0) from None
    except GnnTrainError as exc:
        _record_failure(run_dir, failed_summary(plan, str(exc)))
        raise
    except Exception as exc:
        _record_failure(
            run_dir, failed_summary(plan, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        )
        raise
    import json

    return json.loads((run_dir / "summary.json").read_text())


def _record_failure(run_dir: Path, summary: Dict[str, Any]) -> None:
    """summary.json of a failed run, where it can be written: a run directory on a full disk keeps
    its previous one, and the failure is still said (the error being raised)."""
    try:
        write_json_atomic(run_dir / "summary.json", summary)
    except OSError as exc:
        logging.getLogger("gnntrain").warning(
            "could not write %s (%s)", run_dir / "summary.json", exc.strerror or exc
        )


def _name_the_signal(run_dir: Path, signum: int) -> None:
    """The ranks saw the launcher's forwarded stop; summary.json names what the launcher
    received."""
    import json
    import signal

    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    if summary.get("status") == "interrupted":
        summary["interrupted"]["signal"] = signal.Signals(signum).name
        write_json_atomic(path, summary)


def interrupted_summary(plan, signal_name: str, run_dir: Path) -> Dict[str, Any]:
    """An interrupt before any epoch completed (or a second Ctrl-C): no epochs, nothing to resume
    from beyond the checkpoints already written."""
    summary = failed_summary(plan, f"interrupted by {signal_name}")
    summary["status"] = "interrupted"
    from gnntrain.checkpoint import Checkpointer, checkpoint_dir

    newest = Checkpointer(checkpoint_dir(plan.config_obj, run_dir), plan.plan_hash).candidates()[:1]
    summary["interrupted"] = {
        "signal": signal_name,
        "last_epoch": int(newest[0].stem.split("_")[1]) if newest else 0,
        "epochs": plan.epochs,
    }
    return summary


def _omp_threads(plan) -> str:
    return str(
        max(threads_here(plan.threads_of(r), plan.world_size) for r in range(plan.world_size))
    )


def _spawn_and_watch(
    plan, source, partition, preprocess_s: float, run_dir: Path, port: int
) -> None:
    import torch.multiprocessing as mp

    # children get the thread limit at start; the launcher's own environment is left as it was
    # a rank's parent is the fork server
    # under a Jupyter kernel the ranks' output is relayed through the running cell's streams
    output = rank_output()
    environment = output.environment(
        dict(os.environ, OMP_NUM_THREADS=_omp_threads(plan), GNNTRAIN_LAUNCHER_PID=str(os.getpid()))
    )
    args = (plan, source, environment, str(run_dir), "127.0.0.1", port, partition, preprocess_s)
    start_fork_server(environment["OMP_NUM_THREADS"])  # a no-op where run_training started it
    with rank_threads(environment["OMP_NUM_THREADS"]), user_main_hidden():  # a spawned child's
        context = mp.start_processes(
            _spawned_rank,
            args=args,
            nprocs=plan.world_size,
            join=False,
            start_method=start_method(),
        )
    import signal

    received: List[int] = []

    def pass_on(signum, frame):  # the first: every rank stops after its epoch; the second: stop now
        if received:
            raise KeyboardInterrupt
        received.append(signum)
        for proc in context.processes:
            if proc.is_alive():
                os.kill(proc.pid, FORWARDED)

    previous = {s: signal.signal(s, pass_on) for s in (signal.SIGINT, signal.SIGTERM)}
    # stopping the other ranks after one failed is the plan, not news: the failure is said once
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    try:
        while not context.join(timeout=output.poll_s):
            output.pump()
        return received[0] if received else None
    except KeyboardInterrupt:
        raise Interrupted(signal.Signals(received[0]).name if received else "SIGINT", 0) from None
    except mp.ProcessRaisedException as exc:
        raise RankFailure(_failure_message(context, exc.error_index, str(exc))) from None
    except mp.ProcessExitedException as exc:
        raise RankFailure(
            f"rank {exc.error_index} died ({_signal_text(exc)}); the other ranks were stopped. "
            "Check the host's memory (an out-of-memory kill shows as SIGKILL)."
        ) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for proc in context.processes:
            if proc.is_alive():
                proc.terminate()
        for proc in context.processes:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        output.close()


def _signal_text(exc) -> str:
    if getattr(exc, "signal_name", None):
        return f"signal {exc.signal_name}"
    return f"exit code {exc.exit_code}"


def _failure_message(context, first: int, raised: str) -> str:
    """What ended the job, said once. The rank that failed first may only have lost a peer that
    stopped (a rank that stops closes its connections): the cause is the rank whose own error
    ended it. A gnntrain user error (a full disk, a refused plan) is its one line; another error,
    that rank's last traceback lines."""
    import pickle

    traces = {}
    for rank in [first] + [r for r in range(len(context.error_files)) if r != first]:
        try:
            with open(context.error_files[rank], "rb") as handle:
                traces[rank] = str(pickle.load(handle))
        except (OSError, EOFError, pickle.UnpicklingError):
            continue
    for trace in traces.values():
        kind, message = _gnntrain_error(trace)
        if kind is not None and not issubclass(kind, (Interrupted, RankFailure)):
            return message
    for rank, trace in traces.items():
        if _gnntrain_error(trace)[0] is not RankFailure:
            return _describe_failure(rank, trace)
    return _describe_failure(first, raised)


def _gnntrain_error(trace: str) -> tuple:
    """(the GnnTrainError class, its message) that ends the traceback ``trace``, else (None, the
    last line)."""
    import importlib

    lines = trace.strip().splitlines()
    last = lines[-1] if lines else ""
    name, found, message = last.partition(": ")
    module, _, cls = name.rpartition(".")
    if not found or not module.startswith("gnntrain"):
        return None, last
    try:
        kind = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError):
        return None, last
    return (
        (kind, message)
        if isinstance(kind, type) and issubclass(kind, GnnTrainError)
        else (None, last)
    )


def _describe_failure(rank: int, message: str) -> str:
    lines = [line for line in message.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "unknown error"
    tail = "\n".join(lines[-12:])
    return f"rank {rank} failed: {last}\n--- rank {rank} traceback (last lines) ---\n{tail}"


def _run_external(plan, run_dir: Path, identity: RankIdentity) -> Dict[str, Any]:
    from gnntrain.launch.shards import shard_source

    if plan.world_size == 1:
        # a one-process plan (mode=single) inside a multi-task allocation: task 0 runs it alone
        if identity.rank != 0:
            return {
                "status": "completed",
                "rank": identity.rank,
                "note": "idle: the plan needs one process",
            }
        source, partition, preprocess_s = shard_source(plan, rank=0)
        return rank_main(
            0, plan, source.shard(plan, 0)[0], str(run_dir), "127.0.0.1", 0, partition, preprocess_s
        )
    if identity.world_size != plan.world_size:
        error = (
            f"the launcher started {identity.world_size} ranks ({identity.source}) but the plan "
            "needs "
            f"{plan.world_size}; set hardware.nodes/ranks_per_node to match"
        )
        if identity.rank == 0:
            write_json_atomic(run_dir / "summary.json", failed_summary(plan, error))
        raise RankFailure(error)
    try:
        # the first rank builds the store under its lock; all open their own part
        source, partition, preprocess_s = shard_source(plan, rank=identity.rank)
        shard, _ = source.shard(plan, identity.rank)
        summary = rank_main(
            identity.rank,
            plan,
            shard,
            str(run_dir),
            identity.master_addr,
            identity.master_port,
            partition,
            preprocess_s,
        )
        return summary or {"status": "completed", "rank": identity.rank}
    except Exception as exc:
        if identity.rank == 0:
            write_json_atomic(
                run_dir / "summary.json", failed_summary(plan, f"{type(exc).__name__}: {exc}")
            )
        raise
