"""`python -m reluexp`: the command line. --version and --help answered without composing a run,
then the Hydra app in the command's session (reluexp/shell/): Hydra's registration, its errors
as one line, how the process ends on a stop at start-up.

torch is imported where a run starts, not here: `--help` and a mistyped key answer without it
(importing torch takes about a second)."""

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import hydra

from reluexp import hydra_glue
from reluexp.hydra_glue import (
    COMPOSITION_ERRORS,
    CONFIG_PATH,
    help_text,
    hydra_quoted_resume,
    one_line,
    raised_by_hydra,
    search_space_advice,
    versions_line,
)
from reluexp.shell.session import Session


def register() -> None:
    """What the Hydra app needs of Hydra: reluexp's configs and resolvers (a sweep job's
    directory name among them), and its launcher plugin, which Hydra finds by listing its
    `hydra_plugins` namespace, which an editable install's import hook cannot list. After
    Hydra's scan of the installed plugins (Plugins.instance() scans once), so that its configs
    replace hydra-submitit-launcher's presets of the same names."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.reluexp_launcher import launchers
    from reluexp.sweeps.names import job_dir_name

    hydra_glue.register(job_dir_name=job_dir_name)
    launchers.register(Plugins.instance())


def main() -> None:
    """The console script and `python -m reluexp`. Ends as the app ends: by returning, or
    with SystemExit carrying the exit status."""
    for name in ("stdout", "stderr"):
        # Started with it closed (`2>&-`, a daemon): what reluexp says there is dropped.
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (the process's to the end)
    app()


def app() -> None:
    """The Hydra app in the command's session, with a composition error as one line and exit
    2, and a stop at start-up as one line and 128 + the signal."""
    if "--version" in sys.argv[1:]:  # Hydra's own names Hydra only
        print(versions_line())
        return
    sys.argv[1:] = [hydra_quoted_resume(arg) for arg in sys.argv[1:]]
    register()
    if {"--help", "-h"} & set(sys.argv[1:]) and say_help(sys.argv[1:]):
        return
    from reluexp.shell.lifecycle import Job  # what a run or a sweep needs, --help does not

    task = hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")(Job())
    # SIGINT and SIGTERM at start-up (a sweep's own stop takes over once it has started, a
    # run's once it trains).
    with Session.joined() as session:
        try:
            with errors_raised_to_us() as full_error:
                task()
        except KeyboardInterrupt:
            print(session.start_up.line, file=sys.stderr)
            sys.exit(session.start_up.exit_code)
        except COMPOSITION_ERRORS as error:
            if full_error:
                raise
            advice = search_space_advice(sys.argv[1:])
            print(f"reluexp: error: {one_line(error)}{advice}", file=sys.stderr)
            sys.exit(2)
        except (ValueError, AssertionError) as error:
            if full_error or not raised_by_hydra(error):
                raise
            # `-m --cfg job`; OmegaConf's assertion on a key under a null node
            # (hydra.sweeper.params.lr=... where the sweeper's params are null).
            advice = search_space_advice(sys.argv[1:])
            print(f"reluexp: error: {one_line(error)}{advice}", file=sys.stderr)
            sys.exit(2)
        except OSError as error:  # Hydra writing the run's own files (a full or read-only disk)
            if full_error:
                raise
            where = f" {error.filename}" if error.filename else ""
            print(
                f"reluexp: error: cannot write the run's files{where}: {error.strerror}",
                file=sys.stderr,
            )
            sys.exit(1)


def say_help(args: list[str]) -> bool:
    """--help, composed once with the command line's overrides (Hydra's own lists every group's
    options for placeholders reluexp's template does not use); False where the template needs
    Hydra's --help."""
    overrides = [arg for arg in args if not arg.startswith("-")]
    try:
        text = help_text(overrides)
    except COMPOSITION_ERRORS as error:
        print(f"reluexp: error: {one_line(error)}", file=sys.stderr)
        sys.exit(2)
    if text is not None:
        print(text)
    return text is not None


@contextmanager
def errors_raised_to_us() -> Iterator[bool]:
    """While the app runs, Hydra raises composition errors to it instead of printing them over
    several lines (HYDRA_FULL_ERROR=1), and a log file's handler failing on a full disk is not
    the user's traceback to read; both put back after. Yields whether the user asked for
    Hydra's full trace (HYDRA_FULL_ERROR=1 set already)."""
    previous = os.environ.get("HYDRA_FULL_ERROR")
    raise_exceptions = logging.raiseExceptions
    os.environ["HYDRA_FULL_ERROR"] = "1"
    logging.raiseExceptions = False
    try:
        yield previous == "1"
    finally:
        logging.raiseExceptions = raise_exceptions
        if previous is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
