"""Regenerate docs/tensorboard.png: the real TensorBoard page for a custom_vs_builtin sweep.

    python docs/screenshot.py [SWEEP_DIR]

Without SWEEP_DIR it runs `python -m reluexp -m experiment=custom_vs_builtin device=cpu` in a
temporary directory first. Needs Debian's chromium (`apt-get install chromium`). TensorBoard
listens on 127.0.0.1 only and is stopped at the end.
"""

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1500,1000",
    "--virtual-time-budget=20000",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sweep(workdir: Path) -> Path:
    command = [sys.executable, "-m", "reluexp", "-m", "experiment=custom_vs_builtin", "device=cpu"]
    subprocess.run(command, cwd=workdir, check=True, capture_output=True)
    (sweep_dir,) = (workdir / "outputs" / "multirun").iterdir()
    return sweep_dir


def wait_for_runs(url: str, expected: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/data/runs", timeout=5) as response:
                if len(json.load(response)) >= expected:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"TensorBoard at {url} did not list {expected} runs in {timeout} s")


def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        sweep_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else sweep(Path(workdir))
        jobs = sum(1 for p in sweep_dir.iterdir() if (p / "summary.json").is_file())
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tensorboard.main",
                "--logdir",
                str(sweep_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_runs(url, jobs)
            output = HERE / "tensorboard.png"
            subprocess.run(
                [
                    "chromium",
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={workdir}/chromium",
                    f"--screenshot={output}",
                    f"{url}/#custom_scalars",
                ],
                check=True,
                capture_output=True,
                timeout=180,
            )
            print(f"wrote {output}")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
