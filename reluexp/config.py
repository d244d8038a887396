"""Typed config schema and its range checks (Hydra knows the schema through hydra_glue)."""

import ast
import math
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf


class ConfigError(ValueError):
    """A user's config value is out of range; the message is one line naming the key."""


class Dtype(str, Enum):
    float32 = "float32"
    float64 = "float64"


class Optimizer(str, Enum):
    # manual: the seed's `w -= lr * w.grad`; sgd: torch.optim.SGD (it rounds differently);
    # adam: torch.optim.Adam.
    manual = "manual"
    sgd = "sgd"
    adam = "adam"


# The comment above each field is the key's meaning that --help prints (key_meanings()).
# Defaults: the reference experiment's, for train.run() callers.


@dataclass
class ActivationConfig:
    # The activation's name in run directories, summaries and reports (its conf/activation file).
    name: str = "myrelu"
    # Dotted path to an autograd Function, an nn.Module class or a plain function.
    target: str | None = "reluexp.functions.MyReLU"
    # Dotted path to the built-in the activation imitates (optional: reluexp.check compares with
    # it when given).
    reference: str | None = "torch.relu"
    # Keyword arguments of the target (e.g. negative_slope); the reference and the surrogate get
    # those they take. A custom activation's are new keys: +activation.params.x=1.
    params: dict[str, Any] = field(default_factory=dict)
    # Dotted path to the derivative the backward means to compute when it is deliberately not the
    # forward's (a surrogate gradient: a spiking neuron's smooth stand-in for a step's 0), a
    # Python function called with the input and the params it takes. reluexp.check checks the
    # backward against it.
    surrogate: str | None = None


class DataName(str, Enum):
    # random: the article's regression on noise; digits: scikit-learn's bundled 8x8 digits; file:
    # the user's .npz or .pt (x, y, optionally x_val, y_val); callable: a function returning them.
    random = "random"
    digits = "digits"
    file = "file"
    callable = "callable"


@dataclass
class DataConfig:
    # Where the examples come from (the data= group sets it with its own defaults).
    name: DataName = DataName.random
    # The random data's number of examples (the others bring their own).
    n: int = 64
    # The random data's input features.
    d_in: int = 1000
    # The random data's output values.
    d_out: int = 10
    # data=file: the path of a .npz or .pt (data=callable takes data.loader instead).
    path: str | None = None
    # data=callable: the dotted path of a function returning x, y (and x_val, y_val) tensors.
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
    # The mean over the batch and the outputs: its gradient does not grow with the data's size.
    mean_squared_error = "mean_squared_error"
    cross_entropy = "cross_entropy"


class Init(str, Enum):
    # randn: the seed's torch.randn weights; scaled: randn times sqrt(2 / fan_in).
    randn = "randn"
    scaled = "scaled"


@dataclass
class ModelConfig:
    # An int (one hidden layer's width) or a list of ints (a deeper MLP).
    hidden: Any = 100
    # How the weights start.
    init: Init = Init.randn
    # A bias per layer (zeros at the start), trained with the weights; the article has none.
    bias: bool = False


@dataclass
class Config:
    activation: ActivationConfig = field(default_factory=ActivationConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    # The learning rate.
    lr: float = 1e-6
    # Training steps (one batch each).
    steps: int = 500
    # Seeds the data, the weights and the batch order: the same seed, the same run.
    seed: int = 42
    # cpu, cuda, cuda:N, mps, or auto (cuda when there is one, else cpu).
    device: str = "auto"
    # The weights' and the data's floating-point type.
    dtype: Dtype = Dtype.float32
    # The weight update.
    optimizer: Optimizer = Optimizer.manual
    # The objective: squared_error (summed, the article's), mean_squared_error, cross_entropy,
    # or auto (what the data's targets say).
    loss: Loss = Loss.auto
    # Steps between validation passes, when the data has a validation split (and at the last).
    eval_every: int = 10
    # torch intra-op threads; null keeps torch's default.
    threads: int | None = None
    # Steps between the values streamed to TensorBoard (loss, gradient and weight norms).
    log_every: int = 1
    # Steps between the article's `step loss` lines on stdout.
    print_every: int = 100
    # Steps between checkpoints (0: only at the end and on SIGINT/SIGTERM).
    checkpoint_every: int = 0
    # A non-finite loss, gradient or weight ends the run as `diverged`; false records the
    # step and trains on.
    stop_on_divergence: bool = True
    # A run directory to continue, with its own config.
    resume: str | None = None
    # torch.compile the forward and loss (and so their backward); numbers then differ slightly.
    compile: bool = False
    # No progress and no loss lines (warnings, errors and the closing line remain).
    quiet: bool = False
    # Debug lines too (flushes, checkpoints).
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


def key_meanings() -> dict[str, str]:
    """Every key of the schema, dotted (`data.batch_size`), with the comment above its field in
    this file, and for a choice its options (the comment above the choice's first option, or
    their names): what --help prints, from the one copy."""
    source = Path(__file__).read_text()
    lines = source.splitlines()

    def comment_above(line_number: int) -> str:
        found: list[str] = []
        index = line_number - 2
        while index >= 0 and lines[index].strip().startswith("#"):
            found.insert(0, lines[index].strip().removeprefix("#").strip())
            index -= 1
        return " ".join(found)

    # class name -> field or option name -> the comment above it
    comments: dict[str, dict[str, str]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        comments[node.name] = {}
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign):  # a dataclass field
                name = statement.target
            elif isinstance(statement, ast.Assign):  # an Enum option
                name = statement.targets[0]
            else:
                continue
            comments[node.name][name.id] = comment_above(statement.lineno)

    meanings: dict[str, str] = {}

    def walk(schema: type, prefix: str) -> None:
        for schema_field in fields(schema):
            kind = schema_field.type
            key = prefix + schema_field.name
            if is_dataclass(kind):
                walk(kind, f"{key}.")
                continue
            meaning = comments[schema.__name__].get(schema_field.name, "")
            if isinstance(kind, type) and issubclass(kind, Enum):
                first = next(iter(comments[kind.__name__].values()))
                meaning += " " + (first or f"One of: {', '.join(option.value for option in kind)}.")
            meanings[key] = meaning.strip()

    walk(Config, "")
    return meanings
