"""Off the happy path: pasted paths, redirected output, dead networks, interrupted sweeps,
damaged files, concurrent resumes, full disks, absurd values and run directories as code."""

import csv
import errno
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import torch

from reluexp.config import Config, ConfigError
from reluexp.hydra_glue import hydra_quoted_resume
from reluexp.lab import command as check
from reluexp.record.events import read_scalars
from reluexp.run import runner
from reluexp.run.checkpoint import CHECKPOINT_NAME
from reluexp.run.rundir import hold_run
from reluexp.sweeps.report.command import main as report_main
from reluexp.sweeps.report.discovery import find_jobs
from reluexp.sweeps.report.outputs import write_report
from tests import stops
from tests.helpers import (
    RAISING_FUNCTION,
    REPO_ROOT,
    SMALL,
    command_after,
    descendants,
    fake_sweep,
    interrupted_run,
    plugin_scalars,
    run_cli,
    small_config,
    summary,
    tensorboard,
)

LOSS_LINE = re.compile(r"\d+ -?[0-9.e+-]+|\d+ (nan|inf)")


def only_loss_lines(stdout: str) -> bool:
    return all(LOSS_LINE.fullmatch(line) for line in stdout.splitlines())


def start(*args: str, cwd: Path, own_group: bool = False, env=None) -> subprocess.Popen:
    """`python -m reluexp ARGS`; in a process group of its own, as a terminal starts it."""
    return subprocess.Popen(
        [sys.executable, "-m", "reluexp", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=own_group,
        env=env,
    )


def wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


# 1. Resume a sweep job as a user pastes its directory.


def test_resume_paths_are_quoted_for_hydras_grammar():
    job = "outputs/multirun/x/1_checkpoint_every=100,seed=1"
    assert hydra_quoted_resume(f"resume={job}") == f"resume='{job}'"
    assert hydra_quoted_resume("resume='already quoted'") == "resume='already quoted'"
    assert hydra_quoted_resume("resume=null") == "resume=null"
    assert hydra_quoted_resume("seed=1,2") == "seed=1,2"
    assert hydra_quoted_resume("resume=it's") == "resume='it\\'s'"


@pytest.mark.slow
def test_a_sweep_jobs_directory_resumes_as_pasted(tmp_path):
    run_cli("-m", "seed=1", "steps=20", "checkpoint_every=10", *SMALL, cwd=tmp_path)
    (job_dir,) = (tmp_path / "outputs" / "multirun").glob("*/000_*")
    assert "=" in job_dir.name and "," in job_dir.name
    state = summary(job_dir)
    state["status"] = "interrupted"  # as a SIGTERM leaves it
    (job_dir / "summary.json").write_text(json.dumps(state))
    pasted = str(job_dir.relative_to(tmp_path))
    result = run_cli(f"resume={pasted}", cwd=tmp_path)
    assert summary(job_dir)["status"] == "completed" and summary(job_dir)["resumes"] == 1
    assert f"Run dir: {pasted}." in result.stderr


# 2. stdout holds the article's loss lines only; the closing line reaches stderr on every exit.


@pytest.mark.slow
@pytest.mark.parametrize("chdir", [[], ["hydra.job.chdir=true"]])
def test_an_interrupted_run_says_where_it_is_and_how_to_resume_on_stderr(tmp_path, chdir):
    """58: with hydra.job.chdir=true the closing line said `resume=.` (relative to the run dir
    the process moved into), not to where the command was launched. Its Function stops its
    process at step 300 (tests/stops.py); the resume command names it again, as a resume of
    a Function outside reluexp must."""
    stopped = subprocess.run(
        [sys.executable, "-m", "reluexp", "activation=custom", stops.TARGET, "steps=600"]
        + ["checkpoint_every=200", "print_every=100", *SMALL[:-1], *chdir],
        cwd=tmp_path,
        env=stops.stopping("SIGINT", 300),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert stopped.returncode == 130
    assert stopped.stdout and only_loss_lines(stopped.stdout)
    closing = stopped.stderr.strip().splitlines()[-1]
    resume = command_after("Resume", closing)
    assert resume.endswith(f" {stops.TARGET}")
    assert closing.startswith("reluexp: interrupted after 301 steps")
    assert f"Run dir: {next_run_dir(tmp_path).relative_to(tmp_path)}." in closing
    # The printed command works when pasted.
    resumed = run_cli(*shlex.split(resume)[3:], cwd=tmp_path)
    assert resumed.stderr.strip().splitlines()[-1].startswith("reluexp: completed after 600")


def next_run_dir(cwd: Path) -> Path:
    runs = cwd / "outputs" / "runs"
    wait_for(runs)
    deadline = time.monotonic() + 60
    while not list(runs.iterdir()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return next(runs.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "code", "status"),
    [
        (["steps=200"], 0, "completed"),
        (["steps=200", "lr=10"], 0, "diverged"),
        (["steps=20", "activation.target=planted.Raises"], 1, "failed"),
    ],
)
def test_every_exit_ends_with_one_closing_line_on_stderr(tmp_path, args, code, status):
    (tmp_path / "planted.py").write_text(RAISING_FUNCTION)
    result = run_cli(
        *args, f"hydra.run.dir={tmp_path / 'run'}", *SMALL[:-1], cwd=tmp_path, check=False
    )
    assert result.returncode == code
    assert only_loss_lines(result.stdout)
    assert "Traceback" not in result.stderr
    closing = result.stderr.strip().splitlines()[-1]
    assert closing.startswith(f"reluexp: {status} after") and "Run dir: " in closing
    if status == "failed":
        assert "RuntimeError: planted failure in the backward" in closing
        # The whole traceback is kept, in the run's log.
        assert "Traceback" in (tmp_path / "run" / "reluexp.log").read_text()
        assert summary(tmp_path / "run")["status"] == "failed"


@pytest.mark.slow
def test_a_run_started_with_its_output_streams_closed_completes(tmp_path):
    # A daemon or `python -m reluexp >&- 2>&-`: Python starts with sys.stdout/stderr = None.
    command = f"{shlex.quote(sys.executable)} -m reluexp hydra.run.dir=run {' '.join(SMALL)}"
    done = subprocess.run(["bash", "-c", command + " >&- 2>&-"], cwd=tmp_path, timeout=300)
    assert done.returncode == 0
    assert summary(tmp_path / "run")["status"] == "completed"


# 3. A network that stopped learning is not silently `completed`.


def test_a_dead_network_gets_warnings_and_a_healthy_one_none(tmp_path):
    dead = Config(device="cpu", steps=5)
    dead.model.hidden = [256, 128]  # --help's deeper example: randn weights kill layer 2
    runner.run(dead, tmp_path / "dead")
    warnings = summary(tmp_path / "dead")["warnings"]
    assert [w.split(" from step")[0] for w in warnings] == [
        "gradients vanished",
        "activation act2 dead",
    ]
    assert summary(tmp_path / "dead")["status"] == "completed"
    runner.run(Config(device="cpu", steps=5), tmp_path / "alive")
    assert summary(tmp_path / "alive")["warnings"] == []


def test_a_run_that_barely_moves_warns_once_with_the_likely_cause(tmp_path):
    # Adam at the default lr=1e-6 moves the loss by about 0.3% in two steps.
    stalled = Config(device="cpu", steps=3, optimizer="adam")
    runner.run(stalled, tmp_path / "adam")
    record = summary(tmp_path / "adam")
    assert record["status"] == "completed"
    [warning] = record["warnings"]
    assert warning.startswith("loss barely moved from step 0: ")
    assert "lr=1e-06: adam's step, lr x sqrt(101000 weights) / weight norm" in warning
    assert warning.endswith("(adam's usual lr: 0.0001 to 0.01)")
    # The seed's update at lr=1e-9 barely moves too: no usual range is known for a summed loss
    # on the user's data, so the step's measured size is the cause named (33.4: a callable
    # loader's data at the default lr got no cause).
    runner.run(Config(device="cpu", steps=3, lr=1e-9), tmp_path / "manual")
    [warning] = summary(tmp_path / "manual")["warnings"]
    assert warning.startswith("loss barely moved") and "usual" not in warning
    tags = ["norm/weight_w1", "norm/weight_w2", "norm/grad_total"]
    series = read_scalars(tmp_path / "manual", tags)
    step = max(
        1e-9 * grad / math.hypot(w1, w2)
        for w1, w2, grad in zip(*(series[tag].values() for tag in tags))
    )
    assert warning.endswith(
        f"; a step moves the weights by ~{step:.1g} of their norm (lr=1e-09: lr x gradient norm "
        f"/ weight norm, the largest step recorded), ~{3 * step:.1g} in 3 steps: a larger lr "
        "moves them more"
    )
    # The article's own run moves: no warning at all.
    runner.run(Config(device="cpu", steps=3), tmp_path / "seed")
    assert summary(tmp_path / "seed")["warnings"] == []


def test_adam_at_the_default_lr_warns_though_its_loss_moves_a_little(tmp_path):
    """47.3: adam at lr=1e-6 moved the loss 1.3% in 500 steps and completed without a word;
    its steps, about lr per weight, move the weights by 5e-4 of their norm."""
    runner.run(Config(device="cpu", steps=500, optimizer="adam", quiet=True), tmp_path / "adam")
    record = summary(tmp_path / "adam")
    assert record["status"] == "completed"
    [warning] = record["warnings"]
    assert warning.startswith("steps too small from step 0: a step moves the weights by ~1e-06")
    assert "~0.0005 in 500 steps" in warning and "adam's usual lr: 0.0001 to 0.01" in warning
    # At adam's usual lr the same run is silent.
    runner.run(
        Config(device="cpu", steps=500, optimizer="adam", lr=1e-3, quiet=True), tmp_path / "ok"
    )
    assert summary(tmp_path / "ok")["warnings"] == []


def test_the_sweep_summary_shows_warnings(tmp_path):
    dead = small_config(steps=3)
    dead.model.hidden = [256, 128]
    dead.data.d_in = 1000
    fake_sweep(tmp_path, {"model.hidden=[256,128]": dead, "model.hidden=20": small_config(steps=3)})
    write_report(tmp_path)
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    assert rows["model.hidden=[256,128]"]["jobs_with_warnings"] == "1"
    assert rows["model.hidden=20"]["jobs_with_warnings"] == "0"
    assert "1: gradients vanished from step" in (tmp_path / "summary.md").read_text()


def test_running_the_report_again_replaces_what_it_wrote_into_tensorboard(tmp_path):
    custom, builtin = small_config(steps=3), small_config(steps=3)
    builtin.activation.name, builtin.activation.target = "relu", "torch.relu"
    fake_sweep(tmp_path, {"activation=myrelu": custom, "activation=relu": builtin})
    for _ in range(2):
        write_report(tmp_path)
    events = tensorboard(tmp_path / "groups")  # the group view's own run: the report's
    assert sorted(events.Tags()["images"]) == [
        "report/loss_curves",
        "report/pair: activation=myrelu vs activation=relu",
    ]
    assert len(events.Images("report/loss_curves")) == 1
    assert len(events.Tensors("report/summary")) == 1
    (custom_dir,) = tmp_path.glob("000_*")
    gap = plugin_scalars(custom_dir, "lossgap_log10/activation=myrelu")
    assert list(gap) == [0, 1, 2]


# 4. An interrupted sweep lists every job; losses aggregate completed runs only.


@pytest.mark.slow
def test_sigterm_to_a_sweep_lists_every_job_and_aggregates_completed_runs(tmp_path):
    # Slowed from step 200 (tests/stops.py): the first job trains when the signal comes.
    process = start(
        "-m", "seed=1,2,3,4", "steps=2000", "checkpoint_every=200", "activation=custom",
        stops.TARGET, *SMALL, cwd=tmp_path, env=stops.slowed(0.01, 200),
    )  # fmt: skip
    multirun = tmp_path / "outputs" / "multirun"
    wait_for(multirun)
    deadline = time.monotonic() + 120
    while not list(multirun.glob(f"*/000_*/{CHECKPOINT_NAME}")):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143
    (sweep_dir,) = multirun.iterdir()
    text = (sweep_dir / "summary.md").read_text()
    assert "4 jobs: interrupted: 1, not started: 3" in text
    assert (
        "Losses aggregate the 0 completed runs with a finite final loss (left out: 4 not "
        "completed)" in text
    )
    (row,) = csv.DictReader((sweep_dir / "summary.csv").open())
    assert (row["jobs"], row["interrupted"], row["not_started"]) == ("4", "1", "3")
    assert row["final_loss_mean"] == ""  # nothing completed: no mean of runs stopped early
    assert "reluexp: interrupted after" in stderr and "Resume: `python -m reluexp resume=" in stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signals", "code", "resume"),
    [
        # resume: once, as the checkpoint is the same whichever signal stopped the job.
        ([("parent", signal.SIGTERM)], 143, True),
        # Ctrl-C in a terminal: the whole process group; each worker gets it twice (from the
        # terminal and from its sweep). `kill -TERM -- -PGID`, and a second Ctrl-C, alike.
        ([("group", signal.SIGINT)], 130, False),
        ([("group", signal.SIGTERM)], 143, False),
        ([("group", signal.SIGINT), ("group", signal.SIGINT)], 130, False),
    ],
    ids=["parent", "group SIGINT", "group SIGTERM", "group SIGINT twice"],
)
def test_a_signal_to_a_joblib_sweep_stops_every_job_resumably(tmp_path, signals, code, resume):
    joblib = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    # Jobs slowed from step 200 (tests/stops.py), running when the signal comes whatever the
    # machine's load; resumed here, where nothing slows them.
    args = ["-m", *joblib, "seed=range(0,40)", "steps=2000", "checkpoint_every=200"]
    args += ["activation=custom", stops.TARGET]
    process = start(*args, *SMALL, cwd=tmp_path, own_group=True, env=stops.slowed(0.01, 200))
    multirun = tmp_path / "outputs" / "multirun"
    deadline = time.monotonic() + 120
    while len(list(multirun.glob(f"*/*/{CHECKPOINT_NAME}"))) < 2:
        assert time.monotonic() < deadline, "the two workers never checkpointed"
        time.sleep(0.05)
    workers = descendants(process.pid)
    assert workers
    for target, signum in signals:
        if target == "group":
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        time.sleep(0.05)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code
    _, outlived = psutil.wait_procs(workers, timeout=60)
    assert not outlived, "workers outlived their sweep"
    (sweep_dir,) = multirun.iterdir()
    jobs = find_jobs(sweep_dir)
    statuses = Counter(job.summary.status for job in jobs)
    # Every job listed; the two that ran are interrupted, checkpointed, and resume as pasted.
    running = [job.run_dir for job in jobs if job.summary.status == "running"]
    logs = [(d / "reluexp.log").read_text() for d in running if (d / "reluexp.log").exists()]
    assert len(jobs) == 40 and statuses["interrupted"] == 2, (statuses, stderr, logs)
    assert statuses["interrupted"] + statuses["not started"] == 40
    assert "40 jobs: interrupted: 2, not started: 38" in (sweep_dir / "summary.md").read_text()
    interrupted = [job.run_dir for job in jobs if job.summary.status == "interrupted"]
    assert all((run_dir / CHECKPOINT_NAME).is_file() for run_dir in interrupted)
    assert stderr.count("reluexp: interrupted after") == 2
    # 42.6: loky's resource tracker once warned of leaked semaphores after it.
    assert stderr.strip().splitlines()[-1].startswith("reluexp: sweep ended, 40 jobs")
    if resume:
        resumed = run_cli(
            f"resume={interrupted[0]}", stops.TARGET, "hydra.job_logging.root.level=ERROR",
            cwd=tmp_path,
        )  # fmt: skip
        assert "completed after" in resumed.stderr


def test_a_failing_run_keeps_every_step_it_recorded(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "activation=custom",
        "activation.target=tests.helpers.RaisesAtStep50",
        "steps=100",
        f"hydra.run.dir={run_dir}",
        *SMALL,
        cwd=REPO_ROOT,
        check=False,
    )
    assert result.returncode == 1
    state = summary(run_dir)
    assert state["status"] == "failed" and state["steps_done"] == 50
    assert state["error"] == "RuntimeError: planted failure at step 50"
    # The steps before the failure were still on the device: they reach the events.
    assert list(read_scalars(run_dir, ["loss/train"])["loss/train"]) == list(range(50))


def test_a_job_that_trained_but_lost_its_summary_is_not_not_started(tmp_path):
    fake_sweep(
        tmp_path, {"seed=1": small_config(steps=3), "seed=2": small_config(steps=3), "seed=3": None}
    )
    (tmp_path / "000_seed=1" / "summary.json").unlink()
    jobs = {tuple(job.summary.overrides): job.summary for job in find_jobs(tmp_path)}
    assert jobs[("seed=1",)].status == "unreadable"
    assert "no summary.json, but it trained" in jobs[("seed=1",)].error
    assert jobs[("seed=2",)].status == "completed"
    assert jobs[("seed=3",)].status == "not started"


# 5. A checkpoint whose bytes were altered is refused.


def test_a_checkpoint_with_altered_bytes_is_refused(tmp_path):
    run_dir = interrupted_run(tmp_path / "run")
    path = run_dir / CHECKPOINT_NAME
    data = bytearray(path.read_bytes())
    middle = data.index(b"data/0") + 2000  # inside the first weight's bytes
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"checkpoint.pt is corrupt: \S+ fails its CRC32 check"):
        runner.resume(run_dir)


