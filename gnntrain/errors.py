"""User-facing errors: each names the problem and the fix, and the CLI prints
it as one message (no traceback)."""

import unicodedata

# the Unicode categories a message shows as escapes: control, format, line and paragraph separators
UNPRINTED = ("Cc", "Cf", "Zl", "Zp")


def one_line(message: str) -> str:
    """``message`` with each control, format or line-separator character in it (a user's value it
    quotes: an ID, a cell, an override) written as its escape, so the message stays one line."""
    return "".join(
        c.encode("unicode_escape").decode() if unicodedata.category(c) in UNPRINTED else c
        for c in message
    )


class GnnTrainError(Exception):
    """Base class for errors shown to users as one clear message."""


class PlanError(GnnTrainError):
    """An impossible or invalid run plan; raised before any process starts."""

    def __init__(self, option: str, rule: str, fix: str = ""):
        self.option, self.rule, self.fix = option, rule, fix
        super().__init__(one_line(f"{option}: {rule}" + (f" Fix: {fix}" if fix else "")))


class DatasetError(GnnTrainError):
    """A dataset that cannot be found or read: one line, whatever value it quotes."""

    def __init__(self, message: str = ""):
        super().__init__(one_line(str(message)))


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


class DiskFullError(GnnTrainError):
    """A write that found its file system full (ENOSPC) or its quota spent (EDQUOT), said in one
    line: the folder, what was written, the bytes it needed, the bytes free there and the fix."""

    def __init__(
        self, folder: str, what: str, needed: int, free: int, fix: str, quota: bool = False
    ):
        self.folder, self.what, self.needed, self.free, self.fix = (
            str(folder),
            what,
            int(needed),
            int(free),
            fix,
        )
        reason = "disk quota exceeded" if quota else "no space left"
        super().__init__(
            f"{reason} in {folder}: {what} needs {int(needed)} bytes, {int(free)} are free there. "
            f"Fix: {fix}"
        )
