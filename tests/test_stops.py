"""A stop at any moment ends in one line (51.1): SIGINT or SIGTERM to a command's process group
at a range of moments (not one chosen instant), from start-up through Hydra composing a sweep's
jobs, the jobs, and the report written after the last one. Each outcome must be one of the
command's own endings, with no traceback and nothing half-written."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from reluexp.shell.stops import STOPPED_AT_START_UP
from tests.helpers import SMALL

pytestmark = pytest.mark.slow


def stopped(
    module: str, args: list[str], signum: int, delay: float, cwd: Path, after: str | None = None
) -> tuple[int, list[str]]:
    """`python -m MODULE ARGS` in a process group of its own, as a terminal starts it; `delay`
    seconds after the line holding `after` reaches its stderr (without one, once it has loaded
    torch: what comes before, the interpreter's own start-up, no program can answer),
    `signum` to the whole group. Its exit status and stderr lines."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines = []
    try:
        if after is not None:
            for line in process.stderr:
                lines.append(line)
                if after in line:
                    break
        else:
            deadline = time.monotonic() + 300
            while not loaded_torch(process.pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):  # it had ended already
            os.killpg(process.pid, signum)
        lines += process.stderr.read().splitlines(keepends=True)
        process.wait(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, [line.rstrip("\n") for line in lines]


def loaded_torch(pid: int) -> bool:
    try:
        return any("libtorch" in m.path for m in psutil.Process(pid).memory_maps())
    except psutil.Error:  # ended
        return True


# (after this line on stderr, or None: once torch is loaded; seconds)
SWEEP_MOMENTS = [
    (None, 0.0),  # importing
    (None, 0.3),  # importing, or Hydra composing the sweep's own config
    # Hydra composing the 40 jobs' configs and joblib starting its workers: a stop raised in
    # Hydra's grammar parser came out as "'NoneType' object has no attribute 'stop'" (rc 2, or
    # rc 1 and a traceback), in windows of a few hundredths of a second.
    *[("reluexp: sweep of 40 jobs", delay) for delay in (0, 0.01, 0.02, 0.04, 0.07, 0.1)],
    *[("reluexp: sweep of 40 jobs", delay) for delay in (0.15, 0.25, 0.4, 0.6, 1.6)],
]


@pytest.mark.parametrize(("after", "delay"), SWEEP_MOMENTS)
def test_ctrl_c_to_a_joblib_sweep_at_any_moment_is_its_own_ending(tmp_path, after, delay):
    args = ["-m", "seed=range(0,40)", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    code, err = stopped(
        "reluexp", [*args, "steps=2000", *SMALL], signal.SIGINT, delay, tmp_path, after
    )
    assert code == 130, err
    last = err[-1]
    assert last == STOPPED_AT_START_UP or last.startswith("reluexp: sweep ended, 40 jobs: "), err
    assert not any("Traceback" in line or "error" in line for line in err), err


@pytest.mark.parametrize(
    ("signum", "delay"),
    [
        (signal.SIGINT, 0.0),
        (signal.SIGTERM, 0.05),
        (signal.SIGINT, 0.1),
        (signal.SIGTERM, 0.2),
        (signal.SIGINT, 0.3),
        (signal.SIGTERM, 0.5),
    ],
)
def test_a_stop_while_the_sweeps_report_is_written_leaves_it_whole(tmp_path, signum, delay):
    """After the last job line the report is being written (its figures import matplotlib): a
    stop there once left no closing line, no loss_curves.png and a warning that matplotlib had
    no rcParams. The report is written whole, then the command ends (128 + the signal; or as it
    would have, when the stop came as the interpreter exited)."""
    code, err = stopped(
        "reluexp", ["-m", "seed=0,1,2", "steps=300", *SMALL], signum, delay, tmp_path, "[3/3]"
    )
    assert code in (128 + signum, 0, -signum), err
    assert err[-1].startswith("reluexp: sweep ended, 3 jobs: completed 3."), err
    assert not any("Warning" in line or "Traceback" in line for line in err), err
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    for written in ["summary.md", "summary.csv", "loss_curves.png"]:
        assert (sweep_dir / written).is_file(), written
    assert (sweep_dir / "groups" / "events.out.tfevents.reluexp-report").is_file()


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.3, 0.5, 0.8])
def test_sigterm_to_the_lab_at_any_moment_is_one_line_and_143(tmp_path, delay):
    """It died of the signal, silent (rc -15); Ctrl-C already said which stage it stopped.
    (Moments while it checks: a check of MyReLU takes about two seconds once torch is
    loaded.)"""
    args = ["activation=myrelu", f"hydra.run.dir={tmp_path / 'check'}"]
    code, err = stopped("reluexp.check", args, signal.SIGTERM, delay, tmp_path)
    assert code == 143, err
    assert len(err) == 1 and err[0].startswith("reluexp.check: interrupted"), err


def test_a_parallel_sweeps_stop_returns_from_its_handler_and_watches_its_workers_from_a_thread(
    tmp_path, monkeypatch
):
    """61.2: the handler itself waited, up to 120 s, for the workers' checkpoints; then a timer's
    handler read every job's summary.json. Now the handler signals the workers and returns; a
    thread watches their jobs, and once the running one has recorded it kills the workers and
    wakes the sweep, which ends out of the launcher's wait."""
    from reluexp.record.summary import RunSummary
    from reluexp.shell import sweepstop
    from reluexp.shell.session import Session

    job = tmp_path / "000_seed=0"
    job.mkdir()
    RunSummary(status="running").write(job)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    signalled = []

    def signal_workers(signum):
        signalled.append(signum)
        return [psutil.Process(worker.pid)]

    monkeypatch.setattr(sweepstop, "signal_workers", signal_workers)
    ended = []
    try:
        with Session() as session:
            stop = sweepstop.SweepStop(tmp_path, lambda: ended.append(True), parallel=True)
            session.owner.push(stop)
            with pytest.raises(SystemExit) as exited, stop.waiting():  # the launcher waits
                stop.handle(signal.SIGTERM, None)  # returns at once: nothing waited for
                assert signalled == [signal.SIGTERM] and not stop.stopping.done.is_set()
                stop.stopping.watcher.join(timeout=0.5)  # the job still runs: it waits
                assert not ended and worker.poll() is None and stop.stopping.watcher.is_alive()
                RunSummary(status="interrupted").write(job)
                stop.stopping.watcher.join(timeout=60)  # recorded: this thread is woken ...
                for _ in range(600):
                    time.sleep(0.1)  # ... and the sweep ends out of its wait
        assert exited.value.code == 128 + signal.SIGTERM and ended == [True]
        assert worker.wait(timeout=60) == -signal.SIGKILL
    finally:
        worker.kill()
