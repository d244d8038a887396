"""`python -m reluexp.check`: the Function lab's command (reluexp/lab/command.py)."""

import sys

from reluexp.lab.command import main

if __name__ == "__main__":
    sys.exit(main())
