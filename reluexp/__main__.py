"""`python -m reluexp`: the same as the `reluexp` console script."""

import gc
import sys

from reluexp.run.signals import STOPPED_AT_START_UP, Interrupts


def run() -> None:
    """main(), then an exit that does not walk the heap: everything alive once the run has
    ended lives until the process does, and the interpreter's last garbage collections need not
    visit it (about 0.2 s with torch loaded, benchmarks/overhead.py). atexit handlers,
    finalizers, profilers and coverage run as at any exit. A Ctrl-C (or SIGTERM) while it
    imports ends the command, once imported, as one during start-up does."""
    interrupts = Interrupts(STOPPED_AT_START_UP)
    try:
        with interrupts:
            from reluexp.cli import main

            interrupts.check()
        main()
    except KeyboardInterrupt:
        print(STOPPED_AT_START_UP, file=sys.stderr)
        sys.exit(interrupts.exit_code)
    finally:
        # The command has said how it ended: a stop from here on (the interpreter's exit,
        # joblib's executor shutting down) changes nothing and prints no traceback; a second
        # ends the process at once.
        Interrupts("reluexp: stopped while exiting").hold()
        gc.freeze()


if __name__ == "__main__":
    run()
