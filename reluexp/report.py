"""`python -m reluexp.report SWEEP_DIR`: a sweep's report (reluexp/sweeps/report/command.py)."""

import sys

from reluexp.run.signals import Interrupts


def run() -> int:
    """The report; a Ctrl-C or SIGTERM, while it imports or writes, is one line and 130 (143):
    each of its files is written whole, so none is left half-written."""
    interrupts = Interrupts("reluexp.report: interrupted")
    try:
        with interrupts, interrupts.raising():
            from reluexp.lab.sweep import check_activation
            from reluexp.sweeps.report.command import main

            return main(check=check_activation)
    except KeyboardInterrupt:
        print(
            "reluexp.report: interrupted; each report file is as it was or as this report "
            "wrote it, whole",
            file=sys.stderr,
        )
        return interrupts.exit_code


if __name__ == "__main__":
    sys.exit(run())
