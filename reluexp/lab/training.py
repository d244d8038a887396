"""Training parity: the experiment trained with the Function beside its oracle twin (its own
forward differentiated by autograd, or its declared surrogate), same seed, in float64: a wrong
backward parts them at the first update, rounding by ~1e-16. Beside its reference in float32 it
is information: where the two part, and why (an exact zero at a kink, rounding)."""

import copy
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from reluexp.config import Config, Dtype
from reluexp.functions.targets import ActivationFactory, layers_of
from reluexp.lab.calls import ReferenceFailed, UserError, autograd_message, raised, the_reference
from reluexp.lab.cases import Kink
from reluexp.lab.context import Check, Context, Learned, Learnt, Probe
from reluexp.lab.findings import Finding, Group, Status
from reluexp.lab.oracle import Oracle, OracleKind
from reluexp.lab.preactivations import DomainWatch, preactivations
from reluexp.lab.shape import Domain
from reluexp.lab.subject import Subject, TargetKind
from reluexp.options import Init, MLPConfig
from reluexp.run import runner

# A wrong backward parts the float64 pair at the first update; more steps decide no better.
TWIN_STEPS = 50
# A twin that differences its parameters trains at most this many parameter elements times
# steps, and at least DIFFERENCED_MIN_STEPS steps (a wrong backward parts at the first).
DIFFERENCED_BUDGET = 1000
DIFFERENCED_MIN_STEPS = 10
# The float32 pair beside the reference: long enough for a pre-activation to land on exactly
# 0.0 in the seed's experiment (step 34 with AVX-512 kernels, 156 with AVX2).
REFERENCE_STEPS = 200
THOROUGH_STEPS = 500
# Float64 runs that first part by this much (relative) are not rounding apart; for a Function
# that computes in float32 (a float32 mask for a float64 input), float32's rounding apart.
PARTING = {torch.float64: 1e-10, torch.float32: 1e-5}
# A twin trained through finite differences parts from the Function by their error, carried
# by the updates: this many times it is still theirs.
FD_PARTING_UNITS = 1e3


@dataclass
class Side:
    """One training run of the check."""

    result: runner.RunResult

    @property
    def losses(self) -> list[float]:
        return list(self.result.series.losses)

    @property
    def diverged_at(self) -> int | None:
        return self.result.diverged_at_step


@contextmanager
def runs_silenced() -> Iterator[None]:
    """The runs' own log lines (a divergence warning, loss lines) stay out of the check's."""
    logger = logging.getLogger("reluexp")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def train_side(config: Config, activation: ActivationFactory, dtype: str, steps: int) -> Side:
    side = copy.deepcopy(config)
    side.dtype, side.steps, side.log_every, side.quiet = Dtype(dtype), steps, 1, True
    side.checkpoint_every = 0
    try:
        return Side(runner.run(side, activation=activation))
    except Exception as error:
        raise UserError(raised(error)) from error


def where_they_part(target: Side, other: Side) -> dict[str, Any]:
    """Where two finite loss series part, whether an exact zero came just before, how far apart
    they get (relative)."""
    a_losses, b_losses = target.losses, other.losses
    zeros = list(target.result.series.exact_zeros)
    parted = next((t for t, (a, b) in enumerate(zip(a_losses, b_losses)) if a != b), None)
    relative = [
        abs(a - b) / abs(b) for a, b in zip(a_losses, b_losses) if b != 0 and math.isfinite(a - b)
    ]
    at_parting = None
    if parted is not None and b_losses[parted] != 0:
        at_parting = abs(a_losses[parted] - b_losses[parted]) / abs(b_losses[parted])
    return {
        "steps": len(a_losses),
        "first_parting_step": parted,
        "relative_difference_at_parting": at_parting,
        "exact_zeros_before_parting": int(zeros[parted - 1]) if parted else None,
        "steps_with_exact_zeros": sum(z > 0 for z in zeros),
        "max_relative_difference": max(relative, default=0.0),
        "final_loss": a_losses[-1] if a_losses else None,
        "other_final_loss": b_losses[-1] if b_losses else None,
        "gap": [
            (a - b) / abs(b)
            for a, b in zip(a_losses, b_losses)
            if b != 0 and math.isfinite(a) and math.isfinite(b)
        ],
    }


# The training parity's finding in a check that trains nothing (check_function(training=False),
# a sweep's own check).
NOT_TRAINED = "not trained here (training=False); `python -m reluexp.check` trains it"
# The training parity's finding when neither the Function's run nor its twin's trained.
BOTH_DIVERGE = "both runs diverge"


