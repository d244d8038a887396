"""The lab as a list of stages, each making its checks from the context the stages before it
left: what the Function returns, how its outputs depend on its inputs, its domain, its kinks,
its oracle; then (a) the gradient checks in every dtype, at kinks, edges and large inputs, (b)
the reference, training parity, what the Function supports and costs. One runner runs every
check: what the user's code raises is a finding (the check says what a raise there means),
anything else an error of the lab. check_function is the lab's Python face."""

import copy
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from reluexp.config import Config, ConfigError
from reluexp.lab.calls import ReferenceFailed, UserError, raised, users_code
from reluexp.lab.cases import Kink, find_kinks
from reluexp.lab.checks import (
    double_backward_checks,
    edge_checks,
    gradient_checks,
    kink_checks,
    parity_checks,
    range_checks,
    returns_checks,
)
from reluexp.lab.compiled import compile_checks, custom_op_checks, torch_logs_held
from reluexp.lab.context import FLOATS, Check, Context, Learned, Learnt, Options
from reluexp.lab.costs import cost_checks, memory_checks, transform_checks
from reluexp.lab.coverage import coverage_checks
from reluexp.lab.files import write_report
from reluexp.lab.findings import Finding, Group, Report, Status
from reluexp.lab.oracle import Oracle, choose_oracle
from reluexp.lab.reference import reference_checks
from reluexp.lab.shape import Domain, domain_of, stated_domain, structure_of
from reluexp.lab.subject import Subject, build_subject
from reluexp.lab.training import training_checks
from reluexp.run.device import resolve_device
from reluexp.run.process import job_environment
from reluexp.validation import validate

