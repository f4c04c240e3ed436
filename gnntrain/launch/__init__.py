"""Launch layer: local spawning, torchrun/SLURM rank identity, watchdog."""
from gnntrain.launch.launcher import external_identity, find_free_port, preflight, run_training

__all__ = ["external_identity", "find_free_port", "preflight", "run_training"]
