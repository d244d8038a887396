"""The config groups whose options each have a schema (model=, data=, optimizer=, schedule=), as
Hydra's structured configs pattern has it: the option names, the base every option of a group
shares, and each option's own keys, so that a key of another option is refused as the config is
composed (hydra_glue stores them; reluexp.config's Config holds a group's base)."""

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any


def meaning(text: str) -> dict[str, str]:
    """A field's meaning, which --help prints (key_meanings())."""
    return {"help": " ".join(text.split())}


class DataName(str, Enum):
    """random: the article's regression on noise; digits: scikit-learn's bundled 8x8 digits;
    cifar10, cifar100: CIFAR as its authors distribute it, from data.root; file: the user's
    .npz or .pt (x, y, optionally x_val, y_val); callable: a function returning them."""

    random = "random"
    digits = "digits"
    cifar10 = "cifar10"
    cifar100 = "cifar100"
    file = "file"
    callable = "callable"


@dataclass
class DataConfig:
    """What every data option has; each option's schema adds its own keys (DATA_SCHEMAS), so a
    key of another option is refused as the config is composed, not ignored."""

    name: DataName = field(
        default=DataName.random,
        metadata=meaning(
            "Where the examples come from (the data= group sets it with its own defaults)."
        ),
    )
    batch_size: int | None = field(
        default=None,
        metadata=meaning(
            "Examples per step, a new seeded order each epoch (a remainder smaller than a "
            "batch is left out), at most the training examples; null: the full batch every step."
        ),
    )


def augment_field() -> Any:
    return field(
        default=False,
        metadata=meaning(
            "The CIFAR papers' augmentation, a random crop of the image padded by 4 pixels and "
            "a horizontal flip half of the time, each step's drawn from the seed and the step "
            "(images only)."
        ),
    )


def val_fraction_field() -> Any:
    return field(
        default=0.2,
        metadata=meaning(
            "Held out for validation, fixed by the seed, when the data brings no validation split."
        ),
    )


@dataclass
class RandomDataConfig(DataConfig):
    n: int = field(default=64, metadata=meaning("Examples (the full batch by default)."))
    d_in: int = field(default=1000, metadata=meaning("Input features."))
    d_out: int = field(default=10, metadata=meaning("Output values."))


@dataclass
class DigitsConfig(DataConfig):
    name: DataName = DataName.digits
    augment: bool = augment_field()
    val_fraction: float = val_fraction_field()


@dataclass
class CifarConfig(DataConfig):
    name: DataName = DataName.cifar10
    root: str | None = field(
        default=None,
        metadata=meaning(
            "Required: the folder holding the dataset's files, binary or python version, as "
            "downloaded from https://www.cs.toronto.edu/~kriz/cifar.html."
        ),
    )
    augment: bool = augment_field()


@dataclass
class FileDataConfig(DataConfig):
    name: DataName = DataName.file
    path: str | None = field(
        default=None,
        metadata=meaning("Required: the path of a .npz or .pt holding x, y (x_val, y_val)."),
    )
    augment: bool = augment_field()
    val_fraction: float = val_fraction_field()


@dataclass
class CallableDataConfig(DataConfig):
    name: DataName = DataName.callable
    loader: str | None = field(
        default=None,
        metadata=meaning(
            "Required: the dotted path of a function returning x, y (and x_val, y_val) tensors."
        ),
    )
    augment: bool = augment_field()
    val_fraction: float = val_fraction_field()


# Each data option's schema (cifar100 is cifar10's with its name).
DATA_SCHEMAS: dict[DataName, type[DataConfig]] = {
    DataName.random: RandomDataConfig,
    DataName.digits: DigitsConfig,
    DataName.cifar10: CifarConfig,
    DataName.cifar100: CifarConfig,
    DataName.file: FileDataConfig,
    DataName.callable: CallableDataConfig,
}


class Init(str, Enum):
    """randn: the seed's torch.randn weights; scaled: randn times sqrt(2 / fan_in)."""

    randn = "randn"
    scaled = "scaled"


