"""The lab's verdict on a sweep's custom Function, as its report asks for it
(reluexp.sweeps.report.verdicts): cheap to import, for the commands that end a sweep or write
its report; the lab itself (and torch) is imported when a Function is checked."""

from pathlib import Path
from typing import Any

from reluexp.config import Config


def check_activation(activation: dict[str, Any], directory: Path) -> str:
    """The check of a sweep's activation (its target, reference, surrogate, params,
    reference_params and domain, as a job's config holds them), written into directory; its
    verdict (`gradients correct`, `WRONG`, ...). The default check but its training runs: the
    sweep itself trains the Function beside its reference (its report pairs them by seed), and
    they were most of the check's time. On one thread, as `python -m reluexp.check` runs: the
    lab's tensors are small."""
    from reluexp.lab.pipeline import check_function

    report = check_function(
        activation["target"],
        activation["reference"],
        surrogate=activation["surrogate"],
        params=activation["params"] or None,
        reference_params=activation["reference_params"] or None,
        domain=tuple(activation["domain"]) if activation["domain"] else None,
        training=False,
        experiment=Config(device="cpu", threads=1),
        out_dir=directory,
    )
    return report.verdict(lines_above=False).removeprefix(f"{report.name}: ")
