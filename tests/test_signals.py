"""Signals wherever they land: while the entry points import, while a report writes, and a
stop the shell told the process to ignore."""

import csv
import json
import signal
import subprocess
import sys

import pytest

from tests import stops
from tests.helpers import SMALL, fake_sweep, small_config

pytestmark = pytest.mark.slow

# `python -m MODULE ARGS`, with `signal` raised at the first import of `imported` (an import
# hook), so that it lands, every time, where a user's Ctrl-C lands now and then: inside the
# command's own imports.
SIGNALLED_AT_IMPORT = """
import os, runpy, sys
module, imported, signum = sys.argv[1], sys.argv[2], int(sys.argv[3])

class SignalAtImport:
    def find_spec(self, name, path, target=None):
        if name == imported:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signum)
        return None

sys.meta_path.insert(0, SignalAtImport())
sys.argv = [module, *sys.argv[4:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def python_script(script: str, *args: str, cwd) -> subprocess.CompletedProcess:
    """`python -c SCRIPT ARGS` in cwd, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def signalled_at_import(module: str, imported: str, signum: int, *args: str, cwd):
    return python_script(SIGNALLED_AT_IMPORT, module, imported, str(signum), *args, cwd=cwd)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("imported", ["hydra", "torch.func"])
def test_a_signal_while_hydra_or_torch_imports_is_one_line(tmp_path, signum, imported):
    """42.4: Ctrl-C in the first half second of `python -m reluexp` printed an 18-line
    traceback. 47.4: stopped while torch imports (torch.func comes after its FakeTensor
    module), torch's cache counts followed the closing line at exit."""
    result = signalled_at_import("reluexp", imported, signum, "steps=2", cwd=tmp_path)
    assert result.returncode == 128 + signum
    assert result.stderr == "reluexp: interrupted during start-up; nothing was trained\n"
    assert not (tmp_path / "outputs").exists()


# `python -m reluexp ARGS` with `signal` raised as its job starts: Hydra has made the run's
# directory and written its files there, nothing has trained.
SIGNALLED_AT_JOB_START = """
import os, runpy, sys
from reluexp.shell import lifecycle
signum = int(sys.argv[1])
start = lifecycle.Lifecycle.on_job_start

def on_job_start(self, *args, **kwargs):
    os.kill(os.getpid(), signum)
    return start(self, *args, **kwargs)

lifecycle.Lifecycle.on_job_start = on_job_start
sys.argv = ["reluexp", *sys.argv[2:]]
runpy.run_module("reluexp", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_once_hydra_made_the_run_directory_leaves_none(tmp_path, signum):
    """58: it left a directory holding only .hydra/ and an empty reluexp.log, which no resume
    understands."""
    result = python_script(SIGNALLED_AT_JOB_START, str(signum), "steps=2", *SMALL, cwd=tmp_path)
    assert result.returncode == 128 + signum
    assert result.stderr == "reluexp: interrupted during start-up; nothing was trained\n"
    assert (tmp_path / "outputs" / "runs").is_dir()  # Hydra had made the run's directory
    assert list((tmp_path / "outputs" / "runs").iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("imported", ["tensorboard", "matplotlib"])
def test_a_signal_to_a_report_is_one_line_and_leaves_its_files_whole(tmp_path, signum, imported):
    """42.4: Ctrl-C on `python -m reluexp.report` printed a 73-line traceback, SIGTERM ended
    it silently. Stopped while it imports (tensorboard) or once its table is written, as its
    figure's library imports (matplotlib)."""
    builtin = small_config(steps=3)  # a built-in's job: no custom Function for the lab to check
    builtin.activation.name, builtin.activation.target = "relu", "torch.relu"
    fake_sweep(tmp_path, {"activation=relu": builtin})
    result = signalled_at_import("reluexp.report", imported, signum, str(tmp_path), cwd=tmp_path)
    assert result.returncode == 128 + signum
    assert result.stderr == (
        "reluexp.report: interrupted; each report file is as it was or as this report wrote "
        "it, whole\n"
    )
    written = {p.name for p in tmp_path.iterdir() if p.is_file()}
    if imported == "matplotlib":
        assert [row["group"] for row in csv.DictReader((tmp_path / "summary.csv").open())] == [
            "activation=relu"
        ]
        assert "loss_curves.png" not in written
    else:
        assert written == set()


def test_a_run_started_ignoring_sigint_keeps_ignoring_it(tmp_path):
    """42.4: a shell's background job (and nohup) starts with SIGINT ignored; Python leaves it
    so, and a run must too: only the SIGTERM that follows stops it (both sent by the run's
    Function to its own process, at step 300: tests/stops.py)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "reluexp", "activation=custom", stops.TARGET, "steps=600"]
        + ["checkpoint_every=200", *SMALL],
        cwd=tmp_path,
        env=stops.stopping("SIGINT,SIGTERM", 300),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143, stderr
    (run_dir,) = tmp_path.glob("outputs/runs/*")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["signal"]) == ("interrupted", "SIGTERM")
    assert summary["steps_done"] == 301


# `python -m reluexp.check ARGS` with `signal` raised as it writes its report.
SIGNALLED_AT_REPORT = """
import os, runpy, sys
from reluexp.lab import pipeline
signum = int(sys.argv[1])
write = pipeline.write_report

def write_report(*args, **kwargs):
    os.kill(os.getpid(), signum)
    return write(*args, **kwargs)

pipeline.write_report = write_report
sys.argv = ["reluexp.check", *sys.argv[2:]]
runpy.run_module("reluexp.check", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_lab_writes_its_report_is_answered(tmp_path, signum):
    """58: a stop in the check's last ~0.8 s (its report and picture) was ignored: verdict,
    exit 0."""
    result = python_script(SIGNALLED_AT_REPORT, str(signum), "hydra.run.dir=check", cwd=tmp_path)
    assert result.returncode == 128 + signum
    assert result.stderr == "reluexp.check: interrupted while writing its report\n"
    assert "check.md" in result.stdout  # the verdict, and where the report is
    assert {p.name for p in (tmp_path / "check").iterdir()} >= {"check.md", "check.json"}
