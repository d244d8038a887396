"""`python -m reluexp`: the same as the `reluexp` console script."""

import gc
import sys

from reluexp.run.signals import STOPPED_AT_START_UP, InterruptSignals


def run() -> None:
    """main(), then an exit that does not walk the heap: everything alive once the run has
    ended lives until the process does, and the interpreter's last garbage collections need not
    visit it (about 0.2 s with torch loaded, benchmarks/overhead.py). atexit handlers,
    finalizers, profilers and coverage run as at any exit. A Ctrl-C (or SIGTERM) while Hydra
    still imports (about half a second) ends the command as one during start-up does."""
    interrupts = InterruptSignals()
    try:
        with interrupts:
            from reluexp.cli import main
        main()
    except KeyboardInterrupt:
        print(STOPPED_AT_START_UP, file=sys.stderr)
        sys.exit(128 + interrupts.signum)
    finally:
        gc.freeze()


if __name__ == "__main__":
    run()
