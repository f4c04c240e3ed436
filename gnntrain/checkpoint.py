"""Atomic, verifiable training checkpoints (train.checkpoint_every, resume).

A checkpoint is ``checkpoints/epoch_NNNNNN.pt`` in the run directory: model
and optimizer state, the epoch count, the per-epoch history, the RNG state
and the plan hash, saved with ``torch.save`` and read back with
``torch.load(weights_only=True)`` (plain tensors and containers; nothing
arbitrary is unpickled). Each file is written to a temp file, fsynced and
renamed, and has a ``.sha1`` sidecar written the same way; a checkpoint
whose checksum or load fails is skipped with a warning, falling back to the
previous one.

Every source of randomness in training derives from (seed, epoch, layer)
(see GlobalDropout), and every rank holds identical parameters and optimizer
state, so rank 0's state resumes every rank bit-identically on CPU.
"""

from __future__ import annotations

import copy
import hashlib
import io
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

from gnntrain.atomic import atomic_write_bytes, on_disk_full
from gnntrain.errors import GnnTrainError

# Settings a resume may change: applied from the resumed epoch on, printed as old -> new and
# recorded in summary.json (``resume``) and metrics.jsonl. Everything in the plan hash (dataset,
# model but its dropout, mode, partitioner, world size, dtype, seed) is pinned: a checkpoint of
# another plan is refused.
RESUMABLE_SETTINGS = (
    "train.lr",
    "train.weight_decay",
    "train.epochs",
    "train.eval_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "model.dropout",
)


def current_settings(cfg) -> Dict[str, Any]:
    out = {}
    for key in RESUMABLE_SETTINGS:
        group, name = key.split(".")
        out[key] = cfg[group].get(name)
    return out


def pinned_settings(cfg) -> Dict[str, Any]:
    """The settings a checkpoint pins (what the plan hash covers), flat: {"model.hidden": 16, ...},
    so a refused resume names the keys that differ."""
    from collections.abc import Mapping

    def flat(prefix: str, node) -> Dict[str, Any]:
        if isinstance(node, Mapping):
            return {k: v for key in node for k, v in flat(f"{prefix}.{key}", node[key]).items()}
        if isinstance(node, (list, tuple)) or type(node).__name__ == "ListConfig":
            return {prefix: [str(x) for x in node]}
        return {prefix: node if isinstance(node, (bool, int, float, type(None))) else str(node)}

    out: Dict[str, Any] = {}
    for group in ("dataset", "model", "mode", "partitioner"):
        out.update(flat(group, cfg[group]))
    out.pop("model.dropout", None)
    for key in ("train.seed", "train.dtype", "hardware.nodes", "hardware.ranks_per_node"):
        group, name = key.split(".")
        out[key] = flat(key, cfg[group].get(name))[key]
    return out


def resume_changes(state: Dict[str, Any], cfg) -> Dict[str, list]:
    """{setting: [old, new]} between a checkpoint and this run (old lr and weight decay also from
    the optimizer state, for checkpoints that predate the stored settings)."""
    old = dict(state.get("settings") or {})
    groups = (state.get("optimizer") or {}).get("param_groups") or [{}]
    old.setdefault("train.lr", groups[0].get("lr"))
    old.setdefault("train.weight_decay", groups[0].get("weight_decay"))
    new = current_settings(cfg)
    return {
        k: [old[k], new[k]]
        for k in RESUMABLE_SETTINGS
        if old.get(k) is not None and new.get(k) is not None and float(old[k]) != float(new[k])
    }


class CheckpointError(GnnTrainError):
    """A checkpoint that cannot be used (another plan, none valid)."""


