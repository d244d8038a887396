"""Hydra glue shared by the entry points (`python -m reluexp`, `reluexp.check`): where the
configs are, the schema per option, the resolvers they use, the named studies, --help's keys
and their meanings, and composition errors as one line."""

import json
import os
import re
import string
import textwrap
import traceback
from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from datetime import datetime
from enum import Enum
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import hydra
import omegaconf
import yaml
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import reluexp
from reluexp.config import OPTION_GROUPS, Config
from reluexp.options import OPTION_SCHEMAS
from reluexp.validation import OPEN_KEYS, TOP_GROUPS, close_match

# conf/ and experiments/ ship inside the package (pyproject.toml maps them), so an installed
# wheel finds them from any directory, and an editable install finds the repository's.
CONFIG_MODULE = "reluexp.conf"
CONFIG_PATH = f"pkg://{CONFIG_MODULE}"
EXPERIMENTS_MODULE = "reluexp.experiments"
# Where the options' schemas are stored, schema/model/NAME and schema/data/NAME (not options a
# user picks).
SCHEMA_GROUP = "schema"
# Groups that no command line chooses: the schemas, and what a data option sets for a model
# option (conf/data_model/, chosen by the two).
UNCHOSEN_GROUPS = ("schema", "data_model")


def run_id() -> str:
    """A directory name unique across processes and below one second: time, microseconds, pid."""
    return f"{datetime.now():%Y-%m-%d_%H-%M-%S.%f}_{os.getpid()}"