NO_REFERENCE = (
    "no reference: not compared with a built-in (whether it is the same function, its precision "
    "against the built-in's, conventions, training beside it)"
)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a check, with the stage that was running."""

    def __init__(self, stage: str):
        super().__init__(stage)
        self.stage = stage


@dataclass
class Checked:
    """A report with what drew it: the subject, its oracle and the kinks (for the picture)."""

    report: Report
    subject: Subject
    oracle: Oracle | None = None
    kinks: list[Kink] = field(default_factory=list)

    def write(self, directory: Path) -> list[str]:
        return write_report(self.report, self.subject, self.oracle, self.kinks, directory)


def structure_checks(context: Context) -> list[Check]:
    """How the outputs depend on the inputs (shape.structure_of), a random forward's with its
    randomness fixed."""

    def check() -> Learnt:
        samples = [context.sample((4, 6), torch.Generator().manual_seed(s)) for s in (8, 9)]
        with users_code(context.subject):
            structure = structure_of(context.subject, samples, context.probe.float64_computed_in)
        if structure.pointwise:
            return Learnt([], Learned(structure=structure))
        described = structure.describe()
        finding = Finding(Group.ORACLE, "structure", Status.INFO, described)
        return Learnt([finding], Learned(structure=structure), notes=[f"info: {described}"])

    return [Check(Group.ORACLE, "structure", check, needed=True)]


def domain_checks(context: Context) -> list[Check]:
    """Where the Function is checked: activation.domain where stated; else, for a Function
    whose forward is not finite everywhere, where it is (shape.domain_of)."""

    def check() -> Learnt:
        stated = context.options.domain
        if stated is not None:
            domain = stated_domain(stated)
            said = f"checked on {domain.describe()}, as stated (activation.domain)"
        elif context.structure.pointwise:
            with users_code(context.subject):
                domain = domain_of(context.subject)
            said = f"checked on {domain.describe()}, where the forward is finite"
        else:
            domain = Domain()
        if domain.whole:
            return Learnt([])
        finding = Finding(Group.ORACLE, "domain", Status.INFO, said)
        return Learnt([finding], Learned(domain=domain), notes=[f"info: {said}"])

    return [Check(Group.ORACLE, "domain", check, needed=True)]


def kink_search(context: Context) -> list[Check]:
    """The kinks of the forward (on 1-D grids: for a pointwise Function)."""
    subject = context.subject

    def kinks() -> Learnt:
        if not context.structure.pointwise:
            detail = "not looked for: the forward is not the same function at every element"
            return Learnt([Finding(Group.ORACLE, "kinks of the forward", Status.INFO, detail)])
        with users_code(subject):
            found = tuple(find_kinks(subject, context.domain, context.probe.float64_computed_in))
        names = ", ".join(f"{k.x:g}" + (" (a step)" if k.step else "") for k in found)
        finding = Finding(Group.ORACLE, "kinks of the forward", Status.INFO, names or "none")
        return Learnt([finding], Learned(kinks=found))

    return [Check(Group.ORACLE, "kinks of the forward", kinks, needed=True)]


def oracle_choice(context: Context) -> list[Check]:
    """The oracle (oracle.choose_oracle), knowing the structure, the domain and the kinks."""

    def chosen() -> Learnt:
        x = context.sample((4, 5), torch.Generator().manual_seed(0))
        with users_code(context.subject):
            oracle = choose_oracle(
                context.subject,
                x,
                list(context.kinks),
                context.structure,
                context.domain,
                context.probe.float64_computed_in,
            )
        return Learnt(
            [Finding(Group.ORACLE, "oracle", Status.INFO, oracle.reason)],
            Learned(chosen_oracle=oracle),
        )

    return [Check(Group.ORACLE, "oracle", chosen, needed=True)]


@dataclass(frozen=True)
class Stage:
    """A named step of the check, timed as one: what makes its checks from the context, in
    order (each maker sees what the checks before it learnt)."""

    name: str
    makers: tuple[Callable[[Context], list[Check]], ...]


STAGES = [
    Stage("returns", (returns_checks,)),
    Stage("structure and domain", (structure_checks, domain_checks)),
    Stage("kinks and oracle", (kink_search, oracle_choice)),
    Stage("gradients", (gradient_checks,)),
    Stage("double backward", (double_backward_checks,)),
    Stage("parity, kinks, edges", (parity_checks, kink_checks, edge_checks)),
    Stage("training", (training_checks,)),
    Stage("large inputs", (range_checks,)),
    Stage("every magnitude", (coverage_checks,)),
    Stage("reference", (reference_checks,)),
    Stage("custom op", (custom_op_checks,)),
    # Before the cost's compiled times: dynamo says a graph break's reason once a process.
    Stage("compile", (compile_checks,)),
    Stage("transforms, memory, cost", (transform_checks, memory_checks, cost_checks)),
]


def run_check(check: Check, subject: Subject) -> Learnt:
    """The one place a check's failure is caught: the user's code raising (or returning what
    cannot be right) is the finding the check says it means, in one line; anything else is an
    error of the lab, with its traceback. torch's warnings about the user's Function stay out
    of the terminal."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            done = check.run()
    except ReferenceFailed as error:  # no finding about the Function: its comparison not made
        finding = Finding(check.group, check.name, Status.UNSUPPORTED, f"not compared: {error}")
        return Learnt([finding], caveats=[f"{error}: not compared there (check.md says where)"])
    except UserError as error:
        return Learnt([Finding(check.group, check.name, check.raise_means, str(error))])
    except Exception as error:
        finding = Finding(
            check.group, check.name, Status.ERROR, raised(error), traceback=traceback.format_exc()
        )
        return Learnt([finding])
    return done if isinstance(done, Learnt) else Learnt([done])


# What `--cost` runs: what every other check relies on (the returns), then what the Function
# saves for backward and what a forward + backward takes (compiled too with --compile).
COST_STAGES = ("returns", "transforms, memory, cost")


def run_checks(subject: Subject, experiment: Config, options: Options) -> Checked:
    """Every stage in order (staged()). torch's own log records (a Function's own
    @torch.compile recompiling for each dtype) are held off the terminal and kept in
    check.json's `torch_log`."""
    with torch_logs_held() as logged:
        checked = staged(subject, experiment, options)
    if logged:
        checked.report.facts["torch_log"] = logged
    return checked


