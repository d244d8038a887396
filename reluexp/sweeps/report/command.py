"""`python -m reluexp.report outputs/multirun/<sweep> [--lab-seconds N]`: the sweep's report,
whatever its state.

Works on any sweep directory, finished, interrupted or still running: every job the sweep
planned is listed with its status (`not started` included), and the losses aggregate the
completed runs only. Writes summary.csv, summary.md and loss_curves.png into it, and the
lab's check of each custom Function its jobs trained into lab/ (its verdict in the table),
each for at most N seconds (60; 0 checks none).
"""

import sys
from collections.abc import Callable
from pathlib import Path

from reluexp.sweeps.report.outputs import write_report
from reluexp.sweeps.report.verdicts import FunctionCheck

# How long each lab check may take, unless --lab-seconds says (the schema's lab_seconds).
LAB_SECONDS = 60.0


def main(
    argv: list[str] | None = None, check: Callable[[float], FunctionCheck] | None = None
) -> int:
    """The report; each custom Function not yet checked is checked by `check(seconds)` (the
    lab's, bounded, which reluexp.report passes in)."""
    args = list(sys.argv[1:] if argv is None else argv)
    seconds = LAB_SECONDS
    if "--lab-seconds" in args:
        at = args.index("--lab-seconds")
        try:
            seconds = float(args[at + 1])
            if not 0 <= seconds < float("inf"):
                raise ValueError
        except (IndexError, ValueError):
            print(
                "reluexp.report: error: --lab-seconds takes a number of seconds >= 0",
                file=sys.stderr,
            )
            return 2
        del args[at : at + 2]
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    sweep_dir = Path(args[0])
    if not sweep_dir.is_dir():
        print(f"reluexp.report: error: {sweep_dir}: not a directory", file=sys.stderr)
        return 2
    # A sweep stopped before its first job started has only its plan: its jobs, not started.
    planned = (sweep_dir / "multirun.yaml").is_file()
    if not planned and not any((p / ".hydra").is_dir() for p in sweep_dir.iterdir()):
        print(
            f"reluexp.report: error: {sweep_dir}: no job directories and no multirun.yaml in it",
            file=sys.stderr,
        )
        return 2
    try:
        written = write_report(sweep_dir, check and check(seconds))
    except OSError as error:
        where = error.filename or sweep_dir
        print(f"reluexp.report: error: {where}: cannot write ({error.strerror})", file=sys.stderr)
        return 2
    print((sweep_dir / "summary.md").read_text())
    print(f"Wrote into {sweep_dir}: {written.listing}. Dashboard: {written.dashboard(args[0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