def every_within(every: int, steps: int, points: int) -> int:
    """`every` steps, or fewer where a run of `steps` would get under `points` that way: a
    preset's logging (every 100 of the paper's 64,000 steps) tried for 50 steps still draws
    curves."""
    return max(1, min(int(every), int(steps) // int(points)))


# Hydra's groups --help lists after reluexp's: where a sweep's jobs run, which points it tries.
HYDRA_GROUPS = ("hydra/launcher", "hydra/sweeper")


def help_groups() -> str:
    """--help's groups as `group: option, ...`: reluexp's own (conf/ and experiments/, not the
    model options' schemas), then those that choose where a sweep's jobs run and which points
    it tries (Hydra's installed options)."""
    loader = GlobalHydra.instance().config_loader()

    def groups(parent: str) -> list[str]:
        found = []
        for child in loader.list_groups(parent):
            group = f"{parent}/{child}" if parent else child
            if group not in ("hydra", *UNCHOSEN_GROUPS):
                found += [group, *groups(group)]
        return found

    # Each group's options listed once: a listing builds Hydra's config repository anew.
    options = {g: loader.get_group_options(g) for g in (*sorted(groups("")), *HYDRA_GROUPS)}
    return "".join(
        f"{group}: {', '.join(sorted(found))}\n" for group, found in options.items() if found
    )


def key_meanings(chosen: dict[str, type] | None = None) -> dict[str, str]:
    """Every key of the schema, dotted (`data.batch_size`), with its meaning (its field's
    metadata), and for a choice its options (its Enum's docstring): what --help prints, from
    the one copy. A group with a schema per option (model, data) has the keys of the option
    `chosen` names for it, or else of every option, each key once, its meaning prefixed with
    the options that have it where not all do (`model=resnet: ...`)."""
    meanings: dict[str, str] = {}

    def meaning_of(schema_field: Any) -> str:
        kind = schema_field.type
        text = schema_field.metadata.get("help", "")
        if isinstance(kind, type) and issubclass(kind, Enum):
            text += " " + " ".join((kind.__doc__ or "").split())
        return text.strip()

    def walk(schema: type, prefix: str) -> None:
        for schema_field in fields(schema):
            kind, key = schema_field.type, prefix + schema_field.name
            if kind in OPTION_SCHEMAS:
                walk_options(schema_field.name, kind, key + ".")
            elif is_dataclass(kind):
                walk(kind, f"{key}.")
            else:
                meanings[key] = meaning_of(schema_field)

    def walk_options(group: str, base: type, prefix: str) -> None:
        names, schemas = OPTION_SCHEMAS[base]
        if chosen and group in chosen:
            options = {chosen[group]().name.value: chosen[group]}
        else:
            options = {name.value: schemas[name] for name in names}
        by_key: dict[str, list[tuple[str, str]]] = {}
        for option_name, option in options.items():
            for schema_field in fields(option):
                by_key.setdefault(schema_field.name, []).append(
                    (option_name, meaning_of(schema_field))
                )
        for name, found in by_key.items():
            if len(found) == len(options):  # every option's: one meaning
                meanings[prefix + name] = found[0][1]
            else:  # each meaning once, after the options it is theirs for
                by_text: dict[str, list[str]] = {}
                for option, text in found:
                    by_text.setdefault(text, []).append(f"{group}={option}")
                meanings[prefix + name] = " ".join(
                    f"{', '.join(options)}: {text}" for text, options in by_text.items()
                )

    walk(Config, "")
    return meanings


def help_keys(_root_: DictConfig) -> str:
    """--help's keys: each as `key=value` with this command's value, then its meaning."""
    lines = []
    chosen = {group: OmegaConf.get_type(_root_[group]) for group in OPTION_GROUPS}
    for key, meaning in key_meanings(chosen).items():
        value = OmegaConf.select(_root_, key)
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value)
        text = value.value if isinstance(value, Enum) else value
        lines.append(f"{key}={text if isinstance(text, str) else json.dumps(text)}")
        lines += textwrap.wrap(meaning, 96, initial_indent="    ", subsequent_indent="    ")
    # Hydra fills the template with string.Template, to which `$` is a placeholder.
    return "\n".join(lines).replace("$", "$$")


def register(**resolvers: Callable[..., Any]) -> None:
    """What Hydra needs to compose reluexp's configs, made known to it once per process (each
    entry point calls it before it composes): the resolvers conf/config.yaml uses (and the
    entry point's own `resolvers`), the schema and a schema per option, the named studies."""
    for name, resolver in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
    if OmegaConf.has_resolver("run_id"):
        return
    # Cached, like Hydra's own `now`, so every read of hydra.run.dir gives the same name.
    OmegaConf.register_new_resolver("run_id", run_id, use_cache=True)
    # `resume=<dir>` continues in that directory; Hydra's own files for it go beside the first.
    OmegaConf.register_new_resolver(
        "run_dir", lambda resume: resume or f"outputs/runs/{run_id()}", use_cache=True
    )
    OmegaConf.register_new_resolver(
        "hydra_subdir",
        lambda resume: f".hydra/resume_{run_id()}" if resume else ".hydra",
        use_cache=True,
    )
    OmegaConf.register_new_resolver("every_within", every_within)
    OmegaConf.register_new_resolver("help_groups", help_groups)
    OmegaConf.register_new_resolver("help_keys", help_keys)
    store = ConfigStore.instance()
    # The schema: conf/config.yaml starts from it (every key's default is written once, there).
    # Its model, data, optimizer and schedule are what every option of theirs shares; each
    # option's file (conf/model/NAME.yaml) starts from the option's own schema
    # (schema/model/NAME), so a key of another option is refused as the config is composed
    # (Hydra's schema-per-option pattern).
    base_config = OmegaConf.structured(Config)
    for group, base in OPTION_GROUPS.items():
        setattr(base_config, group, base())
    store.store(name="base_config", node=base_config)
    for schema_field in fields(Config):
        if schema_field.type in OPTION_SCHEMAS:
            names, schemas = OPTION_SCHEMAS[schema_field.type]
            for option in names:
                store.store(
                    group=f"{SCHEMA_GROUP}/{schema_field.name}",
                    name=option.value,
                    node=schemas[option](name=option),
                )
    # Named studies live at the top level, outside conf/; each becomes an option of
    # `experiment=`. A user's own `experiment/NAME.yaml` on hydra.searchpath joins them through
    # Hydra itself.
    for preset in sorted(resources.files(EXPERIMENTS_MODULE).iterdir(), key=lambda p: p.name):
        if preset.name.endswith(".yaml"):
            store.store(
                group="experiment",
                name=preset.name.removesuffix(".yaml"),
                node=OmegaConf.create(preset.read_text()),
                package="_global_",
            )


# What Hydra's own --help fills in besides the template's interpolations, each listing every
# group's options anew (about 70% of its time, whether the template uses them or not).
HYDRA_HELP_PLACEHOLDERS = ("$FLAGS_HELP", "$HYDRA_CONFIG_GROUPS", "$APP_CONFIG_GROUPS", "$CONFIG")


def help_text(overrides: list[str]) -> str | None:
    """--help: hydra.help's template, composed with the command line's overrides (its groups
    and keys, the chosen options' values), as Hydra's own --help prints it; None for a
    template that uses Hydra's placeholders, which Hydra's --help fills in."""
    register()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        config = compose("config", overrides=overrides, return_hydra_config=True)
        raw = OmegaConf.to_container(config.hydra.help, resolve=False)["template"]
        if any(placeholder in raw for placeholder in HYDRA_HELP_PLACEHOLDERS):
            return None
        # Hydra fills the template with string.Template: `$$` (help_keys' `$`) is one `$`.
        return string.Template(config.hydra.help.template).substitute()


def compose_config(overrides: list[str]) -> DictConfig:
    """The config `python -m reluexp OVERRIDES` would run, `hydra` node included."""
    register()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


# What composing a config raises for a user's mistake: Hydra's and OmegaConf's errors, and a
# YAML file (theirs, on hydra.searchpath) that does not parse.
# A config file that is not UTF-8 fails in Hydra's reader, before YAML sees it.
COMPOSITION_ERRORS = (HydraException, OmegaConfBaseException, yaml.YAMLError, UnicodeDecodeError)


def hydra_quoted_resume(arg: str) -> str:
    """`resume=<dir>` as a user pastes it, quoted for Hydra: job directories hold `=` and `,`."""
    value = arg.removeprefix("resume=")
    if not arg.startswith("resume=") or value == "null" or value[:1] in ("'", '"'):
        return arg
    return "resume='" + value.replace("'", "\\'") + "'"


def raised_by_hydra(error: BaseException) -> bool:
    """The error comes from Hydra's or OmegaConf's own code (Hydra's checks of the command
    line's flags, such as `-m --cfg job`; OmegaConf's assertion on a key under a null node),
    not from reluexp's or a user's."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and any(
        Path(frames[-1].filename).is_relative_to(package) for package in HYDRA_PACKAGES
    )


HYDRA_PACKAGES = (Path(hydra.__file__).parent, Path(omegaconf.__file__).parent)
# The Optuna sweeper's search space, a distribution per key (experiments/lr_search.yaml).
SEARCH_SPACE = "hydra.sweeper.params."
# The quotes a value may carry for Hydra's grammar ('...' or "...").
QUOTES = "'\""


def search_space_advice(args: Iterable[str]) -> str:
    """For a command line that sets the search space key by key (`hydra.sweeper.params.lr=
    tag(...)`: Hydra's grammar reads a sweep of its own config there, and the node may hold no
    key): the override that searches the key, as Hydra's Optuna sweeper takes it ('' where
    the command line sets none)."""
    for arg in args:
        key, _, value = arg.partition("=")
        key = key.lstrip("+~")
        if key.startswith(SEARCH_SPACE) and value:
            shown = f"{key.removeprefix(SEARCH_SPACE)}={value.strip(QUOTES)}"
            return f"; a search space on the command line is the key's own override: '{shown}'"
    return ""


def versions_line() -> str:
    """`--version`: what decides a run's numbers and behaviour, without importing torch."""
    return (
        f"reluexp {reluexp.__version__}, torch {metadata.version('torch')}, "
        f"Hydra {hydra.__version__}"
    )


