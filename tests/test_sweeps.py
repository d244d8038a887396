"""Sweeps end to end: launchers, failures as results, and the sweep summary."""

import csv
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from reluexp.config import Config, ConfigError
from reluexp.hydra_glue import compose_config
from reluexp.options import FileDataConfig
from reluexp.record.events import read_scalars
from reluexp.record.summary import RunSummary
from reluexp.run.data import read_data
from reluexp.run.rundir import hold_run
from reluexp.sweeps.names import job_dir_name
from reluexp.sweeps.report.command import main as report_main
from reluexp.sweeps.report.discovery import Job, find_jobs
from reluexp.sweeps.report.outputs import (
    Written,
    markdown_table,
    parting_text,
    summary_texts,
    write_report,
)
from reluexp.sweeps.report.statistics import Group, paired, relative_gap, summary_rows, t_975
from reluexp.sweeps.report.verdicts import check_dir, custom_function
from reluexp.sweeps.slurm import check_slurm_resources
from reluexp.sweeps.terminal import Plan, closing_line, time_left
from reluexp.sweeps.workers import threads_per_job
from tests.helpers import (
    RAISING_FUNCTION,
    REPO_ROOT,
    SMALL,
    command_after,
    fake_sweep,
    run_cli,
    small_config,
    tensorboard,
)

pytestmark = pytest.mark.slow

# threads is part of a job's numbers (matmul splits its reduction by thread), so the
# launcher comparison fixes it; joblib would otherwise give each job cores // n_jobs.
GRID = ["activation=myrelu,relu", "seed=0,1", "steps=40", "device=cpu", "threads=1"]


def sweep(tmp_path, *args, check=True):
    result = run_cli("-m", *args, cwd=tmp_path, check=check)
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    return sweep_dir, result


def job_summaries(sweep_dir):
    return {
        p.name.split("_", 1)[1]: json.loads((p / "summary.json").read_text())
        for p in sweep_dir.iterdir()
        if (p / "summary.json").is_file()
    }


@pytest.fixture(scope="module")
def basic_sweep(tmp_path_factory):
    return sweep(tmp_path_factory.mktemp("basic"), *GRID)[0]


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_launchers_give_the_basic_launchers_numbers(tmp_path, basic_sweep, launcher):
    sweep_dir, _ = sweep(tmp_path, f"hydra/launcher={launcher}", *GRID)
    expected, got = job_summaries(basic_sweep), job_summaries(sweep_dir)
    assert sorted(got) == sorted(expected) and len(got) == 4
    for job, summary in got.items():
        assert summary["status"] == "completed"
        assert summary["final_loss"] == expected[job]["final_loss"], job
        assert summary["min_loss"] == expected[job]["min_loss"], job
    assert (sweep_dir / "summary.md").is_file() and (sweep_dir / "loss_curves.png").is_file()


def test_a_job_runs_as_it_would_alone_whatever_ran_before_it(tmp_path):
    """torch threads set by one job do not leak into the next job of an in-process sweep."""
    args = ["steps=30", "device=cpu"]
    sweep_dir, _ = sweep(tmp_path, "threads=1,null", *args)
    run_cli("threads=null", *args, "hydra.run.dir=alone", cwd=tmp_path)
    alone = json.loads((tmp_path / "alone" / "summary.json").read_text())
    (after_threads_1,) = sweep_dir.glob("001_*")
    summary = json.loads((after_threads_1 / "summary.json").read_text())
    if alone["threads"] == 1:
        pytest.skip("torch's default is 1 thread here: the leak would not show")
    assert summary["threads"] == alone["threads"]
    loss = ["loss/train"]
    assert read_scalars(after_threads_1, loss) == read_scalars(tmp_path / "alone", loss)


def test_a_sweep_says_how_many_jobs_before_hydra_composes_them(tmp_path):
    """31.10: Hydra's basic sweeper composes every job's config before the first starts (a
    200-job sweep was silent for 108 s under load): the first line says what is coming."""
    sweep_dir, result = sweep(tmp_path, "seed=0,1,2", "steps=2", "device=cpu")
    assert result.stderr.splitlines()[0] == (
        f"reluexp: sweep of 3 jobs into outputs/multirun/{sweep_dir.name}; Hydra composes each "
        "job's config before the first one starts"
    )


def test_a_sweep_reads_its_data_once_for_its_pre_flight_and_every_job(tmp_path):
    """61.8: the pre-flight checked each distinct job by preparing it whole and each job read
    the data again (CIFAR read 4 times for 3 seeds); in one process they share one read, and a
    file edited between two reads is read again."""
    (tmp_path / "counting.py").write_text(
        "import torch\n\n"
        "def load():\n"
        "    with open('reads.txt', 'a') as reads:\n"
        "        reads.write('read\\n')\n"
        "    draws = torch.Generator().manual_seed(0)\n"
        "    return torch.randn(40, 5, generator=draws), torch.randn(40, 2, generator=draws)\n"
    )
    sweep_dir, _ = sweep(
        tmp_path, "data=callable", "data.loader=counting.load", "seed=0,1,2", "steps=2"
    )
    assert (tmp_path / "reads.txt").read_text() == "read\n"
    assert [s["status"] for s in job_summaries(sweep_dir).values()] == ["completed"] * 3


def test_data_read_again_is_a_copy_and_an_edited_file_is_read_anew(tmp_path):
    path = tmp_path / "data.pt"
    torch.save({"x": torch.ones(20, 3), "y": torch.zeros(20, 1)}, path)
    config = Config(data=FileDataConfig(path=str(path)))
    first, second = read_data(config), read_data(config)
    assert torch.equal(first[0], second[0]) and first[0] is not second[0]
    first[0].zero_()  # a model that writes into its inputs changes no later run's
    assert torch.equal(read_data(config)[0], torch.ones(20, 3))
    torch.save({"x": torch.full((30, 3), 2.0), "y": torch.zeros(30, 1)}, path)
    assert torch.equal(read_data(config)[0], torch.full((30, 3), 2.0))


def test_my_function_beside_its_builtin_is_the_command_the_closing_line_gives(tmp_path):
    """62.3: a sweep of a custom Function that names its reference but never trains it had an
    empty `vs reference` and no word why; its closing line gives the command that pairs them,
    which, run as printed, fills it."""
    args = [
        "activation=custom",
        "activation.target=tests.corpus.Swish",
        "activation.reference=torch.nn.functional.silu",
        "seed=0,1",
        "steps=5",
    ]
    # From the repository, where tests.corpus imports; the sweeps go to tmp_path.
    result = run_cli("-m", *args, f"hydra.sweep.dir={tmp_path / 'alone'}", cwd=REPO_ROOT)
    closing = result.stderr.strip().splitlines()[-1]
    command = command_after("With the built-in beside (no job trained the reference)", closing)
    assert command == (
        "python -m reluexp -m activation=custom activation.reference=torch.nn.functional.silu "
        "seed=0,1 steps=5 activation.target=tests.corpus.Swish,torch.nn.functional.silu"
    )
    assert (
        "No job trained torch.nn.functional.silu" in (tmp_path / "alone" / "summary.md").read_text()
    )
    paired = run_cli(
        *shlex.split(command)[3:], f"hydra.sweep.dir={tmp_path / 'paired'}", cwd=REPO_ROOT
    )
    assert "With the built-in beside" not in paired.stderr
    rows = list(csv.DictReader((tmp_path / "paired" / "summary.csv").open()))
    custom = next(row for row in rows if "Swish" in row["group"])
    assert custom["reference_group"] == "activation.target=torch.nn.functional.silu"
    assert custom["final_loss_vs_reference"] != ""


