"""The plan's checks of the settings every mode shares (dataset, training, model, port, hardware
profile, trackers): one :class:`~gnntrain.errors.PlanError` naming the option, before any mode is
asked anything (:func:`gnntrain.plan.build_plan`'s first step)."""

from __future__ import annotations

import socket

from omegaconf import DictConfig

from gnntrain.config.schema import unknown_keys
from gnntrain.data.checks import MAX_WIDTH
from gnntrain.errors import PlanError
from gnntrain.modes.cost import check_profile


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


def refuse_appended_keys(cfg: DictConfig) -> None:
    """A key appended with +key=value onto a structured config: nothing would read it."""
    extra = unknown_keys(cfg)
    if not extra:
        return
    import difflib

    key, valid = extra[0]
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], valid, n=3)
    parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
    hint = (
        f"did you mean {', '.join(parent + c for c in close)}?"
        if close
        else f"valid keys there: {', '.join(valid)}"
    )
    raise PlanError(
        key,
        "is not an option (appended with +, it would be ignored).",
        f"{hint} Set existing keys without '+'.",
    )


MAX_LAYERS = (
    10_000  # model.layers: the plan sizes each one (100 000 took 12 s; 2^31 ran out of memory)
)


def check_shared_settings(cfg: DictConfig) -> None:
    """The settings every mode shares: dataset, training, model, port and hardware (one PlanError
    naming the option)."""
    from gnntrain.data import check_dataset_config
    from gnntrain.data.sources import dataset_source
    from gnntrain.metrics.trackers import check_installed

    refuse_appended_keys(cfg)
    t, m, hw, ds = cfg.train, cfg.model, cfg.hardware, cfg.dataset
    fill_sizes = dataset_source(ds).fill_sizes
    if fill_sizes is not None:
        fill_sizes(cfg)  # e.g. an ingested graph's own sizes, before anything is sized or checked
    check_dataset_config(ds)  # sizes, ratios and fractions a generator or the estimates can use
    check_training(t)
    if int(m.layers) < 1 or int(m.hidden) < 1:
        raise PlanError("model.layers/model.hidden", "must both be at least 1.")
    # the plan describes every layer (gnntrain.models.registry.describe_model): bounded work
    if int(m.layers) > MAX_LAYERS or int(m.hidden) > MAX_WIDTH:
        raise PlanError(
            "model.layers/model.hidden",
            f"at most {MAX_LAYERS} layers of at most {MAX_WIDTH} columns (got {m.layers} x "
            f"{m.hidden}).",
            "set model.layers and model.hidden within those bounds",
        )
    if not 0.0 <= float(m.dropout) < 1.0:
        raise PlanError("model.dropout", f"must lie in [0, 1) (got {m.dropout}).")
    if not 0 <= int(cfg.port) <= 65535:
        raise PlanError(
            "port", f"{cfg.port} is outside 0..65535.", "use port=0 to pick a free port"
        )
    if int(cfg.port) and port_in_use(int(cfg.port)):
        raise PlanError(
            "port",
            f"port {cfg.port} is already in use on this host.",
            "use port=0 to pick a free port, or free that port",
        )
    if float(cfg.comm_timeout_s) <= 0:
        raise PlanError("comm_timeout_s", "must be > 0 seconds.")
    if int(hw.nodes) < 1 or int(hw.ranks_per_node) < 1:
        raise PlanError(
            "hardware.nodes/hardware.ranks_per_node",
            f"world size must be at least 1 (got {hw.nodes} x {hw.ranks_per_node}).",
            "set hardware.ranks_per_node=N with N >= 1",
        )
    check_profile(hw)
    check_installed(cfg)


def check_training(t) -> None:
    if int(t.epochs) < 1:
        raise PlanError(
            "train.epochs",
            f"must be at least 1 (got {t.epochs}).",
            "set train.epochs=N with N >= 1",
        )
    if float(t.lr) <= 0:
        raise PlanError(
            "train.lr",
            f"learning rate must be > 0 (got {t.lr}).",
            "set train.lr to a positive value",
        )
    if float(t.weight_decay) < 0:
        raise PlanError("train.weight_decay", f"must be >= 0 (got {t.weight_decay}).")
    if int(t.eval_every) < 1:
        raise PlanError("train.eval_every", f"must be at least 1 (got {t.eval_every}).")
    if int(t.checkpoint_every) < 0:
        raise PlanError("train.checkpoint_every", f"must be >= 0 (got {t.checkpoint_every}).")
    if int(t.get("keep_checkpoints", 0)) < 0:
        raise PlanError(
            "train.keep_checkpoints", f"must be >= 0 (got {t.keep_checkpoints}; 0 keeps every one)."
        )
