"""Checkpoints, written atomically, verified against their archive's CRC32s, and loaded with
weights_only=True so nothing in them runs."""

import io
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

import reluexp
from reluexp.config import OPTION_GROUPS, ConfigError
from reluexp.options import foreign_keys, own_keys
from reluexp.record.summary import RunSummary, SummaryError
from reluexp.record.whole import write_whole
from reluexp.run.rundir import CHECKPOINT_NAME

# What a checkpoint's fields are (4: the outcome keeps the largest step; 5: the optimizer a
# group of settings, its state in parameter groups; 6: the gradient scaler's state,
# precision=fp16's; 7: the outcome's count of recorded and skipped steps; 8: the config holds
# only its options' own keys, each optimizer and schedule option a schema). Every earlier format
# a landed version wrote (3 on) is upgraded one format at a time (UPGRADES); a later or unknown
# one is refused, not misread. A new format bumps reluexp's version (CHANGELOG.md).
CHECKPOINT_FORMAT = 8


class UnreadableField(Exception):
    """A field an upgrade reads is absent or of another kind, or one it adds is there already
    (a later format relabelled): which, in a few words."""


def field_of(payload: dict[str, Any], dotted: str, kind: type) -> Any:
    """The payload's field at a dotted path (`config.optimizer`), if it is a `kind`."""
    value: Any = payload
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise UnreadableField(f"has no {dotted}")
        value = value[key]
    if not isinstance(value, kind):
        raise UnreadableField(f"holds a {type(value).__name__} as {dotted}, not a {kind.__name__}")
    return value


def added(payload: dict[str, Any], dotted: str, format_: int) -> None:
    """An upgrade from `format_` adds the field at `dotted`: a payload that has it is of a
    later format relabelled, whose state the upgrade would overwrite."""
    try:
        field_of(payload, dotted, object)
    except UnreadableField:
        return
    raise UnreadableField(f"has {dotted}, which no format {format_} checkpoint has")


def from_format_3(payload: dict[str, Any]) -> dict[str, Any]:
    """Format 3 -> 4: the largest step the lr advice weighs is counted from the resume on
    (format 3 kept none)."""
    added(payload, "outcome.largest_step", 3)
    payload["outcome"] = {**field_of(payload, "outcome", dict), "largest_step": 0.0}
    return payload


def from_format_4(payload: dict[str, Any]) -> dict[str, Any]:
    """Format 4 -> 5: `optimizer` was the update's name, now its group of settings (format 4
    had neither momentum nor weight decay: the defaults). Its torch state keeps the one
    parameter group it had, which the update regroups as it loads (WeightUpdate)."""
    name = field_of(payload, "config.optimizer", str)
    payload["config"] = {**payload["config"], "optimizer": {"name": name}}
    return payload


def from_format_5(payload: dict[str, Any]) -> dict[str, Any]:
    """Format 5 -> 6: no gradient scaler's state (format 5 had no precision=fp16)."""
    added(payload, "scaler", 5)
    payload["scaler"] = {}
    return payload


def from_format_6(payload: dict[str, Any]) -> dict[str, Any]:
    """Format 6 -> 7: steps recorded and skipped by fp16's gradient scaler are counted from
    the resume on (format 6 kept no count)."""
    added(payload, "outcome.recorded_steps", 6)
    outcome = field_of(payload, "outcome", dict)
    payload["outcome"] = {**outcome, "recorded_steps": 0, "skipped_steps": 0}
    return payload


def from_format_7(payload: dict[str, Any]) -> dict[str, Any]:
    """Format 7 -> 8: the config's groups keep only their option's keys (format 7's optimizer
    and schedule held every option's, those of the others at their defaults)."""
    config = field_of(payload, "config", dict)
    groups = {group: base for group, base in OPTION_GROUPS.items() if group in config}
    for group, base in groups.items():
        foreign = foreign_keys(base, field_of(payload, f"config.{group}", dict))
        if foreign:
            raise UnreadableField(f"has config.{group}.{foreign[0]}, which no {group} option has")
    payload["config"] = {
        **config,
        **{group: own_keys(base, config[group]) for group, base in groups.items()},
    }
    return payload