class ModelName(str, Enum):
    """mlp: the article's network of plain weight matrices (model.hidden: its hidden layers'
    widths); cnn: a small conv net for images such as the bundled digits (model.hidden: its
    3x3 convolutions' channels); resnet: the CIFAR ResNet of He et al. 2016 (model.depth,
    model.hidden: its stages' widths); custom: your own (model.target, a factory of an
    nn.Module)."""

    mlp = "mlp"
    cnn = "cnn"
    resnet = "resnet"
    custom = "custom"


@dataclass
class ModelConfig:
    """What every model has; each option's schema adds its own keys (MODEL_SCHEMAS), so a key
    of another option is refused as the config is composed, not ignored."""

    name: ModelName = field(
        default=ModelName.mlp, metadata=meaning("The network (the model= group sets it).")
    )
    replace: str | None = field(
        default=None,
        metadata=meaning(
            "The dotted path of a Module class (torch.nn.ReLU): every instance of it in the "
            "model becomes the configured activation, each its own."
        ),
    )


def hidden_widths(default: list[int], what: str) -> Any:
    """model.hidden's field: a list of ints (an int: one), `what` they are."""
    # Any for OmegaConf, which takes no union of a number and a list: a list once normalized.
    return field(
        default_factory=lambda: list(default),
        metadata=meaning(f"{what}, a list of ints (an int: one)."),
    )


@dataclass
class MLPConfig(ModelConfig):
    hidden: Any = hidden_widths([100], "The hidden layers' widths")
    init: Init = field(default=Init.randn, metadata=meaning("How the weights start."))
    bias: bool = field(
        default=False,
        metadata=meaning(
            "A bias per layer (zeros at the start), trained with the weights; the article has none."
        ),
    )


@dataclass
class CNNConfig(ModelConfig):
    name: ModelName = ModelName.cnn
    hidden: Any = hidden_widths(
        [16, 32], "The 3x3 convolutions' channels (stride 2 after the first)"
    )


@dataclass
class ResNetConfig(ModelConfig):
    name: ModelName = ModelName.resnet
    depth: int = field(default=20, metadata=meaning("Its layers, 6n + 2 (20, 32, 44, 56, 110)."))
    hidden: Any = hidden_widths([16, 32, 64], "Its three stages' widths")


@dataclass
class CustomModelConfig(ModelConfig):
    name: ModelName = ModelName.custom
    target: str | None = field(
        default=None,
        metadata=meaning(
            "Required: the dotted path of your factory, called with the keywords it names of "
            "`activation` (a callable that makes a fresh activation Module: call it where the "
            "activation goes), `d_in`, `d_out` and `input_shape`, returning an nn.Module."
        ),
    )


# Each model option's schema (Hydra's schema-per-option pattern: hydra_glue stores them).
MODEL_SCHEMAS: dict[ModelName, type[ModelConfig]] = {
    ModelName.mlp: MLPConfig,
    ModelName.cnn: CNNConfig,
    ModelName.resnet: ResNetConfig,
    ModelName.custom: CustomModelConfig,
}


class Optimizer(str, Enum):
    """manual: the seed's `w -= lr * w.grad`; sgd: torch.optim.SGD (it rounds differently);
    adam: torch.optim.Adam."""

    manual = "manual"
    sgd = "sgd"
    adam = "adam"


@dataclass
class OptimizerConfig:
    """What every optimizer option has; each option's schema adds its own keys
    (OPTIMIZER_SCHEMAS): the article's manual update takes none."""

    name: Optimizer = field(
        default=Optimizer.manual,
        metadata=meaning("The weight update (the optimizer= group sets it)."),
    )


def weight_decay_field() -> Any:
    return field(
        default=0.0,
        metadata=meaning(
            "L2 weight decay on the weights, the tensors of two or more dimensions; none on "
            "biases, normalization layers and the activation's own parameters unless decay_all."
        ),
    )