# 6. One bad job does not take the sweep summary down; an unwritable one is one line.


def test_report_lists_unreadable_jobs_and_reports_the_others(tmp_path, capsys):
    jobs = {f"seed={seed}": small_config(steps=3, seed=seed) for seed in (1, 2, 3)}
    fake_sweep(tmp_path, jobs)
    (tmp_path / "000_seed=1" / "summary.json").write_text("{not json")
    (tmp_path / "001_seed=2" / "summary.json").unlink()
    (tmp_path / "001_seed=2" / ".hydra" / "overrides.yaml").write_bytes(bytes(range(256)) * 4)
    assert report_main([str(tmp_path)]) == 0
    found = find_jobs(tmp_path)
    statuses = sorted(job.summary.status for job in found)
    assert statuses == ["completed", "unreadable", "unreadable"]
    errors = " ".join(job.summary.error or "" for job in found)
    assert "summary.json: unreadable" in errors and ".hydra/overrides.yaml:" in errors
    (tmp_path / "summary.csv").unlink()
    (tmp_path / "summary.csv").mkdir()  # what root cannot write either
    assert report_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == f"reluexp.report: error: {tmp_path / 'summary.csv'}: cannot write (Is a directory)"
    )


def four_job_sweep(sweep_dir: Path) -> None:
    """A finished sweep of seed=1,2,3,4 as Hydra leaves it, multirun.yaml included."""
    fake_sweep(
        sweep_dir, {f"seed={seed}": small_config(steps=3, seed=seed) for seed in range(1, 5)}
    )
    (sweep_dir / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    params: null\n  overrides:\n    task:\n    - seed=1,2,3,4\n"
    )


