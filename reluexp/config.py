"""Typed config schema, normalized once where a config is made (options as their Enum members, a
hidden width as a list), each field with its meaning (Hydra knows the schema, and --help its
meanings, through hydra_glue; reluexp.validation checks the values)."""

import functools
import math
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from omegaconf import OmegaConf

from reluexp.options import (
    OPTION_SCHEMAS,
    ConstantConfig,
    DataConfig,
    ManualConfig,
    MLPConfig,
    ModelConfig,
    OptimizerConfig,
    RandomDataConfig,
    ScheduleConfig,
    foreign_keys,
    meaning,
    own_keys,
)

# The points a scalar tag TensorBoard keeps by default (its --samples_per_plugin), at random.
TENSORBOARD_POINTS = 1000


class ConfigError(ValueError):
    """A user's config value is out of range; the message is one line naming the key."""


class Dtype(str, Enum):
    """One of: float32, float64."""

    float32 = "float32"
    float64 = "float64"


class Precision(str, Enum):
    """fp32: every op in float32 (or dtype's float64); bf16 and fp16: the forward under
    torch.autocast to bfloat16 or float16 (CPU and CUDA), the loss, the weights, their
    gradients and every streamed value float32; fp16 with a gradient scaler (float16's range
    is narrow: the loss is scaled up for the backward, a step whose gradients overflow is
    skipped and the scale lowered)."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


def normalize(node: Any, prefix: str = "") -> None:
    """A config's values as the schema's types say, in place: an option given by its name
    (`"scaled"`) becomes its Enum member, a single hidden width a list of one. Done where a
    config is made and again when it is validated (a caller may have set a field since); a
    value that cannot be one is a ConfigError naming the key."""
    for schema_field in fields(node):
        kind, name = schema_field.type, schema_field.name
        value = getattr(node, name)
        if is_dataclass(kind) and (isinstance(value, str | Enum) or type(value) in OPTION_SCHEMAS):
            value = option_schema(kind, value, f"{prefix}{name}")
            setattr(node, name, value)
        if is_dataclass(kind):
            normalize(value, f"{prefix}{name}.")
        elif isinstance(kind, type) and issubclass(kind, Enum) and not isinstance(value, kind):
            try:
                setattr(node, name, kind(value))
            except ValueError:
                options = ", ".join(option.value for option in kind)
                raise ConfigError(f"{prefix}{name}={value!r}: expected one of {options}") from None
        elif f"{prefix}{name}" == "model.hidden":
            widths = list(value) if isinstance(value, list | tuple) else [value]
            if not widths or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in widths
            ):
                raise ConfigError(f"model.hidden={value!r}: expected an int or a list of ints")
            node.hidden = widths
        elif f"{prefix}{name}" == "schedule.milestones":
            steps = list(value) if isinstance(value, list | tuple) else [value]
            if not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
                raise ConfigError(
                    f"schedule.milestones={value!r}: expected an int or a list of ints (steps)"
                )
            node.milestones = steps


def option_schema(kind: type, value: Any, key: str) -> Any:
    """A group's node given by its option's name alone (`model="resnet"`), or as the base that
    every option of the group shares: the option's own schema (OPTION_SCHEMAS), its values
    kept."""
    if kind not in OPTION_SCHEMAS:
        return kind(name=value)
    names, schemas = OPTION_SCHEMAS[kind]
    given = asdict(value) if is_dataclass(value) else {"name": value}
    try:
        name = names(given["name"])
    except ValueError:
        options = ", ".join(option.value for option in names)
        raise ConfigError(f"{key}={given['name']!r}: expected one of {options}") from None
    return schemas[name](**{**given, "name": name})


# Defaults: the reference experiment's, for run() callers.


@dataclass
class ActivationConfig:
    name: str = field(
        default="myrelu",
        metadata=meaning(
            "The activation's name in run directories, summaries and reports (its "
            "conf/activation file)."
        ),
    )
    target: str | None = field(
        default="reluexp.functions.MyReLU",
        metadata=meaning(
            "Dotted path to an autograd Function, an nn.Module class or a plain function."
        ),
    )
    reference: str | None = field(
        default="torch.relu",
        metadata=meaning(
            "Dotted path to the built-in the activation imitates (optional: reluexp.check "
            "compares with it when given)."
        ),
    )
    params: dict[str, Any] = field(
        default_factory=dict,
        metadata=meaning(
            "Keyword arguments of the target (e.g. negative_slope); the reference and the "
            "surrogate get those they take. A custom activation's are new keys: "
            "+activation.params.x=1."
        ),
    )
    reference_params: dict[str, Any] = field(
        default_factory=dict,
        metadata=meaning(
            "Keyword arguments of the reference alone, beside the target's params it takes "
            "(a tanh GELU's reference: +activation.reference_params.approximate=tanh)."
        ),
    )
    surrogate: str | None = field(
        default=None,
        metadata=meaning(
            "Dotted path to the derivative the backward means to compute when it is "
            "deliberately not the forward's (a surrogate gradient: a spiking neuron's smooth "
            "stand-in for a step's 0), a Python function called with the input and the params it "
            "takes. reluexp.check checks the backward against it."
        ),
    )
    domain: list[float] | None = field(
        default=None,
        metadata=meaning(
            "[low, high]: where reluexp.check checks the Function (bounds included; inf for "
            "none), for one documented on part of the real line. Unset, the lab checks where "
            "the forward is finite."
        ),
    )


class Loss(str, Enum):
    """auto: the summed squared error for regression (the article's), cross-entropy (mean over
    the batch) for classification, as the data's targets say; mean_squared_error: the mean
    over the batch and the outputs, whose gradient does not grow with the data's size."""

    auto = "auto"
    squared_error = "squared_error"
    mean_squared_error = "mean_squared_error"
    cross_entropy = "cross_entropy"


