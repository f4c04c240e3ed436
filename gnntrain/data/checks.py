"""Checks of a dataset config before anything is generated, loaded or sized.

A value no generator can use (a negative width, a ratio outside [0, 1], R-MAT
probabilities that do not sum to 1, ...) is refused with a PlanError naming
the option, instead of surfacing later as a numpy or torch traceback.
"""

from __future__ import annotations

import math
from typing import Any

from gnntrain.errors import PlanError

FRACTIONS = ("train_fraction", "val_fraction", "test_fraction")
TOLERANCE = 1e-6
# the widest a feature, class or target dimension (and model.hidden) may be: two of them multiply
# into a weight matrix's element count, which must fit int64 (torch sizes the model with it)
MAX_WIDTH = 2**31 - 1


def _number(ds, key: str) -> float:
    value = ds.get(key)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError(
            f"dataset.{key}", f"must be a number (got {value!r}).", f"set dataset.{key} to a number"
        ) from None
    if not math.isfinite(number):
        raise PlanError(
            f"dataset.{key}",
            f"must be a finite number (got {value}).",
            f"set dataset.{key} to a finite number",
        )
    return number


def _at_least(ds, key: str, low: int, why: str = "", high: int = 0) -> None:
    """``dataset.key`` is a whole number >= ``low`` (and <= ``high`` where given)."""
    value = _number(ds, key)
    if value < low or not float(value).is_integer():
        raise PlanError(
            f"dataset.{key}",
            f"must be a whole number >= {low} (got {ds.get(key)}){why}.",
            f"set dataset.{key}=N with N >= {low}",
        )
    if high and value > high:
        raise PlanError(
            f"dataset.{key}",
            f"must be at most {high} (got {ds.get(key)}).",
            f"set dataset.{key}=N with {low} <= N <= {high}",
        )


def _in_unit_interval(ds, key: str, what: str) -> float:
    value = _number(ds, key)
    if not 0.0 <= value <= 1.0:
        raise PlanError(
            f"dataset.{key}",
            f"{what} must lie in [0, 1] (got {ds.get(key)}).",
            f"set dataset.{key} to a value between 0 and 1",
        )
    return value


def check_common(ds: Any) -> None:
    """Refuse a dataset config no loader or generator can use; raises PlanError(option, problem,
    fix).

    Sizes (``num_nodes``, ``num_edges``, ``feat_dim``, ``num_classes``) are checked
    for every source (file-backed datasets use them to size the plan before
    loading), the seed and split fractions for generated graphs; each generator checks its own keys
    (:func:`gnntrain.data.check_dataset_config`).
    """
    _at_least(ds, "num_nodes", 1)
    _at_least(ds, "num_edges", 1)
    _at_least(ds, "feat_dim", 1, high=MAX_WIDTH)
    if ds.get("source") != "files":
        _at_least(ds, "num_classes", 2, "; node classification needs two classes", MAX_WIDTH)
    if ds.get("regression_targets") is not None:
        _at_least(ds, "regression_targets", 0, high=MAX_WIDTH)
    # an ingested graph may have no labels (num_classes 0: regression targets, or edges for link
    # prediction): task=node_classification on it is refused when its folder is read
    # (fill_file_sizes)
    if ds.get("source") != "generated":
        return
    _at_least(ds, "seed", 0)  # numpy's generators refuse negative seeds
    total = sum(_in_unit_interval(ds, key, "a split fraction") for key in FRACTIONS)
    if total > 1.0 + TOLERANCE:
        raise PlanError(
            "dataset.train_fraction/val_fraction/test_fraction",
            f"the split fractions sum to {total:g}; they must sum to at most 1.",
            "lower one of dataset.train_fraction, dataset.val_fraction, dataset.test_fraction",
        )