def test_the_report_counts_the_sweeps_jobs_whatever_one_of_them_holds(tmp_path):
    four_job_sweep(tmp_path)
    # A valid summary with a damaged overrides.yaml beside it is a valid job, not a phantom.
    (tmp_path / "000_seed=1" / ".hydra" / "overrides.yaml").write_bytes(bytes(range(256)))
    # Fields of the wrong type make the job unreadable (not a group called `a i l n o s t t`).
    damaged = json.loads((tmp_path / "001_seed=2" / "summary.json").read_text())
    damaged["overrides"] = "notalist"
    (tmp_path / "001_seed=2" / "summary.json").write_text(json.dumps(damaged))
    write_report(tmp_path)
    header = (tmp_path / "summary.md").read_text().splitlines()[2]
    assert header.startswith("4 jobs: completed: 3, unreadable: 1.")
    (unreadable,) = [j for j in find_jobs(tmp_path) if j.summary.status == "unreadable"]
    assert unreadable.summary.overrides == ["seed=2"]
    assert "overrides is 'notalist', not a list[str]" in unreadable.summary.error
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert [row["group"] for row in rows] == ["(defaults)"] and rows[0]["jobs"] == "4"


def test_a_garbage_multirun_yaml_is_said_and_the_jobs_are_reported(tmp_path, capsys):
    four_job_sweep(tmp_path)
    (tmp_path / "multirun.yaml").write_bytes(b"hydra: [\x00\x01 {{ garbage")
    assert report_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4 jobs: completed: 4." in out
    assert "Multirun.yaml is unreadable (" in out and "the jobs are those found" in out