class Checkpointer:
    def __init__(self, directory: Path, plan_hash: str, keep: int = 0):
        self.directory = Path(directory)
        self.plan_hash = plan_hash
        # newest checkpoints kept after each save (train.keep_checkpoints); 0 = all
        self.keep = int(keep)
        self.settings: Dict[
            str, Any
        ] = {}  # the run's RESUMABLE_SETTINGS, stored so a resume can name changes
        self.pinned: Dict[
            str, Any
        ] = {}  # the run's pinned_settings, stored so a refused resume names what differs

    def path(self, epoch: int) -> Path:
        return self.directory / f"epoch_{epoch:06d}.pt"

    def snapshot(
        self,
        epoch: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        history: List[Dict[str, Any]],
    ) -> Dict[str, Any]:
        """A detached copy of the training state after ``epoch`` completed epochs.

        Tensors and optimizer state are deep-copied; ``history`` is copied as a list only
        (finished epoch records are never changed), so a snapshot per epoch costs the model's
        size, not the run's length."""
        payload = self._payload(epoch, model, optimizer, [])
        return {**copy.deepcopy(payload), "history": list(history)}

    def save(
        self,
        epoch: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        history: List[Dict[str, Any]],
    ) -> Path:
        return self.save_state(self._payload(epoch, model, optimizer, history))

    def _payload(
        self,
        epoch: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        history: List[Dict[str, Any]],
    ) -> Dict[str, Any]:
        return {
            "epoch": int(epoch),
            "plan_hash": self.plan_hash,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "history": history,
            "rng": torch.get_rng_state(),
            "settings": dict(self.settings),
            "pinned": dict(self.pinned),
        }

    def save_state(self, payload: Dict[str, Any]) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        epoch = int(payload["epoch"])
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getvalue()
        path = self.path(epoch)
        newest = self.candidates()[:1]
        kept = f" ({newest[0].name} is intact)" if newest and newest[0] != path else ""
        sidecar = path.with_suffix(".pt.sha1")
        fix = (
            "free space there or keep fewer checkpoints (train.keep_checkpoints), then resume with "
            f"train.resume=true{kept}."
        )
        with on_disk_full(self.directory, f"checkpoint {path.name}", len(data), fix):
            atomic_write_bytes(path, data)
            try:
                atomic_write_bytes(sidecar, hashlib.sha1(data).hexdigest().encode())
            except OSError:
                path.unlink(missing_ok=True)  # never a checkpoint without its checksum
                raise
        self.prune(keep_path=path)
        return path

    def prune(self, keep_path: Optional[Path] = None) -> List[Path]:
        """Remove all but the ``keep`` newest checkpoints (never ``keep_path``, the one just
        written)."""
        if self.keep <= 0:
            return []
        removed = []
        for old in self.candidates()[self.keep :]:
            if old == keep_path:
                continue
            for file in (old, old.with_suffix(".pt.sha1")):
                try:
                    file.unlink()
                except FileNotFoundError:
                    pass
            removed.append(old)
        return removed

    def remove_partial(self) -> List[Path]:
        """Remove the temp files of checkpoint writes that never finished (a rank 0 killed while it
        wrote one leaves ``.epoch_NNNNNN.pt.XXXX.tmp``, gnntrain.atomic's). Call it only while
        nothing writes here: before a resumed run trains (only rank 0 of one run writes here)."""
        removed = sorted(self.directory.glob(".epoch_*.tmp"))
        for path in removed:
            path.unlink(missing_ok=True)
        return removed

    def candidates(self) -> List[Path]:
        return sorted(self.directory.glob("epoch_*.pt"), reverse=True)

    def load_latest(self) -> Optional[Dict[str, Any]]:
        """The newest valid checkpoint, or None when there is none."""
        for path in self.candidates():
            state = self._read(path)
            if state is None:
                continue
            if state.get("plan_hash") != self.plan_hash:
                old, new = state.get("pinned") or {}, self.pinned
                keys = [
                    k
                    for k in sorted(set(old) | set(new))
                    if old and new and old.get(k) != new.get(k)
                ]
                # another mode: not its options
                renamed = {k.split(".")[0] for k in keys if k.endswith(".name")}
                differ = [
                    f"{k} {old.get(k)} -> {new.get(k)}"
                    for k in keys
                    if k.split(".")[0] not in renamed or k.endswith(".name")
                ]
                what = (
                    ("; ".join(differ[:6]) + ("; ..." if len(differ) > 6 else ""))
                    if differ
                    else "mode, dataset, model, partitioner, world size, dtype or seed differ"
                )
                raise CheckpointError(
                    f"checkpoint {path} was written by another plan (plan hash "
                    f"{state.get('plan_hash')}, this run "
                    f"{self.plan_hash}: {what}). A resume may change only "
                    f"{', '.join(RESUMABLE_SETTINGS)}. "
                    "Resume with the original values of the others, or start a new run directory."
                )
            return state
        return None

    @staticmethod
    def _read(path: Path) -> Optional[Dict[str, Any]]:
        sidecar = path.with_suffix(".pt.sha1")
        try:
            data = path.read_bytes()
        except OSError as exc:
            warnings.warn(f"skipping checkpoint {path}: {exc.strerror or exc}", stacklevel=2)
            return None
        try:
            expected = sidecar.read_text().strip()
        except (OSError, UnicodeDecodeError):
            warnings.warn(
                f"skipping checkpoint {path}: its checksum file {sidecar.name} is missing or "
                "unreadable",
                stacklevel=2,
            )
            return None
        if hashlib.sha1(data).hexdigest() != expected:
            warnings.warn(
                f"skipping checkpoint {path}: checksum mismatch (truncated or corrupt)",
                stacklevel=2,
            )
            return None
        try:
            return torch.load(io.BytesIO(data), weights_only=True)
        except Exception as exc:
            warnings.warn(
                f"skipping checkpoint {path}: cannot load it ({type(exc).__name__})", stacklevel=2
            )
            return None


