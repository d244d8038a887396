"""What a check knows and what it is: the frozen context each stage of the pipeline receives
(the Function, the experiment, the options, and what the stages before it learnt), and the
check itself, a named call whose raise the stage runner turns into a finding."""

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from reluexp.config import Config
from reluexp.lab.cases import Kink, sample
from reluexp.lab.findings import Finding, Group, Status
from reluexp.lab.oracle import Oracle
from reluexp.lab.shape import Domain, Structure
from reluexp.lab.subject import Subject

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Options:
    """What the caller asked for beyond the default check."""

    dtypes: tuple[torch.dtype, ...] = FLOATS
    training: bool = True
    thorough: bool = False
    compile: bool = False
    large: bool = False
    double_backward: bool = False
    # activation.domain: where to check, stated (else found where the forward is finite).
    domain: tuple[float, float] | None = None
    # Only what the Function saves and costs (COST_STAGES), not whether it is right.
    cost_only: bool = False


@dataclass(frozen=True)
class Probe:
    """What the returns check learnt: the dtype the Function computes in for a float64 input
    (a forward returning a float32 mask computes in float32), whether its forward is random
    (then no training run can be compared step for step), the ranks of input it takes (a
    forward written for (batch, features) may refuse a 1-D input), and the one last dimension
    it takes, where it takes one only (a per-channel quantizer's 100 learnt scales)."""

    float64_computed_in: torch.dtype = torch.float64
    random: bool = False
    ranks: tuple[int, ...] = (0, 1, 2, 3)
    width: int | None = None

    def lifted(self, x: torch.Tensor) -> torch.Tensor:
        """x with leading dimensions of size 1 up to the next rank the Function takes (a 1-D
        input as one row); as it is where it takes x's rank or none above it. For a Function of
        one width, x's values in rows of that width, repeated to fill the last."""
        if self.width is not None and (x.dim() == 1 or x.dim() > 1 and x.shape[-1] != self.width):
            flat = x.reshape(-1)
            rows = math.ceil(flat.numel() / self.width)
            filled = flat.repeat(math.ceil(rows * self.width / max(flat.numel(), 1)))
            return filled[: rows * self.width].reshape(rows, self.width)
        if x.dim() == 0 or x.dim() in self.ranks:
            return x
        rank = min((r for r in self.ranks if r > x.dim()), default=x.dim())
        return x.reshape((1,) * (rank - x.dim()) + tuple(x.shape))

    def shaped(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape of two or more dimensions with the Function's one width last."""
        if self.width is None or len(shape) < 2:
            return shape
        return (*shape[:-1], self.width)


@dataclass(frozen=True)
class Context:
    """The Function and everything learnt of it so far, as the next stage receives it."""

    subject: Subject
    experiment: Config
    options: Options
    probe: Probe = Probe()
    structure: Structure = Structure()
    domain: Domain = Domain()
    kinks: tuple[Kink, ...] = ()
    chosen_oracle: Oracle | None = None
    # The experiment's pre-activations (first step, and the float64 run's last).
    reached: dict[str, torch.Tensor] = field(default_factory=dict)

    def sample(
        self, shape: tuple[int, ...], generator: torch.Generator, spread: float = 3.0
    ) -> torch.Tensor:
        """float64 inputs inside the domain, off the kinks (of its one width, for a Function
        that takes one only)."""
        return sample(self.probe.shaped(shape), generator, list(self.kinks), spread, self.domain)

    @property
    def oracle(self) -> Oracle:
        """The oracle its stage chose: a check that needs it runs after that stage."""
        assert self.chosen_oracle is not None, "a check that needs the oracle runs after its stage"
        return self.chosen_oracle


@dataclass(frozen=True)
class Learned:
    """What a check teaches the context: each field given replaces the context's (a misspelt
    one is the check's own TypeError, which run_check reports)."""

    subject: Subject | None = None
    probe: Probe | None = None
    structure: Structure | None = None
    domain: Domain | None = None
    kinks: tuple[Kink, ...] | None = None
    chosen_oracle: Oracle | None = None
    reached: dict[str, torch.Tensor] | None = None

    def applied(self, context: Context) -> Context:
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(context, **{name: v for name, v in given.items() if v is not None})


@dataclass
class Learnt:
    """What a check found: its findings, what the context learns from it, facts for
    check.json and lines for the terminal."""

    findings: list[Finding]
    context: Learned = Learned()
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # What the verdict line adds: a comparison that could not run (Report.caveats).
    caveats: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    """One check: its group and name, the call that makes its finding (or what it learnt), and
    what the Function raising inside it means (wrong; unsupported where raising is a limit, as
    in half precision or on an empty tensor). A `needed` check's later stages cannot run
    without it: one that does not pass ends the check there."""

    group: Group
    name: str
    run: Callable[[], Finding | Learnt]
    raise_means: Status = Status.WRONG
    needed: bool = False
