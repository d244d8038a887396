"""`python -m reluexp.check`: the Function lab's command (reluexp/lab/command.py)."""

import gc
import sys

from reluexp.shell.session import Session


def run() -> int:
    """The command in its session; a Ctrl-C or SIGTERM while it imports (torch, about a
    second) ends it, once imported, in one line. Its exit does not walk the heap (as
    `python -m reluexp`'s: about 0.6 s of a check's 3, benchmarks/lab.py)."""
    session = Session("reluexp.check: interrupted while starting")
    try:
        with session:
            from reluexp.lab.command import main

            session.start_up.check()
            code = main()
    except KeyboardInterrupt:
        print(session.start_up.line, file=sys.stderr)
        return session.start_up.exit_code
    # It has said its verdict: a stop while the process exits changes nothing.
    session.exiting("reluexp.check: stopped while exiting")
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(run())