def one_line(error: BaseException) -> str:
    """A composition error (COMPOSITION_ERRORS) as one line, naming the key or the file and
    line it is about."""
    if isinstance(error, UnicodeDecodeError):  # Hydra's reader does not say which file
        byte = error.object[error.start : error.start + 1].hex()
        return (
            f"a config file is not UTF-8 text (byte 0x{byte} at offset {error.start}); "
            "Hydra reads YAML as UTF-8: check the files on hydra.searchpath"
        )
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    text = str(error).strip()
    lines = text.splitlines() or [type(error).__name__]
    line = lines[0]
    if line.endswith(":") and len(lines) > 1:  # `... raised while composing config:` + what
        line = f"{line} {lines[1].strip()}"
    # OmegaConf's errors know the key they are about; the first line does not always say it.
    key = getattr(error, "full_key", None) or re.search(r"full_key: (\S+)", text)
    key = key.group(1) if isinstance(key, re.Match) else key
    if key and f"{key}=" not in line and f"'{key}'" not in line:
        line = f"{line} ({key})" if line.startswith("In '") else f"{key}: {line}"
    cause = str(error.__cause__).strip() if error.__cause__ is not None else ""
    if cause:
        line = f"{line.rstrip('.')}: {cause.splitlines()[0]}"
    append = re.search(r"To append to your config use (\+\S+)", text)
    if append:
        line = unknown_key_line(error.__cause__, append.group(1)) or line
    # A missing group option comes with the available ones, one per tab-indented line.
    options = re.findall(r"^\t(\S+)$", text, flags=re.M)
    if options:
        line += f"; available: {', '.join(options)}"
    return line


def options_with(group: str, key: str) -> list[str]:
    """The options of a group with a schema each (model, data) whose schema has the key, as
    `model=NAME`."""
    names, schemas = OPTION_SCHEMAS[OPTION_GROUPS[group]]
    return [
        f"{group}={option.value}"
        for option in names
        if key in {schema_field.name for schema_field in fields(schemas[option])}
    ]


def unknown_key_line(error: BaseException | None, append: str) -> str | None:
    """An override of a key the config does not have, as one line: the key it most likely
    meant first, and Hydra's `+` only where a new key means something (OPEN_KEYS: a custom
    activation's params)."""
    parent = getattr(error, "parent_node", None)
    full_key = getattr(error, "full_key", None)
    if not isinstance(parent, DictConfig) or not full_key:
        return None
    key = str(full_key).rpartition(".")[2]
    prefix = str(full_key)[: -len(key)]
    candidates = [str(k) for k in parent if k != "hydra"] + (list(TOP_GROUPS) if not prefix else [])
    match = close_match(key, candidates)
    line = f"{full_key}: no such key"
    group = prefix.rstrip(".")
    owners = options_with(group, key) if group in OPTION_GROUPS else []
    if group in OPTION_GROUPS:  # each option has its own keys
        line += f" for {group}={OmegaConf.to_container(parent, enum_to_str=True)['name']}"
    if owners:
        line += f" (only {', '.join(owners)} {'has' if len(owners) == 1 else 'have'} it)"
    elif match:
        line += f"; did you mean {prefix}{match}?"
    if prefix.rstrip(".") in OPEN_KEYS:
        return f"{line} (a new key is added with a +: {append})"
    return line
