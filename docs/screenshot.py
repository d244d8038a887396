"""Regenerate docs/images/tensorboard_*.png: the real TensorBoard pages of the headline sweep,
opened exactly as its closing line says, one per tab a person reads (SHOTS), and a CNN's Custom
Scalars, a chart per layer (tensorboard_layers.png).

    python docs/screenshot.py [SWEEP_DIR]

Without SWEEP_DIR it runs `python -m reluexp -m experiment=custom_vs_builtin device=cpu` in a
temporary directory first; with one, it reports it again (`python -m reluexp.report`) for its
closing line. Either way TensorBoard serves the logdir that line's `Dashboard:` names (for the
35-job sweep its group view: a run per group and the report's) and nothing else. The CNN's is
`python -m reluexp model=cnn data=digits activation=myrelu device=cpu steps=300`.
Needs Debian's chromium (`apt-get install chromium`). TensorBoard listens on 127.0.0.1 only and
is stopped at the end.
"""

import json
import re
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
    "--use-gl=angle",
    "--use-angle=swiftshader-webgl",
    "--ignore-gpu-blocklist",
    "--enable-unsafe-swiftshader",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1900,1000",
    "--virtual-time-budget=20000",
]


# docs/tensorboard_<name>.png: the page, as TensorBoard's URL names it.
SHOTS = {
    "images": "#images",
    "text": "#text",
    "custom_scalars": "#custom_scalars",
    "scalars": "#scalars",
    "hparams": "#hparams",
    "time_series": "#timeseries",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dashboard_logdir(closing_line: str) -> Path:
    """The logdir the sweep's closing line tells its user to open."""
    match = re.search(r"Dashboard: `tensorboard --logdir ([^\s`]+)", closing_line)
    if match is None:
        raise SystemExit(f"no dashboard in the closing line: {closing_line}")
    return Path(match.group(1))


def sweep(workdir: Path) -> Path:
    """The headline sweep, run as the README gives it; the logdir its closing line names."""
    command = [sys.executable, "-m", "reluexp", "-m", "experiment=custom_vs_builtin", "device=cpu"]
    done = subprocess.run(command, cwd=workdir, check=True, capture_output=True, text=True)
    return workdir / dashboard_logdir(done.stderr.strip().splitlines()[-1])


def reported(sweep_dir: Path) -> Path:
    """An existing sweep directory, reported again; the logdir its last line names."""
    command = [sys.executable, "-m", "reluexp.report", str(sweep_dir)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return dashboard_logdir(done.stdout.strip().splitlines()[-1])


def wait_for_scalars(url: str, expected: int, prefix: str, timeout: float = 180) -> None:
    """Until `expected` runs hold a tag starting with `prefix`: TensorBoard lists runs before
    it has read them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/data/plugin/scalars/tags", timeout=5) as response:
                runs = json.load(response).values()
                if sum(any(tag.startswith(prefix) for tag in tags) for tags in runs) >= expected:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"TensorBoard at {url} had no {prefix}* in {expected} runs after {timeout} s")


def cnn_run(logdir: Path) -> None:
    command = [sys.executable, "-m", "reluexp", "model=cnn", "data=digits", "activation=myrelu"]
    command += ["device=cpu", "steps=300", f"hydra.run.dir={logdir / 'cnn'}"]
    subprocess.run(command, check=True, capture_output=True)


def serve(logdir: Path) -> tuple[str, subprocess.Popen]:
    """TensorBoard on logdir, on 127.0.0.1 only."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return f"http://127.0.0.1:{port}", server


def screenshot(url: str, output: Path, workdir: str) -> None:
    subprocess.run(
        [
            "chromium",
            *CHROMIUM_FLAGS,
            f"--user-data-dir={workdir}/chromium",
            f"--screenshot={output}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    print(f"wrote {output}")


def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        logdir = reported(Path(sys.argv[1])) if len(sys.argv) > 1 else sweep(Path(workdir))
        runs = sum(1 for _ in logdir.rglob("events.out.tfevents.*"))
        print(f"serving {logdir}: {runs} runs")
        url, server = serve(logdir)
        try:
            wait_for_scalars(url, runs - 1, "loss/train_log10")  # every run but the report's
            for name, page in SHOTS.items():
                screenshot(f"{url}/{page}", HERE / "images" / f"tensorboard_{name}.png", workdir)
        finally:
            server.terminate()
            server.wait(timeout=30)
        layers = Path(workdir) / "layers"
        cnn_run(layers)
        url, server = serve(layers)
        try:
            wait_for_scalars(url, 1, "norm/grad_features.0.weight")
            screenshot(
                f"{url}/#custom_scalars", HERE / "images" / "tensorboard_layers.png", workdir
            )
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
