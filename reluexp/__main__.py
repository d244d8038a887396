"""`python -m reluexp`: the same as the `reluexp` console script."""

import gc

from reluexp.cli import main


def run() -> None:
    """main(), then an exit that does not walk the heap: everything alive once the run has
    ended lives until the process does, and the interpreter's last garbage collections need not
    visit it (about 0.2 s with torch loaded, benchmarks/overhead.py). atexit handlers,
    finalizers, profilers and coverage run as at any exit."""
    try:
        main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    run()
