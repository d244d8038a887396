"""The config's checks: a composed config's keys against the schema (task_config), and every
value against what it may be, one ConfigError naming the key (the schema, in reluexp.config,
says what each key is; these say what it may be)."""

import copy
import difflib
import math
from collections.abc import Iterable, Iterator
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from reluexp.config import Config, ConfigError, Dtype, Precision, normalize
from reluexp.options import (
    AdamConfig,
    DataName,
    ModelName,
    Optimizer,
    SGDConfig,
    StepConfig,
)

MAX_INT32 = 2**31 - 1


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r}: {allowed}")


def validate(config: Config) -> None:
    """The config normalized, then the range checks the schema's types cannot express."""
    normalize(config)
    _require(
        config.activation.target is not None,
        "activation.target",
        None,
        "required: a dotted path such as pkg.module.Name",
    )
    domain = config.activation.domain
    if domain is not None:
        _require(
            len(domain) == 2 and not math.isnan(domain[0]) and domain[0] < domain[1],
            "activation.domain",
            list(domain),
            "expected [low, high] with low < high (inf for no bound)",
        )
    data = config.data
    if data.name == DataName.random:
        for key in ("n", "d_in", "d_out"):
            value = getattr(data, key)
            _require(value >= 1, f"data.{key}", value, "must be >= 1")
    if data.name == DataName.file:
        _require(data.path is not None, "data.path", None, "required with data=file: a .npz or .pt")
    if data.name == DataName.callable:
        _require(data.loader is not None, "data.loader", None, "required: pkg.module.function")
    if data.batch_size is not None:
        _require(data.batch_size >= 1, "data.batch_size", data.batch_size, "must be >= 1 (or null)")
        if data.name == DataName.random:  # other data is checked once read (data.check_split)
            _require(
                data.batch_size <= data.n,
                "data.batch_size",
                data.batch_size,
                f"more than the data.n={data.n} examples (null: the full batch)",
            )
    fraction = getattr(data, "val_fraction", 0.5)  # CIFAR brings its validation split
    _require(0 < fraction < 1, "data.val_fraction", fraction, "must be between 0 and 1")
    _require(config.eval_every >= 1, "eval_every", config.eval_every, "must be >= 1")
    _require(
        math.isfinite(config.lab_seconds) and config.lab_seconds >= 0,
        "lab_seconds",
        config.lab_seconds,
        "must be finite and >= 0",
    )
    for width in getattr(config.model, "hidden", []):  # model=custom has none
        _require(width >= 1, "model.hidden", config.model.hidden, "every width must be >= 1")
    if config.model.name == ModelName.resnet:
        depth = config.model.depth
        _require(
            depth >= 8 and (depth - 2) % 6 == 0,
            "model.depth",
            depth,
            "must be 6n + 2 for n >= 1: 20, 32, 44, 56, 110 (He et al. 2016)",
        )
    if config.model.name == ModelName.custom:
        _require(
            config.model.target is not None,
            "model.target",
            None,
            "required with model=custom: the dotted path of a function returning an nn.Module",
        )
    _require(math.isfinite(config.lr) and config.lr > 0, "lr", config.lr, "must be finite and > 0")
    validate_update(config)
    precision = f"precision={config.precision.value}"
    if config.precision != Precision.fp32 and config.dtype != Dtype.float32:
        raise ConfigError(f"{precision}: mixed precision keeps float32 weights: dtype=float32")
    if config.precision == Precision.fp16 and config.optimizer.name == Optimizer.manual:
        raise ConfigError(
            f"{precision}: its gradient scaler steps a torch optimizer: optimizer=sgd or "
            "optimizer=adam"
        )
    _require(config.steps >= 0, "steps", config.steps, "must be >= 0")
    _require(
        config.log_every is None or config.log_every >= 1,
        "log_every",
        config.log_every,
        "must be >= 1 (or null: as many rows as TensorBoard keeps)",
    )
    _require(config.print_every >= 1, "print_every", config.print_every, "must be >= 1")
    _require(
        config.checkpoint_every >= 0, "checkpoint_every", config.checkpoint_every, "must be >= 0"
    )
    if config.threads is not None:
        _require(config.threads >= 1, "threads", config.threads, "must be >= 1 (or null)")
        _require(config.threads <= MAX_INT32, "threads", config.threads, f"at most {MAX_INT32}")
    # torch.Generator.manual_seed takes what fits in 64 bits, signed or not.
    _require(-(2**63) <= config.seed < 2**64, "seed", config.seed, "must fit in 64 bits")