# ------------------------------------------------------------- preemption
_preemption_hook: Optional[Callable[[], None]] = None


def set_preemption_hook(hook: Optional[Callable[[], None]]) -> None:
    """The training loop registers how to save its last completed epoch."""
    global _preemption_hook
    _preemption_hook = hook


def save_for_preemption() -> None:
    """Called from the SLURM launcher's checkpoint() when the job is preempted or times out."""
    if _preemption_hook is not None:
        _preemption_hook()


class PreemptionBoundary:
    """The state after the last completed epoch, saved if the SLURM job is preempted.

    submitit's USR2 handler (``SlurmLauncher.checkpoint``) runs in the main thread between
    any two bytecodes, so it can land in the middle of an update. Each new snapshot is
    therefore built aside and swapped in by one assignment: the handler sees either the
    previous epoch's state or the new one, never none. (Clearing the old state before
    copying the new one left most of every epoch with nothing to save; a preempted job then
    restarted from epoch 0.)"""

    def __init__(self, checkpointer: Checkpointer):
        self.checkpointer = checkpointer
        self._state: Optional[Dict[str, Any]] = None
        set_preemption_hook(self.save)

    def update(
        self,
        epoch: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        history: List[Dict[str, Any]],
    ) -> None:
        self._state = self.checkpointer.snapshot(epoch, model, optimizer, history)

    def save(self) -> Optional[Path]:
        state = self._state
        return self.checkpointer.save_state(state) if state is not None else None

    def close(self) -> None:
        set_preemption_hook(None)


def in_slurm_job() -> bool:
    """True inside a SLURM job, where submitit's signal handler may ask for a preemption
    checkpoint."""
    return "SLURM_JOB_ID" in os.environ


def run_checkpointer(cfg, run_dir: Optional[Path], plan_hash: str) -> Optional[Checkpointer]:
    """The run's Checkpointer when it writes or reads any (``train.checkpoint_every``, a resume,
    or a SLURM job that may be preempted), else None."""
    directory = checkpoint_dir(cfg, run_dir)
    if directory is None or not (
        int(cfg.train.checkpoint_every) or resume_requested(cfg) or in_slurm_job()
    ):
        return None
    return make_checkpointer(cfg, directory, plan_hash)


def make_checkpointer(cfg, directory: Path, plan_hash: str) -> Checkpointer:
    """A Checkpointer for this run's settings (retention, the settings a resume compares
    against)."""
    checkpointer = Checkpointer(
        directory, plan_hash, keep=int(cfg.train.get("keep_checkpoints", 0) or 0)
    )
    checkpointer.settings = current_settings(cfg)
    checkpointer.pinned = pinned_settings(cfg)
    return checkpointer


def preemption_boundary(
    checkpointer: Optional[Checkpointer], rank: int
) -> Optional[PreemptionBoundary]:
    """Rank 0's :class:`PreemptionBoundary` in a SLURM job; None elsewhere."""
    if checkpointer is None or rank != 0 or not in_slurm_job():
        return None
    return PreemptionBoundary(checkpointer)


def slurm_restarted() -> bool:
    """True in a SLURM job that was requeued (after preemption or a time-out)."""
    return os.environ.get("SLURM_RESTART_COUNT", "0") not in ("", "0")


def resume_requested(cfg) -> bool:
    return bool(cfg["train"]["resume"] or cfg.get("resume") or slurm_restarted())


def checkpoint_dir(cfg, run_dir: Optional[Path]) -> Optional[Path]:
    """Where this run reads and writes checkpoints: ``resume=DIR``'s, else the run directory's."""
    if cfg.get("resume"):
        return Path(str(cfg.resume)) / "checkpoints"
    return Path(run_dir) / "checkpoints" if run_dir is not None else None
