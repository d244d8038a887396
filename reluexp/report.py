"""`python -m reluexp.report SWEEP_DIR`: a sweep's report (reluexp/sweeps/report/command.py)."""

import sys

from reluexp.sweeps.report.command import main

if __name__ == "__main__":
    sys.exit(main())
