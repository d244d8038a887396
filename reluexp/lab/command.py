"""`python -m reluexp.check`: the lab on a configured activation, with the training config's
groups and overrides; the report files in hydra.run.dir.

Exit codes: 0 the gradients are correct (with precision, convention or info findings), 1 a
finding that fails (wrong, fails at large inputs, differs from its reference, an error of the
lab; a double backward that differs with --double-backward), 2 a usage error."""

import argparse
import sys
from pathlib import Path

from reluexp.config import ConfigError
from reluexp.hydra_glue import COMPOSITION_ERRORS, compose_config, one_line
from reluexp.lab.findings import Group, Report
from reluexp.lab.pipeline import Interrupted, Options, run_checks
from reluexp.lab.subject import build_subject
from reluexp.run.device import resolve_device
from reluexp.run.process import job_environment
from reluexp.shell.session import Session
from reluexp.shell.stops import Interrupts
from reluexp.validation import task_config, validate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reluexp.check",
        description="Is an activation's backward the derivative of its forward (or of its "
        "declared surrogate)? And, given a reference, is it the built-in's function?",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also check it under torch.compile(fullgraph=True) and time it compiled by inductor "
        "beside the compiled reference (slow: dynamo's import, inductor's kernels)",
    )
    parser.add_argument("--large", action="store_true", help="also time a (2048, 2048) input")
    parser.add_argument(
        "--cost",
        action="store_true",
        help="only what it costs: the bytes it saves for backward and its forward+backward "
        "time, beside the reference's (compiled too with --compile); no report written",
    )
    parser.add_argument(
        "--thorough", action="store_true", help="train 500 steps per run instead of 50 and 200"
    )
    parser.add_argument(
        "--double-backward",
        action="store_true",
        help="a double backward that differs fails the check",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, as for python -m reluexp")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    # SIGINT and SIGTERM alike: the check ends, in one line naming its stage, where the user's
    # code runs (it may never return), or once the config is composed (shell.stops).
    line = "reluexp.check: interrupted"
    with Session.joined(line) as session, session.holding(Interrupts(line)) as interrupts:
        return check(args, interrupts)


def check(args: argparse.Namespace, interrupts: Interrupts) -> int:
    try:
        # The same config tree and overrides as `python -m reluexp`; the dir from hydra.run.dir.
        cfg = compose_config(args.overrides)
        config, check_dir = task_config(cfg), Path(cfg.hydra.run.dir)
        validate(config)
        device = resolve_device(config.device)
        # The lab's tensors are small: one thread is as fast, and on a shared machine faster
        # (no waiting on busy cores); `threads=N` still chooses (the docs' tutorial says so).
        if config.threads is None:
            config.threads = 1
        activation = config.activation
        subject = build_subject(
            activation.target,
            activation.reference,
            activation.surrogate,
            activation.params,
            activation.reference_params,
        )
        options = Options(
            thorough=args.thorough,
            compile=args.compile,
            large=args.large,
            double_backward=args.double_backward,
            domain=tuple(activation.domain) if activation.domain else None,
            cost_only=args.cost,
        )
        # The threads are the check's: put back when it ends (an in-process caller's stay).
        with job_environment(device, config.threads), interrupts.raising():
            checked = run_checks(subject, config, options)
    except (ConfigError, *COMPOSITION_ERRORS) as error:
        print(f"reluexp.check: error: {one_line(error)}", file=sys.stderr)
        return 2
    except Interrupted as interrupted:
        print(f"reluexp.check: interrupted during {interrupted.stage}", file=sys.stderr)
        return interrupts.exit_code
    except KeyboardInterrupt:
        print("reluexp.check: interrupted before the checks began", file=sys.stderr)
        return interrupts.exit_code
    if args.cost:
        return cost_said(checked.report)
    try:
        problems = checked.write(check_dir)
    except OSError as error:
        print(
            f"reluexp.check: error: cannot write the report into {check_dir}: {error.strerror}",
            file=sys.stderr,
        )
        print(checked.report)
        return 2
    report = checked.report
    if config.verbose:
        print("\n".join(report.table()))
    for line in [*report.summary_lines(), *report.notes, *problems]:
        print(line)
    print(f"{report.verdict()}. Report: {check_dir / 'check.md'}")
    if interrupts.signum is not None:  # a stop while the report was written (each file whole)
        print("reluexp.check: interrupted while writing its report", file=sys.stderr)
        return interrupts.exit_code
    return 0 if report.ok else 1


def cost_said(report: Report) -> int:
    """--cost's lines: the memory and time findings; where the returns check failed (nothing
    else could run), its line, exit 1."""
    costs = [f for f in report.findings if f.group in (Group.MEMORY, Group.COST)]
    if not costs:
        print("\n".join(report.summary_lines()))
        return 1
    for finding in costs:
        said = "saved for backward, bytes per element" if finding.group == Group.MEMORY else ""
        print(f"{finding.group.value}: {said + ': ' if said else ''}{finding.detail}")
    return 0
