"""Stop the test cluster at BASE once the process PID has ended, however it ended: a timeout's
SIGTERM to pytest (or a SIGKILL) skips its fixtures' teardown, and the cluster's daemons, which
detach from their parent, would run on.

    python stop_when_gone.py PID BASE
"""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psutil

owner, base = int(sys.argv[1]), Path(sys.argv[2])
with contextlib.suppress(psutil.NoSuchProcess):  # ended already
    psutil.Process(owner).wait()
if (base / "etc" / "slurm.conf").exists():  # the owner did not stop it: stop it here
    subprocess.run(
        [str(Path(__file__).with_name("stop-slurm.sh"))],
        env={**os.environ, "SLURM_BASE": str(base)},
        check=False,
    )
