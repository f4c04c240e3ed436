"""Hydra plugin namespace (Hydra only instantiates launchers from hydra_plugins.*).

The ``hydra/launcher=slurm`` preset's launcher: hydra-submitit-launcher's
SlurmLauncher, with submission failures (no controller, bad config, sbatch
missing) reported as one line naming the launcher and the cause."""

from __future__ import annotations

import contextlib
import io
import sys

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
    SlurmLauncher as _SubmititSlurmLauncher,
)


def one_line_cause(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "fatal" in line.lower()]
    picked = errors[-2:] if errors else lines[-1:]
    return " / ".join(picked)


class SlurmLauncher(_SubmititSlurmLauncher):
    def checkpoint(self, *args, **kwargs):
        """Preemption or time-out (submitit's signal handler, task 0): save the last completed
        epoch, then let submitit requeue the same job, which resumes from it
        (SLURM_RESTART_COUNT)."""
        from gnntrain.checkpoint import save_for_preemption

        save_for_preemption()
        return super().checkpoint(*args, **kwargs)

    def launch(self, job_overrides, initial_job_idx):  # type: ignore[override]
        echoed = io.StringIO()
        try:
            # submitit echoes sbatch's stderr as it runs; keep it, and show it only as the one-line
            # cause
            with contextlib.redirect_stderr(echoed):
                return super().launch(job_overrides, initial_job_idx)
        except Exception as exc:  # submitit's FailedJobError, FileNotFoundError for sbatch, ...
            from rich.console import Console
            from rich.markup import escape

            Console(stderr=True, soft_wrap=True).print(
                f"[bold red]error:[/bold red] hydra/launcher=slurm could not submit the sweep: "
                f"{escape(one_line_cause(exc))}"
            )
            sys.exit(1)
        finally:
            sys.stderr.write(
                "".join(
                    line
                    for line in echoed.getvalue().splitlines(keepends=True)
                    if "error" not in line.lower() and "fatal" not in line.lower()
                )
            )