def validate_update(config: Config) -> None:
    """The optimizer's settings and the schedule's, each option's keys (its schema says which
    it has) against what they may be."""
    optimizer, schedule = config.optimizer, config.schedule
    if isinstance(optimizer, SGDConfig):
        _require(
            0 <= optimizer.momentum < 1,
            "optimizer.momentum",
            optimizer.momentum,
            "must be in [0, 1)",
        )
        _require(
            not optimizer.nesterov or optimizer.momentum > 0,
            "optimizer.nesterov",
            True,
            "needs optimizer.momentum > 0",
        )
    if isinstance(optimizer, SGDConfig | AdamConfig):
        _require(
            math.isfinite(optimizer.weight_decay) and optimizer.weight_decay >= 0,
            "optimizer.weight_decay",
            optimizer.weight_decay,
            "must be finite and >= 0",
        )
        _require(
            not optimizer.decay_all or optimizer.weight_decay > 0,
            "optimizer.decay_all",
            True,
            "decays nothing without weight decay: optimizer.weight_decay=1e-4, say",
        )
    _require(
        0 <= schedule.warmup < max(config.steps, 1),
        "schedule.warmup",
        schedule.warmup,
        f"must be from 0 to steps - 1 ({config.steps - 1})",
    )
    if isinstance(schedule, StepConfig):
        _require(0 < schedule.gamma <= 1, "schedule.gamma", schedule.gamma, "must be in (0, 1]")
        # Milestones past the last step are never reached: a shortened run of a preset still
        # runs.
        _require(
            schedule.milestones == sorted(set(schedule.milestones))
            and all(m > 0 for m in schedule.milestones),
            "schedule.milestones",
            schedule.milestones,
            "must be increasing steps from 1 on",
        )


# Where a new key means something: a target's and a reference's keyword arguments, which
# their own signatures check (functions/targets.py).
OPEN_KEYS = ("activation.params", "activation.reference_params")
# Groups chosen at the top of the config whose name is no key of the schema.
TOP_GROUPS = ("experiment",)


def close_match(key: str, candidates: Iterable[str]) -> str | None:
    """The candidate a mistyped key most likely meant (`activaton` -> `activation`)."""
    matches = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def unread_keys(
    node: DictConfig, schema: type = Config, prefix: str = ""
) -> Iterator[tuple[str, str | None]]:
    """Keys of a composed config that no field of the schema reads (one added with Hydra's `+`,
    such as `+activaton=relu`), dotted, each with the key it most likely meant."""
    schema_fields = {field.name: field.type for field in fields(schema)}
    for key in node:
        dotted = f"{prefix}{key}"
        if key not in schema_fields:
            match = close_match(str(key), schema_fields)
            yield dotted, match and f"{prefix}{match}"
        elif is_dataclass(schema_fields[key]) and isinstance(node[key], DictConfig):
            # A model option's own schema, where the composed node has one.
            kind = OmegaConf.get_type(node[key])
            kind = kind if is_dataclass(kind) else schema_fields[key]
            yield from unread_keys(node[key], kind, f"{dotted}.")


def task_config(cfg: DictConfig) -> Config:
    """The typed task config: the composed config without its `hydra` node. A key that nothing
    reads is a ConfigError naming it: it would change nothing, and the run would be the
    default's."""
    cfg = copy.deepcopy(cfg)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    unread = next(unread_keys(cfg), None)
    if unread is not None:
        key, match = unread
        raise ConfigError(
            f"{key}: no such key, so nothing would read it"
            + (f"; did you mean {match}?" if match else "")
            + f" (only {' and '.join(OPEN_KEYS)} take new keys)"
        )
    return OmegaConf.to_object(cfg)


def config_keys(node: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted key of a plain config (OmegaConf.to_container's), nodes and leaves."""
    for key, value in node.items():
        yield f"{prefix}{key}"
        if isinstance(value, dict):
            yield from config_keys(value, f"{prefix}{key}.")
