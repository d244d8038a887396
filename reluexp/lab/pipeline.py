"""The lab as one flat pipeline of named stages: returns, kinks, the oracle, (a) the gradient
checks in every dtype, at kinks, edges and large inputs, (b) the reference, what the Function
supports and costs, and training parity. check_function is its Python face."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from reluexp.config import Config, validate
from reluexp.lab.calls import guarded
from reluexp.lab.cases import Kink, find_kinks, sample
from reluexp.lab.checks import (
    FLOATS,
    double_backward_check,
    edge_checks,
    gradient_checks,
    kink_checks,
    parity_checks,
    range_checks,
    returns_check,
)
from reluexp.lab.costs import cost_check, memory_check, transform_checks
from reluexp.lab.files import write_report
from reluexp.lab.findings import Finding, Report, Status
from reluexp.lab.oracle import Oracle, choose_oracle
from reluexp.lab.reference import reference_check
from reluexp.lab.subject import Subject, build_subject
from reluexp.lab.training import preactivations, training_checks

NO_REFERENCE = (
    "no reference: not compared with a built-in (whether it is the same function, its precision "
    "against the built-in's, conventions, training beside it)"
)


@dataclass
class Options:
    dtypes: tuple[torch.dtype, ...] = FLOATS
    training: bool = True
    thorough: bool = False
    compile: bool = False
    large: bool = False
    double_backward: bool = False


@dataclass
class Checked:
    """A report with what drew it: the subject, its oracle and the kinks (for the picture)."""

    report: Report
    subject: Subject
    oracle: Oracle | None = None
    kinks: list[Kink] = field(default_factory=list)

    def write(self, directory: Path) -> list[str]:
        return write_report(self.report, self.subject, self.oracle, self.kinks, directory)


class Stages:
    """Seconds per stage of a check, for its report (benchmarks/lab.py reads them)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


def run_checks(subject: Subject, experiment: Config, options: Options) -> Checked:
    """Every check, in order; a Function that returns what cannot be right is reported in that
    one line."""
    report = Report(subject.name, [], double_backward_decides=options.double_backward)
    stage = Stages()
    report.facts["seconds"] = stage.seconds
    found = report.findings
    with stage("returns"):
        returns, probe = returns_check(subject)
    found.append(returns)
    if returns.status not in (Status.PASS, Status.INFO):
        return Checked(report, subject)
    kinks: list[Kink] = []

    def listed() -> Finding:
        kinks.extend(find_kinks(subject))
        names = ", ".join(f"{k.x:g}" + (" (a step)" if k.step else "") for k in kinks)
        return Finding("oracle", "kinks of the forward", Status.INFO, names or "none")

    def chosen() -> Finding:
        x = sample((4, 5), torch.Generator().manual_seed(0), kinks)
        oracles.append(choose_oracle(subject, x, kinks))
        return Finding("oracle", "oracle", Status.INFO, oracles[0].reason)

    oracles: list[Oracle] = []
    with stage("kinks and oracle"):
        found.append(guarded("oracle", "kinks of the forward", subject, listed))
        found.append(guarded("oracle", "oracle", subject, chosen))
    if not oracles:
        return Checked(report, subject)
    oracle = oracles[0]
    with stage("gradients"):
        found.extend(gradient_checks(subject, oracle, kinks))
    with stage("double backward"):
        found.append(double_backward_check(subject, kinks, probe))
    with stage("parity, kinks, edges"):
        found.extend(parity_checks(subject, oracle, kinks, options.dtypes))
        found.extend(kink_checks(subject, oracle, kinks))
        found.extend(edge_checks(subject, oracle, kinks))
    trained: list[Finding] = []
    with stage("training"):
        if options.training:
            trained, report.facts["training"], reached = training_checks(
                experiment, subject, oracle, probe, kinks, options.thorough
            )
        else:
            reached = preactivations(experiment, None)
    with stage("large inputs"):
        found.extend(range_checks(subject, oracle, kinks, reached, options.dtypes))
    with stage("reference"):
        if subject.reference is not None:
            found.append(reference_check(subject, kinks))
        else:
            report.notes.append(NO_REFERENCE)
    with stage("transforms, memory, cost"):
        found.extend(transform_checks(subject, options.compile))
        found.append(memory_check(subject))
        cost, report.facts["cost"] = cost_check(subject, options.large)
    found.extend([cost, *trained])
    report.facts["kinks"] = [asdict(k) for k in kinks]
    report.facts["oracle"] = {"kind": oracle.kind, "reason": oracle.reason}
    return Checked(report, subject, oracle, kinks)


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype))


def check_function(
    target: Any,
    reference: Any = None,
    *,
    surrogate: Any = None,
    params: dict[str, Any] | None = None,
    dtypes: tuple[torch.dtype | str, ...] | None = None,
    training: bool = True,
    thorough: bool = False,
    double_backward: bool = False,
    compile: bool = False,
    experiment: Config | None = None,
    out_dir: str | Path | None = None,
) -> Report:
    """Check a Function (a Module or function) the way `python -m reluexp.check` does, for the
    user's own tests: `check_function(MyReLU, reference=torch.relu).ok` is False exactly when
    the command would exit 1, `str(report)` is its terminal summary, `report.findings` the rows
    of check.md. Each of target, reference and surrogate is an object or a dotted path.
    Nothing is written unless `out_dir` names a directory. `experiment`: the training run
    (default: the seed's, on the CPU). A mistake in the arguments raises ConfigError."""
    experiment = experiment or Config(device="cpu")
    validate(experiment)
    options = Options(
        dtypes=tuple(as_dtype(d) for d in dtypes) if dtypes else FLOATS,
        training=training,
        thorough=thorough,
        compile=compile,
        double_backward=double_backward,
    )
    subject = build_subject(target, reference, surrogate, params)
    checked = run_checks(subject, experiment, options)
    if out_dir is not None:
        checked.write(Path(out_dir))
    return checked.report