def decay_all_field() -> Any:
    return field(
        default=False,
        metadata=meaning("weight_decay on every trained parameter (needs weight_decay > 0)."),
    )


@dataclass
class ManualConfig(OptimizerConfig):
    pass


@dataclass
class SGDConfig(OptimizerConfig):
    name: Optimizer = Optimizer.sgd
    momentum: float = field(
        default=0.0, metadata=meaning("Momentum (0.9 in the ResNet recipe); 0: none.")
    )
    nesterov: bool = field(
        default=False, metadata=meaning("Nesterov's momentum (needs momentum > 0).")
    )
    weight_decay: float = weight_decay_field()
    decay_all: bool = decay_all_field()


@dataclass
class AdamConfig(OptimizerConfig):
    name: Optimizer = Optimizer.adam
    weight_decay: float = weight_decay_field()
    decay_all: bool = decay_all_field()


OPTIMIZER_SCHEMAS: dict[Optimizer, type[OptimizerConfig]] = {
    Optimizer.manual: ManualConfig,
    Optimizer.sgd: SGDConfig,
    Optimizer.adam: AdamConfig,
}


class Schedule(str, Enum):
    """constant: lr throughout; cosine: half a cosine from lr to 0 over the steps after the
    warmup (torch's CosineAnnealingLR); step: lr times schedule.gamma at each of
    schedule.milestones (torch's MultiStepLR)."""

    constant = "constant"
    cosine = "cosine"
    step = "step"


@dataclass
class ScheduleConfig:
    """What every schedule option has, its warmup; schedule=step adds its milestones and
    factor (SCHEDULE_SCHEMAS)."""

    name: Schedule = field(
        default=Schedule.constant,
        metadata=meaning("How the lr changes over the steps (the schedule= group sets it)."),
    )
    warmup: int = field(
        default=0,
        metadata=meaning("Steps over which the lr rises linearly to lr before the schedule."),
    )


@dataclass
class ConstantConfig(ScheduleConfig):
    pass


@dataclass
class CosineConfig(ScheduleConfig):
    name: Schedule = Schedule.cosine


@dataclass
class StepConfig(ScheduleConfig):
    name: Schedule = Schedule.step
    milestones: Any = field(
        default_factory=list,
        metadata=meaning("The steps at which the lr is multiplied by gamma."),
    )
    gamma: float = field(default=0.1, metadata=meaning("The factor at each milestone."))


SCHEDULE_SCHEMAS: dict[Schedule, type[ScheduleConfig]] = {
    Schedule.constant: ConstantConfig,
    Schedule.cosine: CosineConfig,
    Schedule.step: StepConfig,
}
# The groups whose options have a schema each: the base every option shares, the option names,
# each option's schema.
OPTION_SCHEMAS: dict[type, tuple[type[Enum], dict[Any, type]]] = {
    ModelConfig: (ModelName, MODEL_SCHEMAS),
    DataConfig: (DataName, DATA_SCHEMAS),
    OptimizerConfig: (Optimizer, OPTIMIZER_SCHEMAS),
    ScheduleConfig: (Schedule, SCHEDULE_SCHEMAS),
}


def foreign_keys(base: type, values: dict[str, Any]) -> list[str]:
    """A group's keys that none of its options has (`widht`): not an older format's keys of
    another option, a config nothing wrote."""
    _, schemas = OPTION_SCHEMAS[base]
    known = {option_field.name for schema in schemas.values() for option_field in fields(schema)}
    return [key for key in values if key not in known]


def own_keys(base: type, values: dict[str, Any]) -> dict[str, Any]:
    """A group's values (`{"name": "adam", "momentum": 0.0, ...}`) with only the keys its
    option's schema has: a config written before each option had its schema held every
    option's keys."""
    names, schemas = OPTION_SCHEMAS[base]
    own = {option_field.name for option_field in fields(schemas[names(values["name"])])}
    return {key: value for key, value in values.items() if key in own}