def settings_that_train(config: Config, activation: ActivationFactory, steps: int) -> str:
    """The first of a few gentler settings under which the twin trains `steps` steps without
    diverging."""
    for factor in (1.0, 0.1, 0.01):
        gentle = copy.deepcopy(config)
        gentle.lr = config.lr * factor
        settings = f"lr={gentle.lr:g}"
        if isinstance(gentle.model, MLPConfig):  # the other models start as torch has them
            gentle.model.init = Init.scaled
            settings = f"model.init=scaled {settings}"
        if train_side(gentle, activation, "float64", steps).diverged_at is None:
            return settings
    return ""


class Differenced(torch.autograd.Function):
    """A Module activation's forward with the oracle's derivative: finite differences of the
    forward, for its input and its parameters (float64)."""

    @staticmethod
    def forward(ctx: Any, oracle: Oracle, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        ctx.oracle = oracle
        ctx.save_for_backward(x, *params)
        return oracle.forward(list(params))(x)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, *params = ctx.saved_tensors
        return (None, *ctx.oracle.grads(x, grad_output, params))


class DifferencedTwin(torch.nn.Module):
    """The twin of one of a Module activation's Modules: its parameters, starting where the
    Module's do, trained through Differenced."""

    def __init__(self, oracle: Oracle, module: torch.nn.Module):
        super().__init__()
        self.weights = torch.nn.ParameterList(p.detach().clone() for p in module.parameters())
        # A closure, not an attribute: a copy of the model shares the oracle.
        self.differenced = lambda x, *params: Differenced.apply(oracle, x, *params)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.differenced(x, *self.weights)


def twin_layers(subject: Subject, oracle: Oracle) -> ActivationFactory | None:
    """What the twin run places: the oracle's twin (autograd through a Function's forward, or
    the declared surrogate); for an elementwise Module activation (a learnable one), its
    forward differentiated by finite differences, parameters included; else none (a surrogate
    declares the input's gradient, not its parameters': their twin would not learn)."""
    if oracle.twin is not None:
        return layers_of(oracle.twin, f"{subject.name}'s twin", {})
    if (
        subject.kind == TargetKind.MODULE
        and oracle.structure.elementwise
        and oracle.kind != OracleKind.SURROGATE
    ):
        return lambda: DifferencedTwin(oracle, subject.make_activation())
    return None


def deciding_pair(
    config: Config,
    subject: Subject,
    oracle: Oracle,
    probe: Probe,
    kinks: tuple[Kink, ...],
    steps: int,
    domain: Domain,
) -> tuple[Finding, dict[str, Any], Side | None]:
    """The Function against its oracle twin in float64: right vs wrong, while the
    pre-activations stay in the domain."""
    name = "training parity"
    twin_activation = twin_layers(subject, oracle)
    if twin_activation is None or probe.random:
        why = "its forward is random" if probe.random else f"the oracle is {oracle.expected_as}"
        return (
            Finding(
                Group.TRAINING,
                name,
                Status.INFO,
                f"no twin to train beside ({why}): the gradient checks decide",
            ),
            {},
            None,
        )
    if oracle.kind == OracleKind.FINITE_DIFFERENCES and subject.params:
        # Each of the twin's steps differences every parameter element (four forwards each):
        # 100 per-channel slopes took 4 s for 50 steps.
        elements = sum(p.numel() for p in subject.params.values())
        steps = min(steps, max(DIFFERENCED_MIN_STEPS, DIFFERENCED_BUDGET // elements))
    watch = None if domain.whole else DomainWatch(subject.make_activation, domain)
    function = train_side(config, watch or subject.make_activation, "float64", steps)
    twin = train_side(config, twin_activation, "float64", steps)
    left = watch and watch.left_at()
    facts: dict[str, Any] = {
        "function_diverged_at": function.diverged_at,
        "twin_diverged_at": twin.diverged_at,
    }
    against = {
        OracleKind.SURROGATE: f"its {oracle.expected_as}",
        OracleKind.AUTOGRAD: "its own forward differentiated by autograd",
    }.get(oracle.kind, "its own forward differentiated by finite differences")
    parted = function.diverged_at if twin.diverged_at is None else None
    parted = where_they_part(function, twin)["first_parting_step"] if parted is None else parted
    if left is not None and parted is not None and left[0] < parted:
        step, fraction = left
        facts["left_the_domain_at"] = step
        detail = (
            f"the pre-activations leave the domain ({domain.describe()}) at step {step} "
            f"({fraction:.1%} outside); off it any backward is a convention, so the float64 runs "
            f"beside {against} are judged before it: identical up to step {parted}"
        )
        return Finding(Group.TRAINING, name, Status.INFO, detail), facts, function
    if function.diverged_at is not None and twin.diverged_at is None:
        return (
            Finding(
                Group.TRAINING,
                name,
                Status.LARGE,
                f"in float64 the loss is non-finite from step {function.diverged_at} while "
                f"{against} trains (final loss {twin.losses[-1]:.4g})",
            ),
            facts,
            function,
        )
    if function.diverged_at is not None:
        gentler = settings_that_train(config, twin_activation, steps)
        hint = f"; {gentler} trains it" if gentler else ""
        facts["settings_that_train"] = gentler
        return (
            Finding(
                Group.TRAINING,
                name,
                Status.INFO,
                f"{BOTH_DIVERGE}: the experiment's settings are too large for this activation, "
                f"not a fault of the Function{hint}",
            ),
            facts,
            function,
        )
    facts |= where_they_part(function, twin)
    first, at_parting = facts["first_parting_step"], facts["relative_difference_at_parting"]
    limit = PARTING.get(probe.float64_computed_in, PARTING[torch.float32])
    # Finite differences carry their own error into every update.
    limit = max(limit, FD_PARTING_UNITS * oracle.error)
    # Rounding shows where the runs first part as a difference of ~1e-16 (however far a chaotic
    # network carries it later); a wrong backward, as one far larger. Through a step (a spiking
    # neuron) rounding moves the loss only once it carries a pre-activation across the step,
    # then by much: there only the first update can tell.
    through_step = any(kink.step for kink in kinks)
    if (
        first is not None
        and (at_parting is None or at_parting > limit)
        and (first == 1 or not through_step)
    ):
        return (
            Finding(
                Group.TRAINING,
                name,
                Status.WRONG,
                f"the float64 runs of {subject.name} and {against} part at step {first} by "
                f"{at_parting or math.inf:.3g} (relative), far beyond rounding, and end up "
                f"{facts['max_relative_difference']:.3g} apart: in training its backward is not "
                + (
                    "the declared surrogate"
                    if oracle.kind == OracleKind.SURROGATE
                    else "its forward's derivative"
                ),
            ),
            facts,
            function,
        )
    if first is None:
        detail = f"float64 runs beside {against} identical over {facts['steps']} steps"
    else:
        cause = "a pre-activation crossing the step" if through_step else "rounding"
        detail = (
            f"float64 runs beside {against} part at step {first} by {at_parting:.2g} ({cause}) "
            f"and end up {facts['max_relative_difference']:.2g} apart by step {facts['steps'] - 1}"
        )
    return Finding("training", name, Status.PASS, detail), facts, function


def reference_follows_surrogate(subject: Subject, x: torch.Tensor) -> bool:
    """The reference's own gradient at x is the declared surrogate (a straight-through
    reference): then the two train alike, and are compared."""
    grid = x.detach().requires_grad_()
    y = subject.reference(grid, *subject.inputs(grid))
    if not y.requires_grad:
        return False
    (derivative,) = torch.autograd.grad(y, grid, torch.ones_like(y), allow_unused=True)
    if derivative is None:
        return False
    return torch.allclose(derivative, subject.surrogate(grid.detach()), rtol=1e-6, atol=1e-9)


def reference_pair(
    config: Config, subject: Subject, function32: Side, steps: int, grid: torch.Tensor
) -> tuple[Finding, dict[str, Any]]:
    """Information: where the Function's float32 run parts from its reference's, and why (with
    a declared surrogate, only a reference that follows it on the grid); a reference that
    raises is not trained beside, and said."""
    name = "training beside the reference"
    losses = function32.losses
    if subject.reference is None:
        trained = (
            f"trains from {losses[0]:.4g} to {losses[-1]:.4g} in {len(losses)} steps"
            if losses
            else "trains no step"
        )
        return Finding(
            "training", name, Status.INFO, f"no reference to train beside; in float32 it {trained}"
        ), {}
    try:
        with the_reference(subject):
            followed = subject.surrogate is None or reference_follows_surrogate(subject, grid)
            reference = (
                train_side(config, subject.make_reference, "float32", steps) if followed else None
            )
    except ReferenceFailed as error:
        return Finding(Group.TRAINING, name, Status.INFO, f"not trained beside: {error}"), {}
    if reference is None:
        return Finding(
            Group.TRAINING,
            name,
            Status.INFO,
            f"in float32 it trains from {losses[0]:.4g} to {losses[-1]:.4g} in {len(losses)} "
            "steps; not compared with the reference, whose gradient is not the declared surrogate",
        ), {}
    if function32.diverged_at is not None or reference.diverged_at is not None:
        return Finding(
            Group.TRAINING,
            name,
            Status.INFO,
            f"in float32 the Function's loss is non-finite from step {function32.diverged_at}, "
            f"the reference's from step {reference.diverged_at}",
        ), {
            "function_diverged_at": function32.diverged_at,
            "reference_diverged_at": reference.diverged_at,
        }
    facts = where_they_part(function32, reference)
    first = facts["first_parting_step"]
    zeros = facts["exact_zeros_before_parting"]
    if first is None:
        return Finding(
            "training", name, Status.PASS, f"float32 runs identical over {facts['steps']} steps"
        ), facts
    if zeros:
        return Finding(
            Group.TRAINING,
            name,
            Status.CONVENTION,
            f"in float32 they part at step {first}, after {zeros} exact-zero pre-activation(s) at "
            f"step {first - 1} ({facts['steps_with_exact_zeros']} steps had exact zeros; max "
            f"relative difference {facts['max_relative_difference']:.3g})",
        ), facts
    return Finding(
        Group.TRAINING,
        name,
        Status.INFO,
        f"in float32 they part at step {first} by "
        f"{facts['relative_difference_at_parting']:.2g} and drift "
        f"{facts['max_relative_difference']:.2g} apart by step {facts['steps'] - 1}",
    ), facts


def surrogate_grid(context: Context) -> torch.Tensor:
    """Where a reference is asked whether its gradient is the declared surrogate: [-10, 10],
    or for a Function that is not the same at every element, an input of the experiment's
    shape (a channel-wise quantizer's reference may take 2-D inputs only)."""
    if context.structure.pointwise:
        return torch.linspace(-10.0, 10.0, 2001, dtype=torch.float64)
    return context.sample((64, 100), torch.Generator().manual_seed(7))


def width_misfit(config: Config, subject: Subject, width: int | None) -> str:
    """Why a Function of one width cannot train in the experiment's network: its hidden layers
    are of another ('' where they fit, or the network is not the article's)."""
    if width is None or not isinstance(config.model, MLPConfig):
        return ""
    widths = list(config.model.hidden)  # a list: the config makes a single width one
    if all(w == width for w in widths):
        return ""
    return (
        f"{subject.name} takes inputs of width {width} only, the experiment's hidden layers are "
        f"{widths}: model.hidden=[{width}] trains it"
    )


def training_checks(context: Context) -> list[Check]:
    """Both pairs (with training on), and the experiment's pre-activations they reached, for
    the large-input checks: at the first step, and at the float64 run's last. A run the
    Function breaks is the deciding pair's wrong."""
    config, subject = context.experiment, context.subject
    thorough = context.options.thorough
    twin_steps = THOROUGH_STEPS if thorough else TWIN_STEPS
    reference_steps = THOROUGH_STEPS if thorough else REFERENCE_STEPS

    def check() -> Learnt:
        if not context.options.training:
            skipped = Finding(Group.TRAINING, "training parity", Status.INFO, NOT_TRAINED)
            return Learnt([skipped], Learned(reached=preactivations(config, None)))
        misfit = width_misfit(config, subject, context.probe.width)
        if misfit:
            skipped = Finding(Group.TRAINING, "training parity", Status.UNSUPPORTED, misfit)
            reached = Learned(reached=preactivations(config, None))
            return Learnt([skipped], reached, caveats=[f"training parity did not run ({misfit})"])
        with runs_silenced():
            try:
                deciding, twin_facts, function64 = deciding_pair(
                    config,
                    subject,
                    context.oracle,
                    context.probe,
                    context.kinks,
                    twin_steps,
                    context.domain,
                )
                function32 = train_side(config, subject.make_activation, "float32", reference_steps)
                informing, reference_facts = reference_pair(
                    config, subject, function32, reference_steps, surrogate_grid(context)
                )
            except UserError as error:
                detail = autograd_message(str(error), subject.name)
                failed = Finding(Group.TRAINING, "training parity", Status.WRONG, detail)
                reached = preactivations(config, None)
                return Learnt([failed], Learned(reached=reached), {"training": {"error": detail}})
        facts = {"float64 twin": twin_facts, "float32 reference": reference_facts}
        reached = preactivations(config, function64 and function64.result.state)
        caveats = []
        if "settings_that_train" in twin_facts:  # both runs diverged: parity was not judged
            gentler = twin_facts["settings_that_train"]
            trains = f"; {gentler} trains it" if gentler else ""
            caveats.append(f"training parity did not run ({BOTH_DIVERGE}{trains})")
        return Learnt(
            [deciding, informing], Learned(reached=reached), {"training": facts}, [], caveats
        )

    return [Check(Group.TRAINING, "training parity", check)]
