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


class RankFailure(GnnTrainError):
    """A training rank raised, was killed or stopped answering."""
