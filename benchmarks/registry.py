"""The suites by name: ``@suite("name")`` registers a function ``(quick: bool) -> SuiteResult``.

The suite modules register themselves when ``benchmarks.suites`` is imported
(``benchmarks.__main__`` does that, in one place); this module imports none of them.
"""

from __future__ import annotations

from typing import Callable, Dict

from benchmarks.harness import SuiteResult

SuiteFn = Callable[[bool], SuiteResult]
SUITES: Dict[str, SuiteFn] = {}


def suite(name: str) -> Callable[[SuiteFn], SuiteFn]:
    """Register the decorated function as suite ``name`` (run by ``python -m benchmarks name``)."""

    def register(fn: SuiteFn) -> SuiteFn:
        if name in SUITES:
            raise ValueError(f"benchmark suite {name!r} is registered twice")
        SUITES[name] = fn
        return fn

    return register
