"""`python -m reluexp.report SWEEP_DIR`: a sweep's report (reluexp/sweeps/report/command.py)."""

import sys

from reluexp.shell.session import Session


def run() -> int:
    """The report in its session; a Ctrl-C or SIGTERM, while it imports or writes, is one line
    and 130 (143): each of its files is written whole, so none is left half-written. A stop
    while the lab checks a Function ends that check (and the rest) at once: the report is
    written, then 128 + the signal."""
    try:
        with (
            Session.joined("reluexp.report: interrupted") as session,
            session.start_up.raising(),
        ):
            from reluexp.shell.labcheck import BoundedCheck
            from reluexp.sweeps.report.command import main

            checks: list[BoundedCheck] = []

            def bounded(seconds: float) -> BoundedCheck:
                checks.append(BoundedCheck(session, seconds))
                return checks[-1]

            code = main(check=bounded)
            stopped = [c.stopped_by for c in checks if c.stopped_by is not None]
            return 128 + stopped[0] if stopped else code
    except KeyboardInterrupt:
        print(
            "reluexp.report: interrupted; each report file is as it was or as this report "
            "wrote it, whole",
            file=sys.stderr,
        )
        return session.start_up.exit_code


if __name__ == "__main__":
    sys.exit(run())
