"""Typed config schema and its range checks (Hydra knows the schema through hydra_glue)."""

import math
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from omegaconf import OmegaConf


class ConfigError(ValueError):
    """A user's config value is out of range; the message is one line naming the key."""


class Dtype(str, Enum):
    float32 = "float32"
    float64 = "float64"


class Optimizer(str, Enum):
    # The seed's `w -= lr * w.grad`; torch.optim.SGD rounds differently, so it is its own option.
    manual = "manual"
    sgd = "sgd"
    adam = "adam"


@dataclass
class ActivationConfig:
    # Defaults: the reference experiment's (conf/activation/myrelu.yaml), for train.run() callers.
    name: str = "myrelu"
    # Dotted path to an autograd Function, an nn.Module class or a plain function.
    target: str | None = "reluexp.functions.MyReLU"
    # Dotted path to the built-in the activation imitates.
    reference: str | None = "torch.relu"
    # Keyword arguments for the target and the reference alike (e.g. negative_slope).
    params: dict[str, Any] = field(default_factory=dict)
    # Dotted path to the derivative the backward means to compute when it is deliberately not the
    # forward's (a surrogate gradient: a spiking neuron's smooth stand-in for a step's 0); called
    # with the input and the params. reluexp.check checks the backward against it.
    surrogate: str | None = None


class DataName(str, Enum):
    # The article's random regression; scikit-learn's bundled 8x8 digits; a file of the user's
    # (.npz or .pt with x, y, optionally x_val, y_val); a function of the user's returning them.
    random = "random"
    digits = "digits"
    file = "file"
    callable = "callable"


@dataclass
class DataConfig:
    name: DataName = DataName.random
    # The random data's sizes (the others bring their own).
    n: int = 64
    d_in: int = 1000
    d_out: int = 10
    # data=file: the path of a .npz or .pt; data=callable: the dotted path of the function.
    path: str | None = None
    loader: str | None = None
    # Examples per step, a new seeded order each epoch; null: the full batch every step.
    batch_size: int | None = None
    # Held out for validation, fixed by the seed, when the data brings no validation split.
    val_fraction: float = 0.2


class Loss(str, Enum):
    # auto: the summed squared error for regression (the article's), cross-entropy (mean over
    # the batch) for classification, as the data's targets say.
    auto = "auto"
    squared_error = "squared_error"
    cross_entropy = "cross_entropy"


class Init(str, Enum):
    # The seed's torch.randn weights; `scaled` multiplies them by sqrt(2 / fan_in).
    randn = "randn"
    scaled = "scaled"


@dataclass
class ModelConfig:
    # An int (one hidden layer) or a list of ints (a deeper MLP); checked by validate().
    hidden: Any = 100
    init: Init = Init.randn
    # A bias per layer (zeros at the start), trained with the weights; the article has none.
    bias: bool = False


@dataclass
class Config:
    activation: ActivationConfig = field(default_factory=ActivationConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    lr: float = 1e-6
    steps: int = 500
    seed: int = 42
    device: str = "auto"
    dtype: Dtype = Dtype.float32
    optimizer: Optimizer = Optimizer.manual
    loss: Loss = Loss.auto
    # Steps between validation passes, when the data has a validation split (and at the last).
    eval_every: int = 10
    # torch intra-op threads; None keeps torch's default.
    threads: int | None = None
    log_every: int = 1
    print_every: int = 100
    # Steps between checkpoints (0: only at the end and on SIGINT/SIGTERM).
    checkpoint_every: int = 0
    # A non-finite loss ends the run as `diverged`; false records the step and trains on.
    stop_on_divergence: bool = True
    # A run directory to continue, with its own config.
    resume: str | None = None
    # torch.compile the forward and loss (and so their backward); numbers then differ slightly.
    compile: bool = False
    # quiet: no progress and no loss lines (warnings, errors and the closing line remain);
    # verbose: debug lines too (flushes, checkpoints).
    quiet: bool = False
    verbose: bool = False

    def prints_at(self, step: int) -> bool:
        """The article prints `step loss` at steps 99, 199, ...: the last of every print_every."""
        return step % self.print_every == self.print_every - 1


MAX_INT32 = 2**31 - 1


def hidden_sizes(hidden: Any) -> list[int]:
    """`model.hidden` as a list of layer widths."""
    sizes = list(hidden) if isinstance(hidden, list | tuple) else [hidden]
    if not sizes or not all(isinstance(h, int) and not isinstance(h, bool) for h in sizes):
        raise ConfigError(f"model.hidden={hidden!r}: expected an int or a list of ints")
    return sizes


def layer_sizes(config: Config) -> list[int]:
    """Widths from input to output: d_in, the hidden widths, d_out."""
    return [config.data.d_in, *hidden_sizes(config.model.hidden), config.data.d_out]


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r}: {allowed}")


def validate(config: Config) -> None:
    """Range checks the schema's types cannot express."""
    _require(
        config.activation.target is not None,
        "activation.target",
        None,
        "required: a dotted path such as pkg.module.Name",
    )
    for key in ("n", "d_in", "d_out"):
        value = getattr(config.data, key)
        _require(value >= 1, f"data.{key}", value, "must be >= 1")
    data = config.data
    if data.name == DataName.file:
        _require(data.path is not None, "data.path", None, "required with data=file: a .npz or .pt")
    if data.name == DataName.callable:
        _require(data.loader is not None, "data.loader", None, "required: pkg.module.function")
    if data.batch_size is not None:
        _require(data.batch_size >= 1, "data.batch_size", data.batch_size, "must be >= 1 (or null)")
    _require(
        0 < data.val_fraction < 1, "data.val_fraction", data.val_fraction, "must be between 0 and 1"
    )
    _require(config.eval_every >= 1, "eval_every", config.eval_every, "must be >= 1")
    for width in hidden_sizes(config.model.hidden):
        _require(width >= 1, "model.hidden", config.model.hidden, "every width must be >= 1")
    _require(math.isfinite(config.lr) and config.lr > 0, "lr", config.lr, "must be finite and > 0")
    _require(config.steps >= 0, "steps", config.steps, "must be >= 0")
    _require(config.log_every >= 1, "log_every", config.log_every, "must be >= 1")
    _require(config.print_every >= 1, "print_every", config.print_every, "must be >= 1")
    _require(config.dtype in set(Dtype), "dtype", config.dtype, "expected float32 or float64")
    _require(
        config.optimizer in set(Optimizer),
        "optimizer",
        config.optimizer,
        "expected manual, sgd or adam",
    )
    _require(
        config.checkpoint_every >= 0, "checkpoint_every", config.checkpoint_every, "must be >= 0"
    )
    if config.threads is not None:
        _require(config.threads >= 1, "threads", config.threads, "must be >= 1 (or null)")
        _require(config.threads <= MAX_INT32, "threads", config.threads, f"at most {MAX_INT32}")
    # torch.Generator.manual_seed takes what fits in 64 bits, signed or not.
    _require(-(2**63) <= config.seed < 2**64, "seed", config.seed, "must fit in 64 bits")


def config_dict(config: Config) -> dict[str, Any]:
    """The config as plain JSON-ready values."""
    return asdict(
        config,
        dict_factory=lambda items: {k: v.value if isinstance(v, Enum) else v for k, v in items},
    )


def config_from_dict(values: dict[str, Any]) -> Config:
    """The inverse of config_dict(), type-checked against the schema."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), values))
