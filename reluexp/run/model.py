"""The network a run trains, built from the config with the activation placed in it, by one
table of models (MODELS): the article's MLP of plain weight matrices (the default,
seed-exact), a small CNN for images, the CIFAR ResNet, or the user's own factory, optionally
with every instance of a built-in Module class swapped for the activation. Also where each
activation is seen: a forward hook on every instance, while captured."""

import inspect
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Generator, nn
from torch.utils.hooks import RemovableHandle

from reluexp.config import Config, ConfigError
from reluexp.functions.targets import (
    ActivationFactory,
    import_object,
    is_module,
    keywords_in,
    raised_at,
)
from reluexp.options import ModelName
from reluexp.record.metrics import units_of
from reluexp.run.cnn import CNN
from reluexp.run.mlp import MLP, init_weights
from reluexp.run.resnet import ResNet

# Examples the probe forward takes: enough for a batch dimension, cheap for any model.
PROBE_EXAMPLES = 2


def draw_seed(generator: torch.Generator) -> int:
    """A seed for torch's global generator, the run generator's next draw."""
    return int(torch.randint(2**62, (), generator=generator))


@contextmanager
def seeded(generator: torch.Generator) -> Iterator[None]:
    """torch's global generator seeded from the run's own for what is built within (a Module's
    own initialization draws from it), and put back after: a model's start depends on the
    run's seed alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(draw_seed(generator))
        yield


@dataclass(frozen=True)
class Site:
    """One place where the activation runs in a forward: an activation Module's call (a Module
    called twice is two sites: `act`, `act#2`), the units it gives each example (a channel of
    an image is one: metrics.unit_dims) and the elements of its output per example."""

    name: str
    units: int
    elements: int


# Registering and removing a Module's forward hook costs about what four of its hooked calls cost
# over plain ones (measured in the article's loop: ~6 µs a hooked call, 15-28 µs the pair): a run
# recording more often than every 5th step holds its hooks throughout.
HOOKS_HELD_BELOW = 5


class Capture:
    """What each activation call of a forward takes and gives, while asked to (a recorded
    step's forward): a forward hook on every activation Module of the model, from start() to
    take(). A hooked Module's every call takes torch's slower hooked path, so a run that
    records every Nth step holds the hooks only through its recorded steps. `held` keeps them
    throughout: for a run that records often (HOOKS_HELD_BELOW), and for a compiled forward
    (Dynamo does not guard on a Module's hooks: a graph traced with them would run them at
    every step after, one traced without them never)."""

    def __init__(self, instances: list[nn.Module], held: bool = False):
        self.on = False
        self.calls: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []
        # The activation Modules the model was given, each hooked while capturing.
        self.instances = instances
        self.held = held
        self.handles: list[RemovableHandle] = []
        if held:
            self.attach()

    def attach(self) -> None:
        if not self.handles:
            self.handles = [m.register_forward_hook(self.hook) for m in self.instances]

    def hook(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if self.on:
            self.calls.append((module, inputs[0].detach(), output.detach()))

    def start(self) -> None:
        self.attach()
        self.on, self.calls = True, []

    def stop(self) -> list[tuple[nn.Module, torch.Tensor, torch.Tensor]]:
        """Each call since start(), with the Module called, in call order; capturing stops
        (and the hooks go, unless held)."""
        calls, self.on, self.calls = self.calls, False, []
        if not self.held:
            for handle in self.handles:
                handle.remove()
            self.handles = []
        return calls

    def take(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each call's (input, output) since start(), in call order; capturing stops."""
        return [(pre, post) for _, pre, post in self.stop()]


class Placeable(nn.Module):
    """What a model factory gets as `activation`, taken either way users write it: called,
    `activation()`, a fresh activation Module for one place; or placed as it is,
    `nn.Sequential(..., activation, ...)`, one Module whose every call is a site (its
    activation Module, made once the factory has placed it, is `act`)."""

    def __init__(self, make: Callable[[], nn.Module]):
        super().__init__()
        self.make = make
        self.act: nn.Module | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            return self.make()
        return super().__call__(*args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


@dataclass
class Built:
    """A run's network with where its activation runs: the model, its activation Modules
    (hooked while captured), the sites a forward calls them at (in order), and the capture."""

    model: nn.Module
    sites: list[Site]
    capture: Capture


def replace_instances(model: nn.Module, kind: type, activation: ActivationFactory) -> int:
    """Every submodule of the class `kind` swapped for a fresh activation Module; how many."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, kind):
                setattr(parent, name, activation())
                swapped += 1
    return swapped


def images(config: Config, input_shape: tuple[int, ...]) -> None:
    """A model for images refuses other data in one line."""
    if len(input_shape) != 3:
        raise ConfigError(
            f"model={config.model.name.value}: takes images (channels, height, width); the "
            f"data's examples are {tuple(input_shape)} (data=digits gives 8x8 images of one "
            "channel, data=cifar10 32x32 of three)"
        )


def made_mlp(
    config: Config, input_shape: tuple[int, ...], d_out: int, activation: Any, generator: Generator
) -> nn.Module:
    """The article's order: the weights are the generator's next draws (w1, w2, ...)."""
    sizes = [math.prod(input_shape), *config.model.hidden, d_out]
    weights = init_weights(sizes, generator, config.model.init.value)
    biases = [torch.zeros(w.shape[1]) for w in weights] if config.model.bias else []
    with seeded(generator):
        return MLP(weights, biases, activation)


def made_cnn(
    config: Config, input_shape: tuple[int, ...], d_out: int, activation: Any, generator: Generator
) -> nn.Module:
    images(config, input_shape)
    with seeded(generator):
        return CNN(input_shape, d_out, config.model.hidden, activation)


def made_resnet(
    config: Config, input_shape: tuple[int, ...], d_out: int, activation: Any, generator: Generator
) -> nn.Module:
    images(config, input_shape)
    with seeded(generator):
        return ResNet(input_shape, d_out, config.model.depth, config.model.hidden, activation)


def made_custom(
    config: Config, input_shape: tuple[int, ...], d_out: int, activation: Any, generator: Generator
) -> nn.Module:
    """The user's factory, given what it names of the activation, d_in, d_out and
    input_shape; its mistakes are ConfigErrors naming model.target."""
    path = config.model.target
    factory = import_object(path, "model.target")
    if not callable(factory):
        raise ConfigError(f"model.target={path}: a {type(factory).__name__}, not a factory")
    offered = {
        "activation": activation,
        "d_in": math.prod(input_shape),
        "d_out": d_out,
        "input_shape": tuple(input_shape),
    }
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # no signature to read: offered everything
        parameters = None
    try:
        with seeded(generator):
            model = factory(**(offered if parameters is None else keywords_in(parameters, offered)))
    except Exception as error:
        raise ConfigError(f"model.target={path}: {raised_at(error)}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model.target={path}: returned {type(model).__name__}, not an nn.Module")
    return model


# Each model=<name>: its Module from the config, one example's input shape, the output width, the
# activation to place and the run's generator, which it draws its weights from (directly, or
# through a seed for torch's: `seeded`). The Modules are in run/mlp.py, cnn.py and resnet.py.
MODELS: dict[ModelName, Callable[[Config, tuple[int, ...], int, Any, Generator], nn.Module]] = {
    ModelName.mlp: made_mlp,
    ModelName.cnn: made_cnn,
    ModelName.resnet: made_resnet,
    ModelName.custom: made_custom,
}


def activation_modules(model: nn.Module, instances: list[nn.Module]) -> dict[str, nn.Module]:
    """The model's activation Modules, those among `instances`, by their names in it: the one
    way a run finds where its activation stands (its sites, its own parameters)."""
    held = {id(m) for m in instances}
    return {name: m for name, m in model.named_modules() if id(m) in held}


def build_model(
    config: Config,
    example: tuple[torch.Tensor, int],
    activation: ActivationFactory,
    generator: torch.Generator,
) -> Built:
    """The run's model on the CPU in float32, its weights drawn after the data from the run's
    generator (the MLP: w1, w2, ... as the article draws them; any other model from a seed it
    draws there), checked: it has parameters, holds the activation (model.replace's count
    too), and maps a probe of the data's first examples to outputs of the targets' width.
    `example`: the data's first inputs and its output width."""
    x, d_out = example
    made: list[nn.Module] = []

    def placed() -> nn.Module:
        module = activation()
        made.append(module)
        return module

    offered = Placeable(placed)
    model = MODELS[config.model.name](config, tuple(x.shape[1:]), d_out, offered, generator)
    if any(m is offered for m in model.modules()):  # placed as a Module
        with seeded(generator):
            offered.act = placed()
        made[-1] = offered  # its calls are the sites, by its place in the model
    custom = config.model.name == ModelName.custom
    what = f"model.target={config.model.target}" if custom else f"model={config.model.name.value}"
    if config.model.replace is not None:
        kind = import_object(config.model.replace, "model.replace")
        if not is_module(kind):
            raise ConfigError(f"model.replace={config.model.replace}: not an nn.Module class")
        if isinstance(model, kind):  # torch.nn.Module: every layer would go, and the model
            raise ConfigError(
                f"model.replace={config.model.replace}: the whole model is one, and so is every "
                "layer in it: name a layer class, such as torch.nn.ReLU"
            )
        with seeded(generator):
            swapped = replace_instances(model, kind, placed)
        if not swapped:
            raise ConfigError(
                f"model.replace={config.model.replace}: the model has 0 instances of it"
            )
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(f"{what}: the model has no parameters to train")
    instances = list(activation_modules(model, made).values())
    if not instances:
        raise ConfigError(
            f"{what}: the model holds no activation Module it was given: call `activation()` "
            "where the activation goes, or name the class the model uses, as "
            "model.replace=torch.nn.ReLU"
        )
    capture = Capture(instances, held=config.compile or config.streamed_every < HOOKS_HELD_BELOW)
    # The shipped models' forwards fail only through the activation they are given.
    culprit = what if custom else f"activation.target={config.activation.target} in {what}"
    sites = probe(model, x[:PROBE_EXAMPLES], d_out, capture, culprit)
    return Built(model, sites, capture)


def probe(model: nn.Module, x: torch.Tensor, d_out: int, capture: Capture, what: str) -> list[Site]:
    """The model's forward on a few examples (in eval mode, without a graph, torch's global
    generator left as it was): its output must give each example d_out values; the activation
    calls it makes are the sites the run streams."""
    names = {id(m): name for name, m in activation_modules(model, capture.instances).items()}
    training = model.training
    model.eval()
    capture.start()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            output = model(x)
    except Exception as error:
        # Linear layers on images: the usual mistake, and its usual fix.
        fix = (
            " (linear layers take each example flat: start the model with nn.Flatten())"
            if x.dim() > 2 and "shapes cannot be multiplied" in str(error)
            else ""
        )
        raise ConfigError(
            f"{what}: the forward of the data's first inputs, of shape {tuple(x.shape)}, "
            f"{raised_at(error)}{fix}"
        ) from None
    finally:
        calls = capture.stop()
        model.train(training)
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != (len(x), d_out):
        found = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ConfigError(
            f"{what}: its output for {len(x)} examples is {found}; the data's targets need "
            f"{(len(x), d_out)}"
        )
    sites, seen = [], {}
    for module, _, post in calls:
        name = names[id(module)]
        seen[name] = seen.get(name, 0) + 1
        shown = name if seen[name] == 1 else f"{name}#{seen[name]}"
        sites.append(Site(shown, units_of(post), post[0].numel() if post.dim() else 1))
    return sites
