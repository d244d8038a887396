"""`python -m reluexp`: the same as the `reluexp` console script."""

import gc
import sys

from reluexp.shell.session import Session


def run() -> None:
    """main() in the command's session, then an exit that does not walk the heap: everything
    alive once the run has ended lives until the process does, and the interpreter's last
    garbage collections need not visit it (about 0.2 s with torch loaded,
    benchmarks/overhead.py). atexit handlers, finalizers, profilers and coverage run as at any
    exit. A Ctrl-C (or SIGTERM) while it imports ends the command, once imported, as one
    during start-up does."""
    session = Session()
    try:
        with session:
            from reluexp.cli import main

            session.start_up.check()
            main()
    except KeyboardInterrupt:
        print(session.start_up.line, file=sys.stderr)
        sys.exit(session.start_up.exit_code)
    finally:
        # The command has said how it ended: a stop from here on (the interpreter's exit,
        # joblib's executor shutting down) changes nothing and prints no traceback; a second
        # ends the process at once.
        session.exiting("reluexp: stopped while exiting")
        gc.freeze()


if __name__ == "__main__":
    run()
