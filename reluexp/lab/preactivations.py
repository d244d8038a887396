"""The experiment's pre-activations as the lab meets them: where training takes them off a
Function's domain (training parity is judged while they stay inside it), and what they are at
its first and last step (for the large-input checks)."""

import copy

import torch
from torch import nn

from reluexp.config import Config, Dtype
from reluexp.functions.targets import ActivationFactory, layers_of
from reluexp.lab.shape import Domain
from reluexp.run import runner
from reluexp.run.model import Capture
from reluexp.run.state import RunState


class Outside(nn.Module):
    """An activation Module that records the fraction of its inputs outside `domain` at each
    forward with grad enabled (a training step's: the model's probes and validation passes run
    without)."""

    def __init__(self, inner: nn.Module, domain: Domain, fractions: list[float]):
        super().__init__()
        self.inner, self.domain, self.fractions = inner, domain, fractions

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            inside = self.domain.contains(x.detach())
            self.fractions.append(1.0 - inside.double().mean().item())
        return self.inner(x)


class DomainWatch:
    """An activation factory (the Function's) whose Modules record when training takes their
    inputs off the domain: a list of fractions per Module, one per training step."""

    def __init__(self, factory: ActivationFactory, domain: Domain):
        self.factory, self.domain = factory, domain
        self.sites: list[list[float]] = []

    def __call__(self) -> nn.Module:
        fractions: list[float] = []
        self.sites.append(fractions)
        return Outside(self.factory(), self.domain, fractions)

    def left_at(self) -> tuple[int, float] | None:
        """The first training step at which a site's inputs were outside the domain, and the
        largest fraction outside then; None while they stayed inside."""
        steps = [(step, f) for fractions in self.sites for step, f in enumerate(fractions) if f]
        if not steps:
            return None
        first = min(step for step, _ in steps)
        return first, max(f for step, f in steps if step == first)


def preactivations(config: Config, last: RunState | None) -> dict[str, torch.Tensor]:
    """The inputs of the experiment's first activation site at its first step (and at the last
    of a float64 run that ended in state `last`), in float32, the experiment's dtype: the model
    built as the run builds it (the reference's activation in it: only the inputs matter), its
    forward on the training data."""
    first = copy.deepcopy(config)
    first.dtype = Dtype.float64
    prepared = runner.prepare(first, activation=layers_of(torch.relu, "torch.relu", {}))
    x = prepared.data.inputs(prepared.data.x).double()
    found = {
        "first step": first_site_inputs(prepared.built.model.double(), prepared.built.capture, x)
    }
    if last is not None:
        found["last step"] = first_site_inputs(
            last.model, last.capture, x.to(next(last.model.parameters()).device)
        )
    return found


def first_site_inputs(model: torch.nn.Module, capture: Capture, x: torch.Tensor) -> torch.Tensor:
    """What the model's first activation call takes for inputs x, in float32."""
    capture.start()
    try:
        with torch.no_grad():
            model(x)
    finally:
        calls = capture.take()
    return calls[0][0].float().cpu()