def staged(subject: Subject, experiment: Config, options: Options) -> Checked:
    """Every stage in order, each check run by run_check; a needed check that does not pass
    ends the check there (what the later ones need could not be learnt). Ctrl-C raises
    Interrupted, naming the stage."""
    report = Report(subject.name, [], double_backward_decides=options.double_backward)
    seconds: dict[str, float] = {}
    report.facts["seconds"] = seconds
    context = Context(subject, experiment, options)
    stages = [s for s in STAGES if s.name in COST_STAGES] if options.cost_only else STAGES
    for stage in stages:
        start = time.perf_counter()
        try:
            for make in stage.makers:
                for check in make(context):
                    learnt = run_check(check, subject)
                    report.findings.extend(learnt.findings)
                    report.facts |= learnt.facts
                    report.notes.extend(learnt.notes)
                    report.caveats.extend(c for c in learnt.caveats if c not in report.caveats)
                    context = learnt.context.applied(context)
                    if check.needed and any(
                        f.status not in (Status.PASS, Status.INFO) for f in learnt.findings
                    ):
                        return Checked(report, subject)
        except KeyboardInterrupt:
            raise Interrupted(stage.name) from None
        finally:
            seconds[stage.name] = time.perf_counter() - start
    if options.cost_only:
        return Checked(report, subject)
    if subject.reference is None:
        report.notes.append(NO_REFERENCE)
    oracle = context.oracle
    report.facts["kinks"] = [asdict(k) for k in context.kinks]
    report.facts["oracle"] = {"kind": oracle.kind, "reason": oracle.reason}
    # The picture draws the Function on a line of inputs: only what holds at every element.
    drawn = oracle if context.structure.pointwise else None
    return Checked(report, subject, drawn, list(context.kinks))


def checked_dtypes(dtypes: Any) -> tuple[torch.dtype, ...]:
    """check_function's dtypes: floating torch dtypes or their names, in a tuple or list."""
    if dtypes is None:
        return FLOATS
    if isinstance(dtypes, str | torch.dtype) or not isinstance(dtypes, tuple | list) or not dtypes:
        raise ConfigError(
            f"dtypes={dtypes!r}: expected a tuple of floating dtypes, such as "
            "(torch.float32,) or ('float32', 'float64')"
        )
    checked = []
    for dtype in dtypes:
        found = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
        if found not in FLOATS:
            raise ConfigError(
                f"dtypes: {dtype!r} is not one the lab checks in "
                "(float32, float64, float16, bfloat16)"
            )
        checked.append(found)
    return tuple(checked)


def checked_out_dir(out_dir: str | Path | None) -> Path | None:
    """Where the report goes: a directory, or a path whose nearest existing part is one."""
    if out_dir is None:
        return None
    path = Path(out_dir)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(f"out_dir={str(out_dir)!r}: {existing} is a file, not a directory")
    return path


def check_function(
    target: Any,
    reference: Any = None,
    *,
    surrogate: Any = None,
    params: dict[str, Any] | None = None,
    reference_params: dict[str, Any] | None = None,
    dtypes: tuple[torch.dtype | str, ...] | None = None,
    training: bool = True,
    thorough: bool = False,
    double_backward: bool = False,
    compile: bool = False,
    domain: tuple[float, float] | None = None,
    experiment: Config | None = None,
    out_dir: str | Path | None = None,
) -> Report:
    """Check a Function (a Module or function) the way `python -m reluexp.check` does, for the
    user's own tests: `check_function(MyReLU, reference=torch.relu).ok` is False exactly when
    the command would exit 1, `str(report)` is its terminal summary, `report.findings` the rows
    of check.md. Each of target, reference and surrogate is an object or a dotted path.
    `reference_params`: keyword arguments of the reference alone (`{"approximate": "tanh"}`
    for F.gelu). `domain=(low, high)`: check only there. Nothing is written unless `out_dir` names a
    directory. `experiment`: the training run (default: the seed's, on the CPU). A mistake in
    the arguments raises ConfigError before anything runs. It runs on one torch thread (the
    lab's tensors are small), or `experiment.threads`, as the command does; the caller's
    threads, random stream and logging are left as they were."""
    if experiment is not None and not isinstance(experiment, Config):
        raise ConfigError(
            f"experiment={experiment!r}: expected a reluexp.config.Config (or None: the seed's)"
        )
    if params is not None and not isinstance(params, dict):
        raise ConfigError(f"params={params!r}: expected a dict of the target's arguments")
    experiment = copy.deepcopy(experiment) if experiment else Config(device="cpu")
    if domain is not None:
        experiment.activation.domain = list(domain)
    validate(experiment)
    device = resolve_device(experiment.device)
    options = Options(
        dtypes=checked_dtypes(dtypes),
        training=training,
        thorough=thorough,
        compile=compile,
        double_backward=double_backward,
        domain=tuple(experiment.activation.domain) if experiment.activation.domain else None,
    )
    directory = checked_out_dir(out_dir)
    subject = build_subject(target, reference, surrogate, params, reference_params)
    # One torch thread unless the experiment says: the command's policy (lab/command.py).
    threads = 1 if experiment.threads is None else experiment.threads
    with job_environment(device, threads):
        checked = run_checks(subject, experiment, options)
    if directory is not None:
        checked.write(directory)
    return checked.report