# 7. One process trains in a run directory at a time.


def test_a_second_resume_of_a_run_in_use_is_refused(tmp_path):
    run_dir = interrupted_run(tmp_path / "run")
    with (
        hold_run(run_dir),
        pytest.raises(ConfigError, match=rf"pid {os.getpid()}\) is training in it"),
    ):
        runner.resume(run_dir)
    runner.resume(run_dir)  # released: it resumes
    assert summary(run_dir)["status"] == "completed"


# 8. A full disk: one line, the run marked failed where possible, events still readable.


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_line_and_a_failed_run(tmp_path, small_disk):
    run_dir = small_disk / "run"
    # Enough steps for the event file to outgrow the disk, every one streamed.
    args = ["steps=100000", "log_every=1", "checkpoint_every=0", f"hydra.run.dir={run_dir}"]
    args += SMALL
    result = run_cli(*args, cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "Logging error" not in result.stderr
    closing = result.stderr.strip().splitlines()[-1]
    assert "No space left on device" in closing and "Run dir: disk/run " in closing
    assert not list(run_dir.glob(".*.tmp"))
    # The disk reserve kept room for the outcome: failed, at its step, with the reason.
    state = summary(run_dir)
    assert state["status"] == "failed" and "No space left on device" in state["error"]
    assert 0 < state["steps_done"] < 100000
    assert "No space left on device" in (run_dir / "reluexp.log").read_text()
    assert read_scalars(run_dir, ["loss/train"])["loss/train"]


@pytest.mark.slow
def test_a_final_checkpoint_that_does_not_fit_is_a_full_disk_not_a_torch_error(
    tmp_path, small_disk
):
    run_dir = small_disk / "run"
    # w1 alone (1000 x 100 float32) is as large as the whole disk.
    result = run_cli("steps=3", f"hydra.run.dir={run_dir}", "device=cpu", cwd=tmp_path, check=False)
    assert result.returncode == 1
    closing = result.stderr.strip().splitlines()[-1]
    assert "No space left on device" in closing and "unexpected pos" not in closing
    state = summary(run_dir)
    assert (state["status"], state["steps_done"]) == ("failed", 3)
    assert (run_dir / "reluexp.log").read_text().strip()


def fill(disk: Path, leave: int = 0) -> None:
    """Fill the disk, then free `leave` bytes of it."""
    filler = disk / "filler"
    with pytest.raises(OSError), filler.open("wb", buffering=0) as filling:
        for _ in range(1000):
            filling.write(bytes(4096))
    os.truncate(filler, filler.stat().st_size - leave)


def refused_without_a_directory(tmp_path: Path, disk: Path) -> None:
    run_dir = disk / "run"
    result = run_cli("steps=5", f"hydra.run.dir={run_dir}", *SMALL, cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"reluexp: error: hydra.run.dir={run_dir}: cannot write there (No space left on device)"
    )
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_full_disk_at_start_is_one_line_and_leaves_no_directory(tmp_path, small_disk):
    fill(small_disk)
    refused_without_a_directory(tmp_path, small_disk)


@pytest.mark.slow
def test_a_disk_with_room_for_hydras_files_but_not_the_reserve_gets_no_directory(
    tmp_path, small_disk
):
    """42.5: 72 KB free passed the 64 KB probe; Hydra's files then left too little for the
    run's 64 KB reserve, and the refusal left a run directory with .hydra/, the lock and an
    empty log."""
    fill(small_disk, leave=72 * 1024)
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    assert 64 * 1024 < free < 96 * 1024
    refused_without_a_directory(tmp_path, small_disk)


# 9. Values that cannot run are one line before any directory is made.


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["data.n=1000000000", "data.d_in=1000000000"],
            "reluexp: error: data.n=1000000000, data.d_in=1000000000",
        ),
        (
            ["seed=100000000000000000000"],
            "reluexp: error: seed=100000000000000000000: must fit in 64 bits",
        ),
        (["threads=10000000000"], "reluexp: error: threads=10000000000: at most 2147483647"),
        (["hydra.job.name=a/b"], "reluexp: error: hydra.job.name='a/b': must be a valid file name"),
        (
            ["activation.target=no.such.Thing"],
            "reluexp: error: activation.target=no.such.Thing: no module named 'no' was found",
        ),
        (
            ["activation=leaky_relu", "activation.params.negative_slope=abc"],
            "reluexp: error: activation.params.negative_slope='abc': expected a number",
        ),
        (
            ["activation=leaky_relu", "+activation.params.bogus=1"],
            "reluexp: error: activation.params.bogus: reluexp.functions.LeakyReLU takes "
            "negative_slope",
        ),
    ],
)
def test_values_that_cannot_run_are_one_line_and_leave_no_directory(tmp_path, args, message):
    result = run_cli(*args, cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == result.stderr.strip().splitlines()[0]
    assert result.stderr.startswith(message), result.stderr
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_a_mistake_every_job_of_a_sweep_would_make_is_one_line_before_any_runs(tmp_path):
    """42.5: a param the target does not take was one line for a single run but a failed job
    directory for every job of a sweep."""
    result = run_cli(
        "-m",
        "activation=leaky_relu,relu",
        "seed=0,1",
        "+activation.params.bogus=1",
        *SMALL,
        cwd=tmp_path,
        check=False,
    )
    assert result.stderr == (
        "reluexp: error: job 0 (activation=leaky_relu seed=0 +activation.params.bogus=1 "
        f"{' '.join(SMALL)}): activation.params.bogus: reluexp.functions.LeakyReLU takes "
        "negative_slope\n"
    )
    assert result.returncode == 2
    assert not (tmp_path / "outputs").exists()


def test_sizes_that_cannot_fit_fail_before_allocating(tmp_path):
    config = small_config(steps=1)
    config.data.n = config.data.d_in = 10**9
    with pytest.raises(ConfigError, match=r"needs at least .* GiB on cpu"):
        runner.run(config, tmp_path)


# 11. A run directory is data: resume never imports code from it.


def test_resume_never_imports_code_from_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = interrupted_run(tmp_path / "outputs" / "runs" / "r")
    marker = tmp_path / "pwned"
    (run_dir / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nrelu = lambda x: x\n"
    )
    state = summary(run_dir)
    state["config"]["activation"]["target"] = "outputs.runs.r.evil.relu"
    (run_dir / "summary.json").write_text(json.dumps(state))
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    checkpoint["config"] = state["config"]
    torch.save(checkpoint, run_dir / CHECKPOINT_NAME)
    with pytest.raises(
        ConfigError, match="code in or beside a run directory, or in an outputs tree, is never"
    ):  # even when the user confirms the path
        runner.resume(run_dir, confirmed=["activation.target=outputs.runs.r.evil.relu"])
    assert not marker.exists()


def forged_target(run_dir: Path, target: str, params: dict) -> None:
    """What a hostile copy of a run directory can say: another target and params."""
    state = summary(run_dir)
    state["config"]["activation"].update(target=target, params=params)
    (run_dir / "summary.json").write_text(json.dumps(state))
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    checkpoint["config"] = state["config"]
    torch.save(checkpoint, run_dir / CHECKPOINT_NAME)


def test_resume_runs_no_callable_the_user_did_not_choose(tmp_path, monkeypatch):
    """A forged run directory naming torch.save (f=a file to overwrite) is refused before the
    callable is called, the in-place probe included."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run_dir = interrupted_run(tmp_path / "shared" / "run")
    forged_target(run_dir, "torch.save", {"f": str(victim)})
    with pytest.raises(ConfigError, match="a resumed run runs only a Function or Module class"):
        runner.resume(run_dir)
    assert victim.read_text() == "precious"


def test_resume_never_imports_a_module_beside_the_run_directory(tmp_path, monkeypatch):
    run_dir = interrupted_run(tmp_path / "shared" / "run")
    marker = tmp_path / "pwned"
    (tmp_path / "shared" / "beside.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nrelu = lambda x: x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "shared"))  # as if it were importable
    monkeypatch.chdir(tmp_path)
    forged_target(run_dir, "beside.relu", {})
    with pytest.raises(ConfigError, match="'beside' is in .*shared: code in or beside a run"):
        runner.resume(run_dir, confirmed=["activation.target=beside.relu"])
    assert not marker.exists()


def test_resume_imports_a_path_outside_reluexp_and_torch_only_once_named_again(
    tmp_path, monkeypatch
):
    """31.1: a run directory naming another module's code (antigravity opens a browser on
    import) is refused before the import, with the command that confirms it."""
    run_dir = interrupted_run(tmp_path / "shared" / "run")
    marker = tmp_path / "imported"
    library = tmp_path / "library"
    library.mkdir()
    (library / "elsewhere.py").write_text(
        f"import pathlib, torch\npathlib.Path({str(marker)!r}).touch()\nrelu = torch.relu\n"
    )
    monkeypatch.syspath_prepend(str(library))
    monkeypatch.chdir(tmp_path)
    forged_target(run_dir, "elsewhere.relu", {})
    message = (
        f"resume={run_dir}: its config names activation.target=elsewhere.relu, which is not "
        "reluexp's or torch's; nothing was imported. If you trust it, name it again: "
        f"python -m reluexp resume={run_dir} activation.target=elsewhere.relu"
    )
    with pytest.raises(ConfigError) as refused:
        runner.resume(run_dir)
    assert str(refused.value) == message
    assert not marker.exists()
    with pytest.raises(ConfigError, match="not reluexp's or torch's"):  # another path confirmed
        runner.resume(run_dir, confirmed=["activation.target=elsewhere.other"])
    assert not marker.exists()
    result = runner.resume(run_dir, confirmed=["activation.target=elsewhere.relu"])
    assert marker.exists() and result.status == "completed"


@pytest.mark.slow
def test_resume_takes_the_confirmation_on_its_command_line(tmp_path):
    run_dir = interrupted_run(tmp_path / "run")
    (tmp_path / "mine.py").write_text("import torch\nrelu = torch.relu\n")
    forged_target(run_dir, "mine.relu", {})
    refused = run_cli(f"resume={run_dir}", cwd=tmp_path, check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(f"resume={run_dir} activation.target=mine.relu")
    other = run_cli(f"resume={run_dir}", "activation.target=mine.other", cwd=tmp_path, check=False)
    assert "a resumed run keeps its own config; drop activation.target=mine.other" in other.stderr
    # 42.6: quoted as Hydra's grammar allows, it is the same path.
    run_cli(f"resume={run_dir}", "activation.target='mine.relu'", cwd=tmp_path)
    assert summary(run_dir)["status"] == "completed"


def directory_state(run_dir):
    return {
        p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()
    }


@pytest.mark.slow
def test_resuming_a_completed_run_leaves_its_directory_unchanged(tmp_path):
    run_dir = tmp_path / "run"
    run_cli("steps=3", f"hydra.run.dir={run_dir}", "hydra.job.name=custom", *SMALL, cwd=tmp_path)
    # One log name whatever hydra.job.name says.
    assert (run_dir / "reluexp.log").is_file() and not (run_dir / "custom.log").exists()
    before = directory_state(run_dir)
    for _ in range(2):
        result = run_cli(f"resume={run_dir}", cwd=tmp_path)
        assert result.stderr.strip().endswith("nothing to resume")
        assert "already completed after 3 steps" in result.stderr
    assert directory_state(run_dir) == before


@pytest.mark.slow
def test_a_users_broken_config_file_is_one_line_naming_the_file_or_the_key(tmp_path, capsys):
    configs = tmp_path / "cfg" / "activation"
    configs.mkdir(parents=True)
    (configs / "bad_yaml.yaml").write_text("name: x\ntarget: torch.relu\n  reference: [\n")
    (configs / "bad_key.yaml").write_text("name: y\ntarget: torch.relu\nbogus: 3\n")
    (configs / "latin1.yaml").write_bytes("name: z\ntarget: torch.relu  # é\n".encode("latin-1"))
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'cfg'}]"
    expected = {
        "bad_yaml": f"{configs / 'bad_yaml.yaml'}, line 3, column 12: mapping values are not "
        "allowed here",
        "bad_key": "In 'activation/bad_key': ConfigKeyError raised while composing config: "
        "Key 'bogus' not in 'ActivationConfig' (activation.bogus)",
        # 31.10: not UTF-8
        "latin1": "a config file is not UTF-8 text (byte 0xe9 at offset 30); Hydra reads YAML "
        "as UTF-8: check the files on hydra.searchpath",
    }
    for name, message in expected.items():
        result = run_cli(searchpath, f"activation={name}", cwd=tmp_path, check=False)
        assert (result.returncode, result.stderr.strip()) == (2, f"reluexp: error: {message}")
        assert check.main([searchpath, f"activation={name}"]) == 2
        assert capsys.readouterr().err.strip() == f"reluexp.check: error: {message}"
    assert not (tmp_path / "outputs").exists()


def test_a_disk_too_full_for_the_reserve_leaves_no_partial_reserve(tmp_path, monkeypatch):
    """31.9: the reserve cannot be written whole: one line, and no half-written reserve left."""
    write_bytes = Path.write_bytes

    def half_then_full(path, data):
        write_bytes(path, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", half_then_full)
    with pytest.raises(ConfigError) as refused:
        runner.run(small_config(steps=3), tmp_path / "run")
    monkeypatch.undo()
    assert str(refused.value).endswith(
        "no room for the run's records (No space left on device); free some space and run again"
    )
    assert not (tmp_path / "run" / ".reluexp.reserve").exists()
