"""The model registry: every model is one module in ``gnntrain/models/`` that registers a
:class:`ModelFamily` (its layer class and what the modes need to know of it), plus one
``configs/model/<name>.yaml``.

The modes never switch on a model's name; they ask its family:

* ``normalization``: how neighbours are weighted (``gcn``: D^-1/2 (A+I) D^-1/2; ``mean``:
  1/in-degree; ``sum``), always as the two row scales around an unweighted SpMM;
* ``linear``: aggregation and weights commute, so a layer may aggregate its narrower side
  (the aggregate-first rule, :func:`gnntrain.sizing.aggregates_first`);
* ``elementwise``: the aggregation is a weighted sum of rows, so it splits by feature columns
  (MoP), samples (HyScale) and caches (HongTu recomputes only the update); attention is not;
* ``self_row``: the update reads the destination's own input row (HongTu keeps it);
* ``restructurable``: the layer follows the built-in layer protocol closely enough that the
  modes which re-lay out the aggregation (MoP, HongTu, HyScale) may host it.

:func:`describe_model` is the one model-shape table (exchanged widths per layer, parameter
bytes, update multiply-adds per row) that the plan, the cost models and HongTu read: it builds
one throwaway layer per depth on the meta device, so the figures are the layers' own.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from omegaconf import MISSING

from gnntrain.config.schema import ModelConfig
from gnntrain.errors import PlanError
from gnntrain.registry import Registry

EMPTY: Mapping[str, Any] = MappingProxyType({})
# the mode sets these constructor arguments (its layer order), not the model's options
MODE_SET_ARGUMENTS = ("aggregate_first",)


@dataclass(frozen=True)
class ModelFamily:
    """A model: its layer class and what the modes need to know of it.

    The layer is built as ``layer(d_in, d_out, **options)``. Its constructor's arguments after the
    two widths are the model's own options (PyG's rule: options are constructor arguments):
    ``model.<arg>`` in the config, typed and defaulted by the signature (:meth:`options_schema`),
    with nothing in the shared :class:`~gnntrain.config.schema.ModelConfig`. ``aggregate_first``,
    where a layer takes it, is the mode's layer order."""

    name: str
    layer: Callable[..., Any]  # the layer class (an nn.Module)
    normalization: str  # gcn | mean | sum
    linear: bool = False
    elementwise: bool = True
    self_row: bool = False
    restructurable: bool = True
    description: str = ""

    def option_parameters(self) -> Dict[str, inspect.Parameter]:
        """The layer's own options: its constructor's arguments after ``d_in, d_out``, less the
        mode's."""
        parameters = list(inspect.signature(self.layer).parameters.values())[2:]
        return {
            p.name: p
            for p in parameters
            if p.name not in MODE_SET_ARGUMENTS and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }

    def options_schema(self) -> type:
        """``ModelConfig`` plus one field per layer option, typed and defaulted as the constructor
        says: what ``configs/model/<name>.yaml`` extends (``<name>_schema``), so a misspelt or
        mistyped ``model.<option>`` is refused when the config composes."""
        hints = typing.get_type_hints(self.layer.__init__)
        fields = [
            (
                name,
                hints.get(name, Any),
                dataclasses.field(default=MISSING if p.default is p.empty else p.default),
            )
            for name, p in self.option_parameters().items()
        ]
        return dataclasses.make_dataclass(
            f"{self.name.title()}ModelConfig", fields, bases=(ModelConfig,)
        )

    def build(
        self,
        d_in: int,
        d_out: int,
        aggregate_first: Optional[bool] = None,
        options: Mapping[str, Any] = EMPTY,
    ) -> Any:
        """One layer from ``d_in`` to ``d_out``: ``options`` are the model's (those the layer
        takes), ``aggregate_first`` the mode's layer order (None: aggregate unless the layer
        narrows)."""
        kwargs = {name: options[name] for name in self.option_parameters() if name in options}
        if "aggregate_first" in inspect.signature(self.layer).parameters:
            kwargs["aggregate_first"] = aggregate_first
        return self.layer(int(d_in), int(d_out), **kwargs)

    def check_options(self, options: Mapping[str, Any]) -> None:
        """One PlanError naming ``model.<option>`` where the layer refuses a value (it raises
        ValueError)."""
        import torch

        try:
            with torch.device("meta"):
                self.build(4, 4, None, options)
        except ValueError as exc:
            named = next((n for n in self.option_parameters() if n in str(exc)), None)
            raise PlanError(f"model.{named}" if named else "model", str(exc)) from None


NORMALIZATIONS = ("gcn", "mean", "sum")
MODEL_REGISTRY: Registry[ModelFamily] = Registry("model")