# format -> its upgrade to the next format.
UPGRADES = {
    3: from_format_3,
    4: from_format_4,
    5: from_format_5,
    6: from_format_6,
    7: from_format_7,
}


def save_checkpoint(run_dir: Path, payload: dict[str, Any]) -> None:
    """torch.save to a temp file, then rename: a reader sees the old checkpoint or the new one.

    Device tensors are saved as they are (torch.save copies them to the host) and loaded on the CPU.
    """
    # Serialized in memory, then written: a full disk is the OSError it is (torch.save to a
    # file reports it as `unexpected pos N vs M`).
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    write_whole(run_dir / CHECKPOINT_NAME, buffer.getvalue())


def load_checkpoint(run_dir: Path, config: dict[str, Any] | None) -> dict[str, Any]:
    """The checkpoint of the run in run_dir whose summary holds `config`, upgraded to this
    format. Tensors and plain values only; anything else is refused with a one-line reason."""
    path = run_dir / CHECKPOINT_NAME
    if not path.is_file():
        raise ConfigError(f"resume={run_dir}: no {CHECKPOINT_NAME} in that directory")
    # torch.load does not check the CRC32 that torch.save writes for every record: altered
    # weight bytes would load silently and resume to another result.
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (OSError, zipfile.BadZipFile, EOFError) as error:
        raise ConfigError(
            f"resume={run_dir}: {CHECKPOINT_NAME} is unreadable, truncated or corrupt ({error})"
        ) from None
    if damaged is not None:
        raise ConfigError(
            f"resume={run_dir}: {CHECKPOINT_NAME} is corrupt: {damaged} fails its CRC32 check"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message suggests loading with weights_only=False: that is the unsafe path.
        found = re.search(r"GLOBAL ([\w.]+)", str(error))
        holds = f"it names code ({found.group(1)})" if found else "it is not plain data"
        raise ConfigError(
            f"resume={run_dir}: {CHECKPOINT_NAME} refused: {holds}; nothing in it ran"
        ) from None
    except Exception as error:  # torch raises RuntimeError, EOFError, ... for damaged files
        raise ConfigError(
            f"resume={run_dir}: {CHECKPOINT_NAME} is unreadable, truncated or corrupt "
            f"({type(error).__name__})"
        ) from None
    if not isinstance(payload, dict) or not {"step", "model", "config"} <= payload.keys():
        raise ConfigError(f"resume={run_dir}: {CHECKPOINT_NAME} is not a reluexp checkpoint")
    found = payload.get("format")
    # A format is a whole number: 6.0 or True is no format a release wrote.
    if type(found) is not int or (found != CHECKPOINT_FORMAT and found not in UPGRADES):
        said = f"format {found!r}" if "format" in payload else "no format field"
        raise ConfigError(
            f"resume={run_dir}: {CHECKPOINT_NAME} was written by {writer(run_dir)} ({said}); "
            f"reluexp {reluexp.__version__} reads format {CHECKPOINT_FORMAT} and "
            f"upgrades {', '.join(map(str, sorted(UPGRADES)))}: resume it with the version "
            "that wrote it"
        )
    if payload["config"] != config:
        raise ConfigError(f"resume={run_dir}: {CHECKPOINT_NAME} was written by another config")
    while payload["format"] != CHECKPOINT_FORMAT:
        try:
            payload = UPGRADES[payload["format"]](payload)
        except UnreadableField as unreadable:
            raise ConfigError(
                f"resume={run_dir}: {CHECKPOINT_NAME} (format {found}) {unreadable}: its "
                f"upgrade to format {payload['format'] + 1} cannot take it"
            ) from None
        payload["format"] += 1
    return payload


def writer(run_dir: Path) -> str:
    """The version of reluexp its summary.json says wrote the run, as words."""
    try:
        version = (RunSummary.read(run_dir).versions or {}).get("reluexp")
    except SummaryError:
        version = None
    return f"reluexp {version}" if version else "another version of reluexp"