@pytest.mark.parametrize(
    ("cores", "n_jobs", "threads"), [(8, 2, 4), (8, 3, 2), (8, -1, 1), (1, 2, 1), (16, 32, 1)]
)
def test_joblib_jobs_share_the_cores(monkeypatch, cores, n_jobs, threads):
    """75.5: the sweep below cannot tell a slice from torch's default on one core."""
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    overrides = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}"]
    assert threads_per_job(compose_config(overrides).hydra) == threads
    assert threads_per_job(compose_config([]).hydra) is None  # one job at a time: torch's


def test_joblib_splits_the_cores_between_jobs(tmp_path):
    sweep_dir, _ = sweep(
        tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1", "steps=5"
    )
    cores = os.cpu_count()
    for summary in job_summaries(sweep_dir).values():
        assert summary["threads"] == max(1, cores // 2)


def test_summary_numbers_come_from_the_jobs(basic_sweep):
    rows = {row["group"]: row for row in csv.DictReader((basic_sweep / "summary.csv").open())}
    # 33.4: groups are named by what tells them apart; what every job has, once above.
    assert set(rows) == {"activation=myrelu", "activation=relu"}
    assert "Every job: device=cpu steps=40 threads=1." in (basic_sweep / "summary.md").read_text()
    for activation in ("myrelu", "relu"):
        finals = [
            s["final_loss"]
            for job, s in job_summaries(basic_sweep).items()
            if f"activation={activation}," in job
        ]
        row = rows[f"activation={activation}"]
        assert row["jobs"] == row["completed"] == "2"
        assert float(row["final_loss_mean"]) == statistics.mean(finals)
        assert float(row["final_loss_std"]) == statistics.stdev(finals)
        assert float(row["final_loss_min"]) == min(finals)
    assert "| activation=myrelu | 2 |" in (basic_sweep / "summary.md").read_text()


def test_failures_are_results_and_the_sweep_exits_nonzero(tmp_path):
    # One job trains, one diverges (lr=10), two raise (a backward that raises at step 0).
    (tmp_path / "planted.py").write_text(RAISING_FUNCTION)
    sweep_dir, result = sweep(
        tmp_path,
        "activation=custom",
        "activation.target=reluexp.functions.MyReLU,planted.Raises",
        "lr=1e-6,10",
        "steps=100",
        "device=cpu",
        check=False,
    )
    assert result.returncode == 1
    # Job lines name what varies across the sweep; the sweep ends with one closing line.
    lines = result.stderr.strip().splitlines()
    job_lines = [line for line in lines if re.match(r"\[\d/4\] ", line)]
    assert job_lines[0].startswith(
        "[1/4] activation.target=reluexp.functions.MyReLU lr=1e-06 completed"
    )
    assert not any("steps=" in line or "device=" in line for line in job_lines)
    # 62.9: each failure said once, on its job line (a `job failed:` line said it before).
    assert sum("planted failure in the backward" in line for line in lines) == 2
    shown = sweep_dir.relative_to(tmp_path)
    # 62.4: the lab's verdict on the Function whose backward raises closes the line.
    assert re.fullmatch(
        re.escape(
            f"reluexp: sweep ended, 4 jobs: completed 1, diverged 1, failed 2. Sweep dir: "
            f"{shown} (summary.md, summary.csv, loss_curves.png). Dashboard: `tensorboard "
            f"--logdir {shown}`. The lab finds Raises WRONG (lab/Raises-"
        )
        + r"[0-9a-f]{8}/check\.md\)",
        lines[-1],
    )
    # Loss lines on stdout carry their job's label: the completed job's step 99.
    assert re.fullmatch(r"\[1/4\] 99 \S+\n", result.stdout)
    statuses = {job: s["status"] for job, s in job_summaries(sweep_dir).items()}
    assert sorted(statuses.values()) == ["completed", "diverged", "failed", "failed"]
    failed = [s for s in job_summaries(sweep_dir).values() if s["status"] == "failed"]
    assert all(s["error"] == "RuntimeError: planted failure in the backward" for s in failed)
    summary_md = (sweep_dir / "summary.md").read_text()
    assert "completed: 1, diverged: 1, failed: 2" in summary_md
    assert "RuntimeError: planted failure in the backward" in summary_md


def test_diverging_sweep_exits_zero(tmp_path):
    _, result = sweep(tmp_path, "lr=1e-6,10", "steps=60", "device=cpu")
    assert result.returncode == 0


def test_the_dashboard_named_is_one_tensorboard_ticks_by_itself():
    """47.1: TensorBoard ticks every run of a logdir only up to 40."""
    small = Written([], [], runs=40, view_runs=3)
    assert small.dashboard("s") == "`tensorboard --logdir s`"
    headline = Written([], [], runs=43, view_runs=8)
    assert headline.dashboard("s") == (
        "`tensorboard --logdir s/groups` (one run per group; every job: `tensorboard --logdir "
        "s`, 43 runs, more than the 40 TensorBoard ticks by itself)"
    )
    huge = Written([], [], runs=500, view_runs=51)
    assert huge.dashboard("s").startswith(
        "`tensorboard --logdir s/groups` (one run per group, 51 runs, more than the 40 "
        "TensorBoard ticks by itself: tick them in its run list; every job: "
    )


def test_an_optuna_sweep_says_only_what_varies_and_no_noise(tmp_path):
    """47.4: seven `setup plugin alembic...` lines, every fixed setting in each job line, and
    a summary ending 'No multirun.yaml: the jobs are those found'."""
    sweep_dir, result = sweep(
        tmp_path, "experiment=lr_search", "hydra.sweeper.n_trials=3", "steps=5", "device=cpu"
    )
    assert "setup plugin" not in result.stderr and "A new study created" not in result.stderr
    job_lines = [line for line in result.stderr.splitlines() if line.startswith("[")]
    job_lines = [line for line in job_lines if not line.startswith("[20")]  # Hydra's own
    assert [line[:9] for line in job_lines] == ["[1/3] lr=", "[2/3] lr=", "[3/3] lr="]
    assert not any("device=" in line or "steps=" in line for line in job_lines)
    summary_md = (sweep_dir / "summary.md").read_text()
    assert "multirun.yaml" not in summary_md and "3 jobs: " in summary_md


def test_report_on_a_partial_sweep(basic_sweep, tmp_path):
    partial = tmp_path / "partial"
    subprocess.run(["cp", "-r", str(basic_sweep), str(partial)], check=True)
    jobs = sorted(p for p in partial.iterdir() if (p / ".hydra").is_dir())
    running = json.loads((jobs[0] / "summary.json").read_text())
    running["status"] = "running"  # as a SIGKILLed job leaves it
    (jobs[0] / "summary.json").write_text(json.dumps(running))
    for launched_only in ("summary.json", "checkpoint.pt", "events.out.tfevents.*"):
        for path in jobs[1].glob(launched_only):  # launched, never reached training
            path.unlink()
    for name in ("summary.md", "summary.csv", "loss_curves.png"):
        (partial / name).unlink()
    result = subprocess.run(
        [sys.executable, "-m", "reluexp.report", str(partial)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "4 jobs: completed: 2, not started: 1, running: 1" in result.stdout
    assert (partial / "loss_curves.png").stat().st_size > 10_000
    assert len(list(csv.DictReader((partial / "summary.csv").open()))) == 2


def test_report_refuses_what_is_not_a_sweep(tmp_path, capsys):
    assert report_main([str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert report_main([str(tmp_path)]) == 2
    assert "no job directories and no multirun.yaml in it" in capsys.readouterr().err


def test_a_sweep_stopped_before_its_first_job_is_reported_as_planned(tmp_path, capsys):
    """42.3: its plan alone (multirun.yaml): every job listed, not started."""
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    params: null\n  overrides:\n    hydra: []\n"
        "    task: ['seed=0,1,2', steps=5]\n"
    )
    assert report_main([str(tmp_path)]) == 0
    assert "3 jobs: not started: 3" in capsys.readouterr().out
    (row,) = csv.DictReader((tmp_path / "summary.csv").open())
    assert (row["group"], row["not_started"]) == ("steps=5", "3")


def test_a_diverged_groups_min_loss_is_what_its_runs_reached(tmp_path):
    """47.4: a diverged group's min loss read `– ± –` though every job had one."""
    jobs = {f"lr=10 seed={seed}": small_config(steps=20, seed=seed, lr=10.0) for seed in (0, 1)}
    fake_sweep(tmp_path, jobs)
    write_report(tmp_path)
    reached = [RunSummary.read(job).min_loss for job in sorted(tmp_path.glob("00*"))]
    assert all(isinstance(value, float) for value in reached)
    (row,) = csv.DictReader((tmp_path / "summary.csv").open())
    assert row["diverged"] == "2" and float(row["min_loss_mean"]) == statistics.mean(reached)
    mean = f"{statistics.mean(reached):.4g}"
    assert f"| {mean} ± " in (tmp_path / "summary.md").read_text()
    assert "(over 2 jobs, diverged included)" in (tmp_path / "summary.md").read_text()


def test_a_gap_over_fewer_seeds_than_the_means_beside_it_says_so(tmp_path):
    """51.3: `+0.00e+00 (identical)` sat beside group means of 2.029 and 1.972: the gap pairs
    the seeds both groups completed, the means are over every completed run."""
    jobs = {}
    for seed in (0, 1, 2):
        custom, builtin = small_config(steps=3, seed=seed), small_config(steps=3, seed=seed)
        builtin.activation.name, builtin.activation.target = "relu", "torch.relu"
        if seed < 2:  # the custom group never ran seed 2
            jobs[f"activation=myrelu seed={seed}"] = custom
        jobs[f"activation=relu seed={seed}"] = builtin
    fake_sweep(tmp_path, jobs)
    write_report(tmp_path)
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    custom, reference = rows["activation=myrelu"], rows["activation=relu"]
    assert custom["final_loss_mean"] != reference["final_loss_mean"]
    assert custom["final_loss_vs_reference_seeds"] == "2"
    assert (
        "+0.00e+00 vs activation=relu over the 2 seeds both completed (identical)"
        in (tmp_path / "summary.md").read_text()
    )


def test_steps_per_s_of_jobs_on_a_busy_machine_are_said_not_to_compare(tmp_path):
    """47.4: 9.0 steps/s for relu beside 96.5 for myrelu read as 'relu is 10x slower'; the
    jobs had run on a machine busier than its cores."""
    fake_sweep(
        tmp_path,
        {f"activation={name}": small_config(steps=3) for name in ("myrelu", "relu")},
    )
    (busy_job, quiet_job) = sorted(tmp_path.glob("00*"))
    for job, load in ((busy_job, 5.25), (quiet_job, 0.5)):
        record = json.loads((job / "summary.json").read_text())
        assert record["cores"] == os.cpu_count() and record["load_average"] >= 0
        record["load_average"], record["cores"] = load, 2
        (job / "summary.json").write_text(json.dumps(record))
    write_report(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert (
        "1 of 2 jobs ended on a busy machine (load up to 5.2 on 2 cores): their steps/s do not "
        "compare." in text
    )
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    assert rows["activation=myrelu"]["jobs_on_a_busy_machine"] == "1"
    assert rows["activation=relu"]["jobs_on_a_busy_machine"] == "0"
    assert text.count("(1 of 1 on a busy machine)") == 1


def test_a_report_says_how_many_runs_its_losses_aggregate(tmp_path):
    """42.3: completed runs without a final loss (steps=0) are not among those aggregated,
    and the pairs they are in are left out as such, not as unpaired."""
    jobs = {}
    for seed in range(4):
        for activation in ("myrelu", "relu"):
            config = small_config(steps=0 if seed >= 2 else 3, seed=seed)
            target = {"myrelu": "reluexp.functions.MyReLU", "relu": "torch.relu"}[activation]
            config.activation.name, config.activation.target = activation, target
            jobs[f"activation={activation} seed={seed}"] = config
    fake_sweep(tmp_path, jobs)
    write_report(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert "Losses aggregate the 4 completed runs with a finite final loss (left out: 4 " in text
    assert "(over 2 of 4 completed jobs)" in text
    assert "(left out: seed 2, 3: no finite final loss)" in text


def test_each_custom_groups_row_carries_the_labs_verdict_checked_once_per_function(tmp_path):
    """62.4: a Function whose backward is wrong and a right one both read `no difference
    detected` in the report; the lab's verdict was nowhere in it."""
    jobs = {}
    targets = {"right": "reluexp.functions.MyReLU", "wrong": "tests.helpers.DoubledGradientRelu"}
    for lr in (1e-5, 2e-5):
        for name, target in targets.items():
            config = small_config(steps=3, lr=lr)
            config.activation.name, config.activation.target = name, target
            jobs[f"activation={name} lr={lr}"] = config
    fake_sweep(tmp_path, jobs)
    from reluexp.lab.sweep import check_activation

    checked = []

    def counted(function, directory):
        checked.append(function["target"])
        check_activation(function, directory)

    written = write_report(tmp_path, counted)
    assert sorted(checked) == sorted(targets.values())  # once per Function, not per group
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    wrong_report = rows["activation=wrong lr=1e-05"]["lab_report"]
    assert wrong_report.startswith("lab/DoubledGradientRelu-")
    assert json.loads((tmp_path / wrong_report).with_name("check.json").read_text())["verdict"] == (
        "wrong"
    )
    for lr in ("1e-05", "2e-05"):
        assert rows[f"activation=wrong lr={lr}"]["lab_verdict"] == "WRONG"
        assert rows[f"activation=right lr={lr}"]["lab_verdict"] == "gradients correct"
    text = (tmp_path / "summary.md").read_text()
    assert f"| WRONG: {wrong_report} |" in text and "| gradients correct |" in text
    assert f"The lab finds DoubledGradientRelu WRONG ({wrong_report}): read its report" in text
    assert written.not_correct == [f"DoubledGradientRelu WRONG ({wrong_report})"]
    assert f"The lab finds DoubledGradientRelu WRONG ({wrong_report})" in closing_line(
        tmp_path, written
    )
    # A later report reads the verdicts back (no check passed in, none run).
    checked.clear()
    write_report(tmp_path)
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    assert rows["activation=wrong lr=2e-05"]["lab_verdict"] == "WRONG" and not checked


def test_a_function_the_lab_cannot_take_or_write_is_said_not_checked_in_its_row(tmp_path):
    builtin = small_config(steps=2)
    builtin.activation.name, builtin.activation.target = "relu", "torch.relu"
    fake_sweep(tmp_path, {"activation=myrelu": small_config(steps=2), "activation=relu": builtin})
    summary_path = next(tmp_path.glob("000_*")) / "summary.json"
    record = json.loads(summary_path.read_text())
    record["config"]["activation"]["target"] = "nowhere.Gone"
    summary_path.write_text(json.dumps(record))
    from reluexp.lab.sweep import check_activation

    write_report(tmp_path, check_activation)
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    assert rows["activation=myrelu"]["lab_verdict"].startswith("not checked: ")
    assert "nowhere" in rows["activation=myrelu"]["lab_verdict"]
    assert rows["activation=relu"]["lab_verdict"] == ""

    def disk_full(function, directory):
        raise OSError(28, "No space left on device")

    record["config"]["activation"]["target"] = "reluexp.functions.MyReLU"
    summary_path.write_text(json.dumps(record))
    write_report(tmp_path, disk_full)  # the table is written, the verdict says why it has none
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    assert re.fullmatch(
        r"not checked: cannot write lab/MyReLU-[0-9a-f]{8}: No space left on device",
        rows["activation=myrelu"]["lab_verdict"],
    )


# Functions that train as a ReLU does and misbehave on a 0-dim input, which only the lab's edge
# cases give them: one hangs there, one stops its own process there (a Ctrl-C while the lab
# checks it).
MISBEHAVING = """import os, signal, time
import torch


class Relu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0)


class HangZeroDim(Relu):
    @staticmethod
    def forward(ctx, x):
        while x.dim() == 0:
            time.sleep(3600)
        return Relu.forward(ctx, x)


class InterruptsAtZeroDim(Relu):
    @staticmethod
    def forward(ctx, x):
        if x.dim() == 0:
            os.kill(os.getpid(), signal.SIGINT)
        return Relu.forward(ctx, x)
"""


def test_a_function_that_hangs_in_the_lab_is_not_checked_and_the_sweep_ends_with_its_summary(
    tmp_path,
):
    """74.1: the sweep's end waited forever in the lab's check, silent, with no summary."""
    (tmp_path / "misbehaving.py").write_text(MISBEHAVING)
    targets = "activation.target=misbehaving.HangZeroDim,misbehaving.Relu"
    args = ["-m", "activation=custom", targets, "activation.reference=torch.relu", "seed=0"]
    result = run_cli(*args, "steps=3", "lab_seconds=2", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert "reluexp: the lab checks HangZeroDim ... not checked: took longer than 2 s\n" in (
        result.stderr
    )
    assert re.search(
        r"the lab checks Relu \.\.\. gradients correct.* \(\d+\.\d s\)\n", result.stderr
    )
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "sweep/summary.csv").open())}
    hanging = rows["activation.target=misbehaving.HangZeroDim"]
    assert hanging["lab_verdict"] == "not checked: took longer than 2 s"
    assert rows["activation.target=misbehaving.Relu"]["lab_verdict"] == "gradients correct"
    assert result.stderr.strip().splitlines()[-1].startswith("reluexp: sweep ended, 2 jobs")


def test_a_stop_while_the_lab_checks_ends_its_check_at_once_then_the_sweep_with_its_summary(
    tmp_path,
):
    """74.1: the first Ctrl-C during the sweep's lab check did nothing for 30 s."""
    (tmp_path / "misbehaving.py").write_text(MISBEHAVING)
    targets = "activation.target=misbehaving.InterruptsAtZeroDim,misbehaving.Relu"
    args = ["-m", "activation=custom", targets, "activation.reference=torch.relu", "seed=0"]
    result = run_cli(*args, "steps=3", "hydra.sweep.dir=sweep", cwd=tmp_path, check=False)
    assert result.returncode == 130, result.stderr
    assert (
        "the lab checks InterruptsAtZeroDim ... not checked: stopped by SIGINT\n" in result.stderr
    )
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "sweep/summary.csv").open())}
    stopped = rows["activation.target=misbehaving.InterruptsAtZeroDim"]
    assert stopped["lab_verdict"] == "not checked: stopped by SIGINT"
    # No Function is checked after the stop (groups are checked in the report's order: equal
    # losses, by label); the sweep's summary is written whole.
    assert rows["activation.target=misbehaving.Relu"]["lab_verdict"] == (
        "not checked: the command was stopped"
    )
    assert result.stderr.strip().splitlines()[-1].startswith("reluexp: sweep ended, 2 jobs")


def test_a_job_whose_summary_cannot_be_read_is_said_unreadable_not_failed(tmp_path, capsys):
    """75.4: the job line said `failed` for a job whose summary.json could not be read, which
    the report then listed as `unreadable`."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from reluexp.sweeps import launcher

    run_dir = tmp_path / "000_seed=0"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text("{not json")
    hydra = {"hydra": {"runtime": {"output_dir": str(run_dir)}}}
    result = SimpleNamespace(hydra_cfg=OmegaConf.create(hydra))
    submitted = SimpleNamespace(results=lambda: [result], job_id="1")
    follower = launcher.JobFollower(
        OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}),
        [launcher.Job(0, ["seed=0"], submitted)],
        on_slurm=False,
    )
    follower.returned(follower.pending[0])
    line = capsys.readouterr().err.strip()
    assert line.startswith("[1/?] seed=0 unreadable: ") and "summary.json: unreadable" in line


# hydra-submitit-launcher 1.2.0's BaseSubmititLauncher.launch, whose first half
# sweeps/launcher.submit copies (pyproject.toml pins the release).
SUBMITIT_LAUNCH_SHA256 = "546875669010f80d6ceede740e8bf2d18088cf5bcce2eb4794c735fa3dc2fc0e"


def test_the_submitit_launch_reluexp_copies_is_the_pinned_releases():
    """75.4: a release whose launch submits otherwise fails here (read it and copy again),
    not in a user's sweep."""
    import hashlib
    import inspect
    from importlib import metadata

    import tomllib

    submitit_launcher = pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher"
    )
    pinned = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert "hydra-submitit-launcher==1.2.0" in pinned["optional-dependencies"]["sweeps"]
    assert metadata.version("hydra-submitit-launcher") == "1.2.0"
    source = inspect.getsource(submitit_launcher.BaseSubmititLauncher.launch)
    assert hashlib.sha256(source.encode()).hexdigest() == SUBMITIT_LAUNCH_SHA256


