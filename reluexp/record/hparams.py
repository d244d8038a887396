"""The config values a run is compared by in TensorBoard's HParams tab."""

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reluexp.config import Config, config_dict

if TYPE_CHECKING:  # a sweep's report names trials without importing torch
    import torch


def hparam(value: Any) -> str | float | bool:
    """A config value as the HParams tab takes it: a string, a number or a bool."""
    if value is None:
        return ""
    return value if isinstance(value, str | int | float | bool) else str(value)


def hparams(
    config: Config, device: "torch.device", sizes: tuple[int, int, int], loss: str
) -> dict[str, Any]:
    """The config values a run is compared by in TensorBoard's HParams tab, named by their
    keys (so a sweep's varying keys name them), in the order the tab shows them when none
    varies: what a comparison is usually about first. `sizes`: the data's examples, inputs
    and outputs; `loss`: the objective's name."""
    examples, d_in, d_out = sizes
    return {
        "activation": config.activation.name,
        # A string: the tab shows numbers with four decimals, and filters strings by value.
        "seed": str(config.seed),
        "lr": config.lr,
        # Custom runs are told apart by what they train, not by the option's name.
        "activation.target": config.activation.target,
        "activation.params": json.dumps(config.activation.params, sort_keys=True),
        "data": config.data.name.value,
        "model": config.model.name.value,
        # The model option's own keys (each option has its schema).
        **{
            f"model.{key}": hparam(value)
            for key, value in config_dict(config)["model"].items()
            if key != "name"
        },
        "data.n": examples,
        "data.d_in": d_in,
        "data.d_out": d_out,
        "data.batch_size": config.data.batch_size or examples,
        "loss": loss,
        "steps": config.steps,
        "device": str(device),
        "dtype": config.dtype.value,
        "precision": config.precision.value,
        "optimizer": config.optimizer.name.value,
        "schedule": config.schedule.name.value,
    }


def trial_name(overrides: Sequence[str], varying: frozenset[str], run_dir: Path) -> str:
    """A sweep job's name in the HParams tab's Trial ID column, which shows about its first 16
    characters: the values that tell it from its sweep's other jobs (their keys are columns
    beside it), then its sweep and job number, which no other job in a logdir shares:
    `myrelu 1 (2026-12-06_09-25-38_910/001)`. '' for a run that varies nothing: the tab shows
    its run name."""
    told = [o for o in overrides if o.partition("=")[0].lstrip("+~") in varying]
    if not told:
        return ""
    return f"{values_of(told)} ({run_dir.parent.name}/{run_dir.name.split('_', 1)[0]})"


def values_of(overrides: Iterable[str]) -> str:
    """`myrelu 1` for `activation=myrelu seed=1`: a trial's name leads with these (an override
    without a value, `(defaults)`, as it is)."""
    return " ".join(o.partition("=")[2] or o for o in overrides)
