"""User-facing errors: each names the problem and the fix, and the CLI prints
it as one message (no traceback)."""


class GnnTrainError(Exception):
    """Base class for errors shown to users as one clear message."""


class PlanError(GnnTrainError):
    """An impossible or invalid run plan; raised before any process starts."""

    def __init__(self, option: str, rule: str, fix: str = ""):
        self.option, self.rule, self.fix = option, rule, fix
        super().__init__(f"{option}: {rule}" + (f" Fix: {fix}" if fix else ""))


class DatasetError(GnnTrainError):
    """A dataset that cannot be found or read."""


class Interrupted(GnnTrainError):
    """Ctrl-C or SIGTERM: the run stopped (summary.json says ``interrupted``)."""

    def __init__(self, signal: str, last_epoch: int):
        self.signal, self.last_epoch = signal, last_epoch
        super().__init__(f"interrupted by {signal}")

    @property
    def exit_code(self) -> int:
        return 143 if self.signal == "SIGTERM" else 130


class RankFailure(GnnTrainError):
    """A training rank raised, was killed or stopped answering."""
