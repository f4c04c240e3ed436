"""The rank-side trainer: the one epoch loop every mode's strategy runs under, and predict."""

from gnntrain.training.loop import EpochLoop, train_rank

__all__ = ["EpochLoop", "train_rank"]