def register_model(family: ModelFamily) -> ModelFamily:
    if family.normalization not in NORMALIZATIONS:
        raise ValueError(
            f"model {family.name}: normalization {family.normalization!r} is not one of "
            f"{NORMALIZATIONS}"
        )
    from hydra.core.config_store import ConfigStore

    MODEL_REGISTRY.add(family.name, family)
    ConfigStore.instance().store(
        group="model", name=f"{family.name}_schema", node=family.options_schema()
    )
    return family


def model_family(name: str, target: Optional[str] = None) -> ModelFamily:
    """The family of model ``name`` (``custom``: the user's layer class ``target``); one PlanError
    otherwise."""
    # the user's layer class, weighted by its normalization; the modes that re-lay out
    if name == "custom":
        # the aggregation (not restructurable) refuse it
        from gnntrain.models.custom import resolve_layer_class

        cls = resolve_layer_class(target)
        return ModelFamily(
            name="custom",
            layer=lambda d_in, d_out: cls(d_in, d_out),
            normalization=cls.normalization,
            restructurable=False,
            description=str(target),
        )
    if name not in MODEL_REGISTRY:
        raise PlanError(
            "model",
            f"unknown model '{name}'.",
            f"use one of {', '.join(sorted(MODEL_REGISTRY))}, or model=custom "
            "model.target=pkg.module.Class (your own)",
        )
    return MODEL_REGISTRY[name]


@dataclass(frozen=True)
class ModelShape:
    """A model's figures at given widths: what every estimate reads."""

    widths: Tuple[int, ...]  # the width each layer hands to its aggregation (what a halo carries)
    grad_widths: Tuple[int, ...]  # those of the layers whose exchanged tensor has a gradient
    param_bytes: int
    update_macs: Tuple[int, ...]  # multiply-adds of each layer's dense update, per row


def describe_model(
    family: ModelFamily,
    dims: Sequence[int],
    dtype_bytes: int,
    preference: Optional[bool] = None,
    norm: str = "none",
    options: Mapping[str, Any] = EMPTY,
) -> ModelShape:
    """The model's :class:`ModelShape`, from one layer per depth built on the meta device (no
    memory, no random draws). Update MACs per row: the 2-D parameters' elements (each weight matrix
    is one multiply-add per entry per row)."""
    import torch

    widths, macs, params, aggregates_input = [], [], 0, True
    with torch.device("meta"):
        for d_in, d_out in zip(dims[:-1], dims[1:]):
            layer = family.build(int(d_in), int(d_out), preference, options)
            widths.append(int(layer.comm_width()))
            params += sum(p.numel() for p in layer.parameters())
            macs.append(sum(p.numel() for p in layer.parameters() if p.dim() >= 2))
            # a layer says whether it aggregates its input; else: its width tells
            if len(widths) == 1:
                aggregates_input = bool(getattr(layer, "aggregate_first", widths[0] == dims[0]))
    if norm == "layer":
        # LayerNorm's weight and bias on every hidden layer
        params += sum(2 * d for d in dims[1:-1])
    # aggregating the input features: nothing flows back through them
    first_has_grad = not aggregates_input
    grads = [w for i, w in enumerate(widths) if i > 0 or first_has_grad]
    return ModelShape(tuple(widths), tuple(grads), params * dtype_bytes, tuple(macs))


def configured_shape(
    settings, dims: Sequence[int], dtype_bytes: int = 8, aggregate_first: Optional[bool] = None
) -> ModelShape:
    """The run's configured model (``settings``: :class:`~gnntrain.plan_types.RunSettings`) at
    widths ``dims`` in the layer order ``aggregate_first`` (a mode's): the one model-shape table the
    plan and the estimates read."""
    from gnntrain.config.schema import option_value

    m = settings.model
    return describe_model(
        model_family(m.name, m.target),
        dims,
        dtype_bytes,
        aggregate_first,
        str(option_value(m.norm)),
        settings.model_options,
    )


def graph_dims(settings, data) -> List[int]:
    """The configured model's widths on the loaded graph ``data``: [F, hidden, ..., classes]."""
    from gnntrain.sizing import model_dims

    m = settings.model
    return model_dims(data.features.shape[1], int(m.hidden), data.num_classes, int(m.layers))


def exchanged_widths(
    settings, data, aggregate_first: Optional[bool] = None
) -> Tuple[List[int], List[int]]:
    """(the width each layer communicates, those of the layers that also move it backward) on
    ``data`` in the layer order ``aggregate_first``: what a plan's context holds once the graph is
    known."""
    shape = configured_shape(settings, graph_dims(settings, data), 8, aggregate_first)
    return list(shape.widths), list(shape.grad_widths)