def test_the_slurm_preset_is_reluexps_launcher_and_asks_what_a_node_has(monkeypatch):
    """75.5: it restated the preset's YAML. The preset launches through reluexp's launcher
    (which follows each job to its end), and what it asks of a node is checked against what
    SLURM says the partition's nodes have, before anything is submitted."""
    import subprocess as processes

    from reluexp.cli import register

    register()  # what `python -m reluexp` makes known to Hydra: its launchers among them
    cfg = compose_config(["hydra/launcher=slurm", "hydra.launcher.partition=gpu"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.reluexp_launcher.launchers.SlurmLauncher"

    def sinfo(command, **kwargs):
        assert command[-2:] == ["-p", "gpu"]
        return processes.CompletedProcess(command, 0, stdout="2 4000\n", stderr="")

    monkeypatch.setattr("reluexp.sweeps.slurm.subprocess.run", sinfo)
    check_slurm_resources(launcher)  # one CPU and 2 GB: a 2-CPU, 4 GB node takes it
    launcher.cpus_per_task = 4
    with pytest.raises(ConfigError, match="cpus_per_task=4: the nodes of partition gpu have"):
        check_slurm_resources(launcher)


def test_the_difference_to_the_reference_run_is_the_independent_loops(
    tmp_path, seed_steps, seed_steps_with_torch_relu
):
    """myrelu against relu, same seed: identical until the first exact zero, then log10 of
    |a - b| / |b| of the article's loop run twice, independently of reluexp; the final step's
    signed gap is the run's HParams metric."""
    from reluexp.config import Config
    from reluexp.record.tags import FINAL_LOSS_VS_REFERENCE, IDENTICAL_LOG10

    steps = 200
    configs = {}
    for name, target in (("myrelu", "reluexp.functions.MyReLU"), ("relu", "torch.relu")):
        config = Config(device="cpu", steps=steps, quiet=True)
        config.activation.name, config.activation.target = name, target
        configs[f"activation={name}"] = config
    fake_sweep(tmp_path, configs)
    write_report(tmp_path)
    (custom_dir,) = tmp_path.glob("000_*")
    gap_tag = "lossgap_log10/activation=myrelu"
    stored = read_scalars(custom_dir, [gap_tag, FINAL_LOSS_VS_REFERENCE])
    custom, builtin = seed_steps[:steps], seed_steps_with_torch_relu[:steps]
    # The losses are float32 values, as the events hold them.
    expected = [(c["loss"] - b["loss"]) / abs(b["loss"]) for c, b in zip(custom, builtin)]
    expected_log10 = [math.log10(abs(gap)) if gap else IDENTICAL_LOG10 for gap in expected]
    assert list(stored[gap_tag]) == list(range(steps))
    assert list(stored[gap_tag].values()) == pytest.approx(expected_log10, rel=1e-6)
    first_zero = next(t for t, c in enumerate(custom) if c["exact_zeros"] > 0)
    assert set(list(stored[gap_tag].values())[: first_zero + 1]) == {IDENTICAL_LOG10}
    assert any(value > IDENTICAL_LOG10 for value in stored[gap_tag].values())
    assert stored[FINAL_LOSS_VS_REFERENCE] == {steps - 1: pytest.approx(expected[-1], rel=1e-6)}
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    assert list(rows) == ["activation=relu", "activation=myrelu"]  # the reference first
    assert rows["activation=myrelu"]["reference_group"] == "activation=relu"
    gap = float(rows["activation=myrelu"]["final_loss_vs_reference"])
    assert gap == pytest.approx((custom[-1]["loss"] - builtin[-1]["loss"]) / builtin[-1]["loss"])
    assert (
        tmp_path / "groups" / "activation=myrelu" / "events.out.tfevents.reluexp-group"
    ).is_file()


def submit_processes(sweep: subprocess.Popen) -> list[psutil.Process]:
    """submitit's job processes (`python -m submitit.core._submit ...`) the sweep started."""
    below = psutil.Process(sweep.pid).children(recursive=True)
    return [p for p in below if "submitit.core._submit" in " ".join(p.cmdline())]


def trained(run_dir) -> dict[int, float]:
    """The losses a run's event files hold, by step."""
    return read_scalars(run_dir, ["loss/train"])["loss/train"]


def test_a_killed_submitit_local_job_is_a_failed_job_and_the_sweep_ends(tmp_path):
    command = [sys.executable, "-m", "reluexp", "-m", "hydra/launcher=submitit_local"]
    command += ["seed=0,1,2", "steps=30000", "device=cpu", "threads=1"]
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # The three jobs run at once: kill one once every run is training.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            sweeps = list((tmp_path / "outputs" / "multirun").glob("*"))
            started = [s["status"] for s in job_summaries(sweeps[0]).values()] if sweeps else []
            if started == ["running"] * 3:
                break
            time.sleep(0.2)
        # ... and has streamed steps (31.10: the killed one's are its steps_done).
        job_dirs = [p.parent for p in sweeps[0].glob("*/summary.json")]
        while time.monotonic() < deadline and not all(trained(d) for d in job_dirs):
            time.sleep(0.2)
        jobs = submit_processes(process)
        jobs[0].kill()
        _, stderr = process.communicate(timeout=600)
    finally:
        process.kill()
    assert process.returncode == 1, stderr
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    statuses = sorted(s["status"] for s in job_summaries(sweep_dir).values())
    assert statuses == ["completed", "completed", "failed"]
    failed = next(s for s in job_summaries(sweep_dir).values() if s["status"] == "failed")
    assert failed["error"] == "its process ended without a result (killed, or out of memory)"
    (killed_dir,) = [d for d in job_dirs if json.loads((d / "summary.json").read_text())["error"]]
    assert failed["steps_done"] == max(trained(killed_dir)) + 1 > 1
    assert "3 jobs: completed: 2, failed: 1" in (sweep_dir / "summary.md").read_text()
    assert "failed: its process ended without a result" in stderr
    assert not any(job.is_running() and job.status() != psutil.STATUS_ZOMBIE for job in jobs)


def paired_group(custom: list[float], reference: list[float], metric: str) -> Group:
    """A custom group whose jobs pair with reference jobs of the same seeds."""
    group = Group("activation=custom")
    for seed, (mine, theirs) in enumerate(zip(custom, reference)):
        jobs = [
            Job(None, RunSummary(status="completed", seed=seed, **{metric: value}))
            for value in (mine, theirs)
        ]
        group.jobs.append(jobs[0])
        group.pairs.append((jobs[0], jobs[1]))
    return group


def test_where_a_pair_parts_says_between_which_logged_steps():
    """33.5: with log_every=10 (digits' experiments) the first differing logged step is 10; the
    runs part somewhere after step 0, which is what the report says."""
    custom = Group("activation=myrelu", reference=Group("activation=relu"))
    custom.gap = {0: 0.0, 10: 1e-4, 20: 2e-4}
    assert parting_text(custom.parts_at(), custom.identical_until()) == (
        "parts between steps 0 and 10"
    )
    custom.gap = {0: 0.0, 1: 0.0, 2: 1e-4}
    assert parting_text(custom.parts_at(), custom.identical_until()) == "parts at step 2"
    custom.gap = {0: 0.0, 10: 0.0}
    assert parting_text(custom.parts_at(), custom.identical_until()) == "identical"


def test_the_paired_comparison_is_a_t_interval_over_seeds():
    t_975_4 = 2.776  # Student's t, 4 degrees of freedom
    worse = paired_group(
        [0.91, 0.90, 0.92, 0.91, 0.90], [0.94, 0.93, 0.94, 0.93, 0.93], "val_accuracy"
    )
    comparison = paired(worse)
    differences = [-0.03, -0.03, -0.02, -0.02, -0.03]
    assert comparison.metric == "val_accuracy"
    assert comparison.differences == pytest.approx(differences)
    assert comparison.mean == pytest.approx(statistics.mean(differences))
    half_width = t_975_4 * statistics.stdev(differences) / 5**0.5
    assert comparison.half_width == pytest.approx(half_width)
    assert comparison.verdict == "custom worse by 2.6% ± 0.68% accuracy over 5 seeds"
    alike = paired_group([0.95, 0.93, 0.96], [0.94, 0.94, 0.95], "val_accuracy")
    assert paired(alike).verdict == "no difference detected over 3 seeds"
    # Without a validation split: the final loss, relative to the reference's.
    losses = paired_group([1.1, 2.2], [1.0, 2.0], "final_loss")
    comparison = paired(losses)
    assert comparison.differences == pytest.approx([0.1, 0.1])
    assert comparison.verdict == "custom worse by 10% ± 0% final loss over 2 seeds"


def test_a_t_interval_over_more_than_thirty_one_seeds_is_students_not_the_normals():
    """75.4: past 30 degrees of freedom the quantile jumped to the normal's 1.96, an interval
    4% too narrow at 31; against scipy's t, to within the table's rounding (three decimals)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    for dof in (1, 29, 30, 31, 40, 60, 120, 1000):
        assert t_975(dof) == pytest.approx(scipy_stats.t.ppf(0.975, dof), abs=5e-4), dof
    seeds = 41
    custom = [0.90 + 0.01 * (i % 3) for i in range(seeds)]
    comparison = paired(paired_group(custom, [0.93] * seeds, "val_accuracy"))
    differences = [c - 0.93 for c in custom]
    expected = scipy_stats.t.ppf(0.975, seeds - 1) * statistics.stdev(differences) / seeds**0.5
    assert comparison.half_width == pytest.approx(expected, rel=2e-4)


def test_a_message_with_line_breaks_stays_in_its_table_cell(tmp_path):
    """75.4: a failed job's error with a line break broke summary.md's table in two."""
    fake_sweep(tmp_path, {"seed=0": small_config(steps=2), "seed=1": small_config(steps=2)})
    job = next(tmp_path.glob("001_*"))
    record = json.loads((job / "summary.json").read_text())
    record |= {"status": "failed", "error": "RuntimeError: the first line\nand the second"}
    (job / "summary.json").write_text(json.dumps(record))
    write_report(tmp_path)
    table = [line for line in (tmp_path / "summary.md").read_text().splitlines() if "|" in line]
    header = table[0].count(" | ")
    assert all(line.count(" | ") == header for line in table), table
    assert "RuntimeError: the first line and the second" in "\n".join(table)


def test_paired_numbers_are_over_the_paired_seeds_and_name_the_others():
    """31.5: the reference's seeds 3 and 4 missing: the gap and the verdict are over seeds
    0-2 alone, and the verdict names the seeds left out."""
    group = paired_group([1.5, 3.0, 6.0], [1.0, 2.0, 4.0], "final_loss")
    group.reference = Group("activation=relu")
    for seed in (3, 4):  # custom jobs without a reference job
        group.jobs.append(Job(None, RunSummary(status="completed", seed=seed, final_loss=50.0)))
    comparison = paired(group)
    assert comparison.differences == [0.5, 0.5, 0.5]
    assert comparison.left_out == {"no reference run": [3, 4]}
    assert comparison.verdict == (
        "custom worse by 50% ± 0% final loss over 3 seeds (left out: seed 3, 4: no reference run)"
    )
    assert relative_gap(group) == pytest.approx(0.5)


def test_accuracy_says_how_many_jobs_it_is_over():
    """31.5: one job's val_accuracy null: the table's accuracy is over 2 of 3 jobs, and says so."""
    group = Group("activation=relu")
    for seed, accuracy in enumerate([0.8, None, 0.9]):
        summary = RunSummary(status="completed", seed=seed, final_loss=1.0, val_accuracy=accuracy)
        group.jobs.append(Job(None, summary))
    (row,) = summary_rows([group])
    assert row["val_accuracy_jobs"] == 2
    assert "85.00% ± 7.07% (over 2 of 3 completed jobs)" in markdown_table([row])


def test_the_text_tab_gets_the_table_in_cards_it_shows_whole():
    """33.5: TensorBoard's Text box shows about five rows (its scroll bar hidden): seven groups
    come as the summary with four and a card with the other three, under the same columns."""
    groups = []
    for number in range(7):
        group = Group(f"activation=a{number}")
        group.jobs.append(Job(None, RunSummary(status="completed", seed=0, final_loss=1.0)))
        groups.append(group)
    rows = summary_rows(groups)
    texts = summary_texts("# Sweep s", rows)
    assert list(texts) == ["report/summary", "report/summary, groups 5-7"]
    whole = markdown_table(rows).splitlines()
    first, rest = (text.strip().splitlines() for text in texts.values())
    assert first[:2] == ["# Sweep s", ""] and first[2:] == whole[:6]
    assert rest == whole[:2] + whole[6:]


@pytest.mark.parametrize("value", [math.nan, math.inf, None])
def test_a_report_takes_a_non_finite_or_null_final_loss(value):
    """31.6: each pair with NaN, inf or null on one side is left out, named, without a
    traceback."""
    group = paired_group([1.1, value, 3.3], [1.0, 2.0, 3.0], "final_loss")
    group.reference = Group("activation=relu")
    comparison = paired(group)
    assert comparison.differences == pytest.approx([0.1, 0.1])
    assert comparison.verdict.endswith("(left out: seed 1: no finite final loss)")
    (row,) = summary_rows([group])
    assert row["final_loss_mean"] == pytest.approx(2.2) and row["paired_seeds"] == 2


def test_summary_json_is_strict_json(tmp_path):
    """31.6: NaN and inf are written as null (json.loads with NaN refused reads every file)."""
    RunSummary(status="diverged", final_loss=math.nan, min_loss=math.inf).write(tmp_path)

    def refuse(constant):
        raise ValueError(constant)

    written = json.loads((tmp_path / "summary.json").read_text(), parse_constant=refuse)
    assert (written["final_loss"], written["min_loss"]) == (None, None)
    assert RunSummary.read(tmp_path).final_loss is None


@pytest.mark.slow
def test_a_report_draws_whatever_mplbackend_says(tmp_path):
    """31.6: an MPLBACKEND matplotlib does not know does not stop the report's figures."""
    sweep_dir = tmp_path / "sweep"
    fake_sweep(sweep_dir, {"activation=relu": small_config(steps=3)})
    result = subprocess.run(
        [sys.executable, "-m", "reluexp.report", str(sweep_dir)],
        env={**os.environ, "MPLBACKEND": "nonsense"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (sweep_dir / "loss_curves.png").read_bytes().startswith(b"\x89PNG")


FINISHED_SWEEP = ["-m", "seed=0,1,2", "steps=20", "checkpoint_every=10", *SMALL]


def stopped_sweep(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A sweep of three jobs as a stop leaves it: the first completed, the second interrupted,
    the third never started."""
    sweep_dir = tmp_path / "sweep"
    run_cli(*FINISHED_SWEEP, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    jobs = sorted(sweep_dir.glob("[0-9][0-9][0-9]_*"))
    stopped = json.loads((jobs[1] / "summary.json").read_text())
    stopped["status"] = "interrupted"
    (jobs[1] / "summary.json").write_text(json.dumps(stopped))
    for path in jobs[2].glob("*"):  # as Hydra leaves a job it never reached: no run in it
        if path.is_file():
            path.unlink()
    return sweep_dir, jobs


@pytest.mark.slow
def test_a_stopped_sweep_is_finished_by_the_command_its_closing_line_gives(tmp_path):
    """33.1: one command finishes the sweep: the interrupted job resumes, the job never
    started starts, the completed one is left byte for byte."""
    sweep_dir, (first, second, third) = stopped_sweep(tmp_path)
    # Its records: summary, events, checkpoint (Hydra rewrites .hydra/; the log says "nothing
    # to resume").
    records = [p for p in first.iterdir() if p.is_file() and p.name != "reluexp.log"]
    before = {p: p.read_bytes() for p in records}
    line = closing_line(sweep_dir, Written(find_jobs(sweep_dir), ["summary.md"]))
    finish = command_after("Finish it", line)
    assert finish == shlex.join(
        ["python", "-m", "reluexp", *FINISHED_SWEEP, f"hydra.sweep.dir={sweep_dir}"]
    )
    result = run_cli(*shlex.split(finish)[3:], cwd=tmp_path)  # after "python -m reluexp"
    summaries = [json.loads((job / "summary.json").read_text()) for job in (first, second, third)]
    assert [s["status"] for s in summaries] == ["completed"] * 3
    assert [s["resumes"] for s in summaries] == [0, 1, 0]
    assert {p: p.read_bytes() for p in before} == before
    assert "Finish it" not in result.stderr


@pytest.mark.slow
def test_a_finish_it_beside_another_says_the_job_is_the_others(tmp_path):
    """51.4: a job another Finish-it command is training (its lock held, its summary
    `running`) is left to that command: not recorded `failed` in its summary or its log, and
    its job line says another command runs it (it read `job failed: ... another reluexp
    process`)."""
    sweep_dir, (_, second, _) = stopped_sweep(tmp_path)
    training = json.loads((second / "summary.json").read_text()) | {"status": "running"}
    (second / "summary.json").write_text(json.dumps(training))
    recorded = (second / "summary.json").read_bytes()
    with hold_run(second):
        result = run_cli(*FINISHED_SWEEP, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    assert (second / "summary.json").read_bytes() == recorded
    log = (second / "reluexp.log").read_text()  # Hydra's job log: this command's lines too
    assert "failed" not in log and "Traceback" not in log
    assert "[2/3] seed=1 running in another reluexp command, which records it" in result.stderr
    assert "failed" not in result.stderr, result.stderr


def files_below(directory: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, said",
    [
        (["steps=40"], "its jobs have steps=20, this command's steps=40"),
        (["seed=2,1,0"], "its job 0 is seed=0 steps=20"),
        (["seed=0,1,2,3"], "its jobs have no other override, this command's seed=3"),
        # As if a config file had changed since the second job ran.
        ("edited", "ran with lr=1e-05, this command composes lr=1e-06 for it"),
    ],
    ids=["changed override", "another order", "another job", "edited config"],
)
def test_a_finish_command_whose_jobs_differ_is_refused_before_anything_runs(tmp_path, change, said):
    """42.2: a sweep directory holds one sweep; a command with other jobs, or whose jobs
    compose to other configs than they ran with, would mix two sweeps in one report."""
    sweep_dir, jobs = stopped_sweep(tmp_path)
    arguments = [*FINISHED_SWEEP, f"hydra.sweep.dir={sweep_dir}"]
    if change == "edited":
        stopped = json.loads((jobs[1] / "summary.json").read_text())
        stopped["config"]["lr"] = 1e-5
        (jobs[1] / "summary.json").write_text(json.dumps(stopped))
    else:
        key = change[0].split("=")[0]
        arguments = [a for a in arguments if not a.startswith(f"{key}=")] + change
    before = files_below(sweep_dir)
    result = run_cli(*arguments, cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("reluexp: error: hydra.sweep.dir=sweep holds another sweep: ")
    assert said in result.stderr and len(result.stderr.splitlines()) == 1
    assert files_below(sweep_dir) == before


def test_a_job_directory_name_fits_a_file_name_and_stays_distinct():
    """31.10: overrides longer than a file name may be are cut and hashed."""
    assert job_dir_name(3, "lr=0.1,seed=1") == "003_lr=0.1,seed=1"
    long = ["+activation.params.note=" + "é" * 200 + f",seed={seed}" for seed in (0, 1)]
    names = [job_dir_name(7, overrides) for overrides in long]
    assert all(len(name.encode()) <= 255 and name.startswith("007_+activation") for name in names)
    assert names[0] != names[1]
    names[0].encode().decode()  # cut on a character boundary


def test_a_job_directory_stays_one_level_whatever_a_value_holds():
    """A `/` in an override's value (an absolute data.root) reads as U+2215, not a subfolder."""
    name = job_dir_name(0, "data.root=/data/cifar-10-batches-bin,seed=1")
    assert "/" not in name and name == "000_data.root=\u2215data\u2215cifar-10-batches-bin,seed=1"


def test_a_sweep_over_a_path_reports_every_job(tmp_path):
    """A relative or absolute path in an override: every job found, reported and finished."""
    import numpy as np

    (tmp_path / "sub").mkdir()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 8)).astype("float32"), rng.integers(0, 3, 60)
    np.savez(tmp_path / "sub" / "f.npz", x=x, y=y)
    paths = f"data.path=sub/f.npz,{tmp_path}/sub/f.npz"
    sweep_dir, result = sweep(tmp_path, "data=file", paths, "seed=0,1", "steps=3")
    assert [p.name[:3] for p in sorted(sweep_dir.iterdir()) if p.name[0].isdigit()] == [
        "000", "001", "002", "003",
    ]  # fmt: skip
    assert "sweep ended, 4 jobs: completed 4." in result.stderr
    assert [job.summary.status for job in find_jobs(sweep_dir)] == ["completed"] * 4
    assert "data.path=sub/f.npz" in (sweep_dir / "summary.md").read_text()


SEARCH = "tag(log, interval(1e-8, 1e-4))"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (  # 58: the README's old spelling, as the shell hands it on
            ["hydra/sweeper=optuna", f"hydra.sweeper.params.lr={SEARCH}"],
            "Sweeping over Hydra's configuration is not supported : 'hydra.sweeper.params.lr="
            f"{SEARCH}'; a search space on the command line is the key's own override: "
            f"'lr={SEARCH}'",
        ),
        (  # quoted for Hydra: OmegaConf asserted on the null params (a traceback, exit 1)
            ["hydra/sweeper=optuna", f"hydra.sweeper.params.lr='{SEARCH}'"],
            "Unexpected type for root: NoneType; a search space on the command line is the "
            f"key's own override: 'lr={SEARCH}'",
        ),
        (  # a typo in the search space: caught after the study had launched a job
            ["experiment=lr_search", f"+hydra.sweeper.params.lrr='{SEARCH}'"],
            "hydra.sweeper.params.lrr: no such key to search; did you mean lr?",
        ),
        (["hydra/sweeper=optuna", f"lrr={SEARCH}"], "lrr: no such key to search; did you mean lr?"),
        (
            ["experiment=lr_search", "optimizer=sgd", "optimizer.momentun=interval(0, 0.9)"],
            "optimizer.momentun: no such key to search; did you mean optimizer.momentum?",
        ),
    ],
)
def test_a_search_space_mistake_is_one_line_before_the_study_starts(tmp_path, args, message):
    result = run_cli("-m", *args, "hydra.sweep.dir=sweep", cwd=tmp_path, check=False)
    assert (result.returncode, result.stderr) == (2, f"reluexp: error: {message}\n")
    assert not (tmp_path / "sweep").exists()


def test_the_optuna_search_space_on_the_command_line_searches_that_key(tmp_path):
    result = run_cli(
        "-m",
        "hydra/sweeper=optuna",
        f"lr={SEARCH}",
        "hydra.sweeper.n_trials=3",
        "steps=3",
        "hydra.sweep.dir=sweep",
        cwd=tmp_path,
    )
    lrs = [job.summary.config["lr"] for job in find_jobs(tmp_path / "sweep")]
    assert len(lrs) == 3 and all(1e-8 <= lr <= 1e-4 for lr in lrs) and len(set(lrs)) == 3
    assert "sweep ended, 3 jobs:" in result.stderr


def test_a_job_line_says_how_long_the_rest_of_the_sweep_takes_at_its_pace(tmp_path):
    """62.6: a sweep said nothing of its whole time; each job line ends with the jobs left
    and their time at the pace so far (100 s for the first of 4: about 300 s to go)."""
    (tmp_path / "multirun.yaml").write_text("hydra: {}\n")
    started = time.time() - 100
    os.utime(tmp_path / "multirun.yaml", (started, started))
    plan = Plan(total=4, varying=None)
    assert re.fullmatch(r"; 3 jobs left, about 5:0\d to go", time_left(tmp_path, 0, plan))
    assert re.fullmatch(r"; 1 job left, about 0:3\d to go", time_left(tmp_path, 2, plan))
    assert time_left(tmp_path, 3, plan) == ""
    assert time_left(tmp_path, 0, Plan(total=None, varying=None)) == ""


def test_a_groups_hparams_trial_is_named_by_what_tells_it_from_the_other_groups(tmp_path):
    """62.9: the HParams tab's Trial ID column, about 16 characters wide, showed every group
    of the group view as `groups/activatio...`."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    builtin = small_config(steps=3)
    builtin.activation.name, builtin.activation.target = "relu", "torch.relu"
    fake_sweep(tmp_path, {"activation=myrelu": small_config(steps=3), "activation=relu": builtin})
    write_report(tmp_path)
    trials = {}
    for name in ("activation=myrelu", "activation=relu"):
        start = tensorboard(tmp_path / "groups" / name).PluginTagToContent("hparams")
        info = plugin_data_pb2.HParamsPluginData.FromString(start["_hparams_/session_start_info"])
        trials[name] = info.session_start_info.group_name
    assert trials == {
        "activation=myrelu": f"myrelu (mean, {tmp_path.name})",
        "activation=relu": f"relu (mean, {tmp_path.name})",
    }


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("[]", "holds list, not an object"),
        ("null", "holds null, not an object"),
        ('{"passed": "false", "verdict": "wrong"}', 'its passed is "false", not true or false'),
        ('{"passed": false}', "its verdict is null, not text"),
    ],
)
def test_a_check_json_of_another_shape_is_its_rows_unreadable_entry(tmp_path, written, said):
    """74.3: a check.json holding [] crashed the report ('list' object has no attribute
    'get'), and {"passed": "false"} read as correct."""
    builtin = small_config(steps=2)
    builtin.activation.name, builtin.activation.target = "relu", "torch.relu"
    fake_sweep(tmp_path, {"activation=myrelu": small_config(steps=2), "activation=relu": builtin})
    (check_json,) = [
        tmp_path / check_dir(function) / "check.json"
        for job in find_jobs(tmp_path)
        if (function := custom_function(job)) is not None
    ]
    check_json.parent.mkdir(parents=True)
    check_json.write_text(written)
    done = run_cli(str(tmp_path), cwd=tmp_path, module="reluexp.report")
    assert done.returncode == 0, done.stderr
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "summary.csv").open())}
    relative = check_json.relative_to(tmp_path)
    assert rows["activation=myrelu"]["lab_verdict"] == f"unreadable {relative}: {said}"


def test_a_builtin_beside_its_functional_twin_is_not_checked_as_a_custom_function(tmp_path):
    """77.2: `activation.target=torch.nn.SiLU` against `F.silu` in a sweep was checked by the
    lab as if it were the user's Function."""
    builtin = small_config(steps=2)
    builtin.activation.name, builtin.activation.target = "custom", "torch.nn.SiLU"
    builtin.activation.reference = "torch.nn.functional.silu"
    fake_sweep(tmp_path, {"activation.target=torch.nn.SiLU": builtin})
    (job,) = find_jobs(tmp_path)
    assert custom_function(job) is None
