"""The lab's verdict on each custom Function a sweep trained, once per Function: the lab's
default check is written into the sweep's lab/ directory, and every later report reads its
check.json back. The sweeps layer does not import the lab: the commands that end a sweep or
write its report pass the lab's check in (FunctionCheck)."""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reluexp.config import ConfigError
from reluexp.sweeps.report.discovery import Job

LAB_DIR = "lab"
# The activation keys that make the Function the lab checks (its name aside).
FUNCTION_KEYS = ("target", "reference", "surrogate", "params", "reference_params", "domain")

# Checks an activation (these keys of a job's config) and writes check.json into the directory;
# raises ConfigError where the lab cannot take it (a target that does not import), OSError where
# it cannot write there, NotChecked where the check did not run to its end.
FunctionCheck = Callable[[dict[str, Any], Path], object]


class NotChecked(Exception):
    """A check that did not run to its end (its time was up, a stop came): why, in a few
    words, the verdict's text after `not checked: `."""


@dataclass(frozen=True)
class Verdict:
    # The Function's name (its target's last part).
    name: str
    # "gradients correct", the failing finding's kind in capitals (WRONG), or why there is none.
    text: str
    # Its check.md, relative to the sweep directory; None where nothing was checked.
    report: str | None = None
    passed: bool | None = None


def custom_function(job: Job) -> dict[str, Any] | None:
    """The Function a custom job trained: an activation that is not its own reference, nor one
    of torch's own (`torch.nn.SiLU` beside `F.silu` is the built-in, not a Function to check)."""
    config = job.summary.config
    if config is None:
        return None
    activation = config["activation"]
    target = str(activation["target"])
    if target == activation["reference"] or target.startswith("torch."):
        return None
    return {key: activation.get(key) for key in FUNCTION_KEYS}


def function_name(function: dict[str, Any]) -> str:
    """Its target's last part: `MyReLU`."""
    return str(function["target"]).rsplit(".", 1)[-1]


def check_dir(function: dict[str, Any]) -> Path:
    """Its directory below the sweep's: its name and a digest of what makes it (the same
    target with other params is another Function)."""
    digest = hashlib.sha1(json.dumps(function, sort_keys=True).encode()).hexdigest()[:8]
    return Path(LAB_DIR, f"{function_name(function)}-{digest}")


def verdict_in(sweep_dir: Path, function: dict[str, Any], check: FunctionCheck | None) -> Verdict:
    """The check.json already written, else the check's, run now (where it was passed in)."""
    name, relative = function_name(function), check_dir(function)
    checked = sweep_dir / relative / "check.json"
    if not checked.is_file() and check is not None:
        try:
            check(function, sweep_dir / relative)
        except (ConfigError, NotChecked) as error:
            return Verdict(name, f"not checked: {error}")
        except OSError as error:  # its report could not be written (a full disk): the rest stands
            return Verdict(name, f"not checked: cannot write {relative}: {error.strerror}")
    try:
        payload = json.loads(checked.read_text())
    except FileNotFoundError:
        return Verdict(name, "")
    except (OSError, ValueError) as error:
        return Verdict(name, f"unreadable {relative / 'check.json'}: {error}")
    problem = shape_problem(payload)
    if problem:
        return Verdict(name, f"unreadable {relative / 'check.json'}: {problem}")
    passed = payload["passed"]
    text = "gradients correct" if passed else payload["verdict"].upper()
    return Verdict(name, text, str(relative / "check.md"), passed)


def shape_problem(payload: Any) -> str:
    """What a check.json read back lacks of the lab's shape (an object whose `passed` is true
    or false and whose `verdict` is text), in a few words; '' where it has it."""
    if not isinstance(payload, dict):
        return f"holds {type(payload).__name__ if payload is not None else 'null'}, not an object"
    for field, kind, expected in (("passed", bool, "true or false"), ("verdict", str, "text")):
        if not isinstance(payload.get(field), kind):
            return f"its {field} is {json.dumps(payload.get(field))}, not {expected}"
    return ""


def lab_verdicts(
    sweep_dir: Path, groups: dict[str, list[Job]], check: FunctionCheck | None
) -> dict[str, Verdict]:
    """Each custom group's verdict, by its label; a Function several groups trained is checked
    once."""
    verdicts: dict[str, Verdict] = {}
    by_function: dict[Path, Verdict] = {}
    for label, jobs in groups.items():
        function = next((f for job in jobs if (f := custom_function(job)) is not None), None)
        if function is not None:
            key = check_dir(function)
            if key not in by_function:
                by_function[key] = verdict_in(sweep_dir, function, check)
            verdicts[label] = by_function[key]
    return verdicts
