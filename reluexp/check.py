"""`python -m reluexp.check`: the Function lab's command (reluexp/lab/command.py)."""

import sys

from reluexp.run.signals import Interrupts


def run() -> int:
    """The command; a Ctrl-C or SIGTERM while it imports (torch, about a second) ends it, once
    imported, in one line."""
    interrupts = Interrupts("reluexp.check: interrupted while starting")
    try:
        with interrupts:
            from reluexp.lab.command import main

            interrupts.check()
    except KeyboardInterrupt:
        print(interrupts.line, file=sys.stderr)
        return interrupts.exit_code
    code = main()
    # It has said its verdict: a stop while the process exits changes nothing.
    Interrupts("reluexp.check: stopped while exiting").hold()
    return code


if __name__ == "__main__":
    sys.exit(run())