@functools.cache
def default_cadence(steps: int, print_every: int) -> int:
    """The smallest spacing n of streamed steps (0, n, 2n, ...) at which they, the print steps
    (n-1 of every print_every: off that grid) and the last step are at most TENSORBOARD_POINTS,
    which TensorBoard's default sample keeps whole; where the print steps alone are more, the
    grid's own share (a step per ceil(steps / TENSORBOARD_POINTS))."""
    every = max(1, math.ceil(steps / TENSORBOARD_POINTS))
    prints = range(print_every - 1, steps, print_every)
    if len(prints) + 1 >= TENSORBOARD_POINTS:
        return every
    last_printed = bool(prints) and prints[-1] == steps - 1
    while True:
        off_grid = sum(1 for step in prints if step % every) + (
            (steps - 1) % every != 0 and not last_printed
        )
        if math.ceil(steps / every) + off_grid <= TENSORBOARD_POINTS:
            return every
        every += 1


@dataclass
class Config:
    activation: ActivationConfig = field(default_factory=ActivationConfig)
    data: DataConfig = field(default_factory=RandomDataConfig)
    model: ModelConfig = field(default_factory=MLPConfig)
    lr: float = field(default=1e-6, metadata=meaning("The learning rate."))
    steps: int = field(default=500, metadata=meaning("Training steps (one batch each)."))
    seed: int = field(
        default=42,
        metadata=meaning(
            "Seeds the data, the weights and the batch order: the same seed, the same run."
        ),
    )
    device: str = field(
        default="auto",
        metadata=meaning("cpu, cuda, cuda:N, mps, or auto (cuda when there is one, else cpu)."),
    )
    dtype: Dtype = field(
        default=Dtype.float32, metadata=meaning("The weights' and the data's floating-point type.")
    )
    precision: Precision = field(
        default=Precision.fp32, metadata=meaning("Mixed precision of the forward and the loss.")
    )
    optimizer: OptimizerConfig = field(default_factory=ManualConfig)
    schedule: ScheduleConfig = field(default_factory=ConstantConfig)
    loss: Loss = field(
        default=Loss.auto,
        metadata=meaning("The objective."),
    )
    eval_every: int = field(
        default=10,
        metadata=meaning(
            "Steps between validation passes, when the data has a validation split (and at "
            "the last)."
        ),
    )
    threads: int | None = field(
        default=None,
        metadata=meaning(
            "torch intra-op threads. null: torch's default (a thread per core) for a run, "
            "cores // n_jobs for each job of a joblib sweep, 1 for reluexp.check."
        ),
    )
    log_every: int | None = field(
        default=None,
        metadata=meaning(
            "Steps between the values streamed to TensorBoard (loss, gradient and weight "
            "norms; the print steps and the last always). Unset: every step up to 1,000 steps, "
            "beyond that every n-th, n the smallest at which these steps, the print steps and "
            "the last included, are at most 1,000, which TensorBoard's default sample keeps "
            "whole (with fewer than 1,000 print steps). A divergence is caught at the first "
            "streamed step after it."
        ),
    )
    print_every: int = field(
        default=100, metadata=meaning("Steps between the article's `step loss` lines on stdout.")
    )
    checkpoint_every: int = field(
        default=0,
        metadata=meaning("Steps between checkpoints (0: only at the end and on SIGINT/SIGTERM)."),
    )
    stop_on_divergence: bool = field(
        default=True,
        metadata=meaning(
            "A non-finite loss, gradient or weight ends the run as `diverged`; false records "
            "the step and trains on."
        ),
    )
    resume: str | None = field(
        default=None, metadata=meaning("A run directory to continue, with its own config.")
    )
    compile: bool = field(
        default=False,
        metadata=meaning(
            "torch.compile the forward and loss (and so their backward); numbers then differ "
            "slightly."
        ),
    )
    lab_seconds: float = field(
        default=60.0,
        metadata=meaning(
            "At a sweep's end, the lab checks each custom Function it trained (its report's lab "
            "column), for at most this many seconds each (`not checked: took longer than N s` "
            "past it); 0 checks none."
        ),
    )
    quiet: bool = field(
        default=False,
        metadata=meaning(
            "No progress and no loss lines (warnings, errors and the closing line remain)."
        ),
    )
    verbose: bool = field(
        default=False, metadata=meaning("Debug lines too (flushes, checkpoints).")
    )

    def __post_init__(self) -> None:
        normalize(self)

    @property
    def streamed_every(self) -> int:
        """Steps between streamed rows: log_every, or unset, as many as TensorBoard keeps."""
        return self.log_every or default_cadence(self.steps, self.print_every)

    def prints_at(self, step: int) -> bool:
        """The article prints `step loss` at steps 99, 199, ...: the last of every print_every."""
        return step % self.print_every == self.print_every - 1

    def streams_at(self, step: int) -> bool:
        """The step's metrics are streamed: every streamed_every-th step, the print steps
        (their lines come from the flushed rows) and the last."""
        return step % self.streamed_every == 0 or self.prints_at(step) or step == self.steps - 1


# The Config's groups whose options have a schema each, by name, with the base they share.
OPTION_GROUPS = {f.name: f.type for f in fields(Config) if f.type in OPTION_SCHEMAS}


def config_dict(config: Config) -> dict[str, Any]:
    """The config as plain JSON-ready values."""
    return asdict(
        config,
        dict_factory=lambda items: {k: v.value if isinstance(v, Enum) else v for k, v in items},
    )


def config_from_dict(values: dict[str, Any]) -> Config:
    """The inverse of config_dict(), type-checked against the schema (its options')."""
    schema = OmegaConf.structured(Config)
    values = dict(values)
    for group, base in OPTION_GROUPS.items():
        names, schemas = OPTION_SCHEMAS[base]
        given = {"name": getattr(schema, group).name, **(values.get(group) or {})}
        name = names(given["name"])
        setattr(schema, group, schemas[name](name=name))
        foreign = foreign_keys(base, given)
        if foreign:
            raise ConfigError(f"{group}.{foreign[0]}: no {group} option has it")
        values[group] = own_keys(base, given)
    return OmegaConf.to_object(OmegaConf.merge(schema, values))
