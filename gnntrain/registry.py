"""Name → entry tables for the pluggable parts (modes, models, generators): one rule for all of
them.

A name is registered once. A second, different entry under a taken name is refused with one line
naming both, instead of silently replacing the first (two plugins picking the same name would
otherwise train whichever imported last). Registering the same entry again (a module imported
twice, e.g. reloaded) is a no-op.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Dict, Generic, Iterator, Optional, TypeVar

T = TypeVar("T")


class DuplicateNameError(ValueError):
    """A name registered twice with different entries."""


def _definition(entry: object) -> Optional[str]:
    """Where an entry's code was defined: a class's module and name; for a record (a dataclass such
    as ModelFamily or Generator), where the first class or function it holds was defined; None for
    a record of data alone (a named dataset's files), which has no definition to compare."""
    target = entry if isinstance(entry, type) else type(entry)
    if not isinstance(entry, type) and dataclasses.is_dataclass(entry):
        held = (getattr(entry, f.name) for f in dataclasses.fields(entry))
        target = next((v for v in held if isinstance(v, type) or inspect.isfunction(v)), None)
        if target is None:
            return None
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def _origin(entry: object) -> str:
    """Where an entry came from, for the duplicate's message."""
    kind = type(entry)
    return _definition(entry) or f"a {kind.__module__}.{kind.__qualname__} record"


def _same_entry(current: object, entry: object) -> bool:
    """``entry`` registers what ``current`` does: the same object, an equal record, or the same
    class or function defined again (a module imported twice, e.g. reloaded)."""
    if current is entry or current == entry:
        return True
    definition = _definition(entry)
    return definition is not None and definition == _definition(current)


class Registry(Generic[T]):
    """The entries of one kind by name (``kind`` names them in messages: "mode", "model", ...)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: Dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` as ``name``; a different entry under a taken name is refused."""
        current = self._entries.get(name)
        if current is not None and not _same_entry(current, entry):
            raise DuplicateNameError(
                f"{self.kind} '{name}' is registered twice: by {_origin(current)} and by "
                f"{_origin(entry)}. Give one of them another name."
            )
        self._entries[name] = entry
        return entry

    def require(self, name: str, option: str) -> T:
        """The entry ``name``; one PlanError on ``option`` naming the entries there are
        otherwise."""
        if name not in self._entries:
            from gnntrain.errors import PlanError

            raise PlanError(
                option,
                f"unknown {self.kind} '{name}'.",
                f"use one of {', '.join(sorted(self._entries))}",
            )
        return self._entries[name]

    def remove(self, name: str) -> None:
        """Forget ``name`` (a test's entry, registered for its duration)."""
        self._entries.pop(name, None)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str, default=None):
        return self._entries.get(name, default)

    def items(self):
        return self._entries.items()

    def keys(self):
        return self._entries.keys()

    def values(self):
        return self._entries.values()
