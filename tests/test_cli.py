"""End to end, as a user runs it: the command, a sweep, and a real TensorBoard server."""

import contextlib
import csv
import io
import json
import logging
import os
import pstats
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import hydra
import pytest
import torch

import reluexp
from reluexp import cli
from reluexp.config import TENSORBOARD_POINTS, Config
from reluexp.record import progress
from reluexp.record.progress import Progress
from reluexp.run import runner
from reluexp.shell import lifecycle
from tests.helpers import SMALL, command_after, run_cli, summary

pytestmark = pytest.mark.slow


def test_runs_started_together_get_their_own_directories(tmp_path):
    processes = [
        subprocess.Popen([sys.executable, "-m", "reluexp", "steps=2", "device=cpu"], cwd=tmp_path)
        for _ in range(3)
    ]
    assert [p.wait(timeout=120) for p in processes] == [0, 0, 0]
    run_dirs = sorted((tmp_path / "outputs" / "runs").iterdir())
    assert len(run_dirs) == 3
    for run_dir in run_dirs:
        assert (run_dir / ".hydra" / "config.yaml").is_file()
        assert (run_dir / "reluexp.log").is_file()
        assert list(run_dir.glob("events.out.tfevents.*"))
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


def test_user_mistakes_get_one_line(tmp_path):
    result = run_cli("device=cuda:7", f"hydra.run.dir={tmp_path}", cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("reluexp: error: device='cuda:7'")
    assert "Traceback" not in result.stderr
    # 42.6: Hydra's own check of its flags was its traceback.
    result = run_cli("-m", "--cfg", "job", "seed=0,1", cwd=tmp_path, check=False)
    assert (result.returncode, result.stderr) == (
        2,
        "reluexp: error: Only one of --run, --multirun, --cfg, --info and --shell_completion "
        "can be specified\n",
    )


@pytest.mark.parametrize("set_before", [None, "0"])
def test_hydras_full_error_is_left_as_the_user_set_it(tmp_path, monkeypatch, set_before):
    """75.4: the command set HYDRA_FULL_ERROR=1 for Hydra to raise to it, then deleted it: a
    user's HYDRA_FULL_ERROR=0 was gone for an in-process caller's next command."""
    if set_before is None:
        monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    else:
        monkeypatch.setenv("HYDRA_FULL_ERROR", set_before)
    result = run_cli("stepz=3", cwd=tmp_path, check=False)
    assert (result.returncode, result.stderr) == (
        2,
        "reluexp: error: stepz: no such key; did you mean steps?\n",
    )
    assert os.environ.get("HYDRA_FULL_ERROR") == set_before


def test_version_names_reluexp_torch_and_hydra(tmp_path):
    """42.6: --version printed Hydra's version alone."""
    result = run_cli("--version", cwd=tmp_path)
    assert result.stdout == (
        f"reluexp {reluexp.__version__}, torch {torch.__version__}, Hydra {hydra.__version__}\n"
    )


def test_a_sweep_without_matplotlib_reports_its_numbers_and_says_what_it_could_not_draw(
    tmp_path,
):
    """42.6: the report's figure raised inside Hydra's callback, which made it a warning: rc
    0 and no closing line."""
    without = (
        "import runpy, sys; sys.modules['matplotlib'] = None; "
        "sys.argv = ['reluexp', *sys.argv[1:]]; runpy.run_module('reluexp', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", without, "-m", "seed=0,1", "steps=3", *SMALL, "hydra.sweep.dir=s"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    closing = result.stderr.strip().splitlines()[-1]
    assert closing.startswith("reluexp: sweep ended, 2 jobs: completed 2. Sweep dir: s ")
    assert (
        "(summary.md, summary.csv; no loss_curves.png: matplotlib cannot be imported (" in closing
    )
    assert {p.name for p in (tmp_path / "s").glob("summary.*")} == {"summary.md", "summary.csv"}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("sweep")
    run_cli("-m", "activation=myrelu,relu", "seed=0,1", "steps=30", "device=cpu", cwd=cwd)
    (sweep,) = (cwd / "outputs" / "multirun").iterdir()
    return sweep


def test_sweep_gives_every_job_a_readable_directory(sweep_dir):
    jobs = sorted(p.name for p in sweep_dir.iterdir() if (p / ".hydra").is_dir())
    assert jobs == [
        "000_activation=myrelu,device=cpu,seed=0,steps=30",
        "001_activation=myrelu,device=cpu,seed=1,steps=30",
        "002_activation=relu,device=cpu,seed=0,steps=30",
        "003_activation=relu,device=cpu,seed=1,steps=30",
    ]
    for job in jobs:
        summary = json.loads((sweep_dir / job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps_done"] == 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def post_json(url: str, payload: dict):
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def get_bytes(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


@contextlib.contextmanager
def tensorboard_server(
    logdir: Path, expected_runs: int, flags: Sequence[str] = ()
) -> Iterator[tuple[str, list[str]]]:
    """TensorBoard on logdir (with flags), on 127.0.0.1, until it lists expected_runs runs;
    its URL and runs. Stopped when the test ends, however it ends."""
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
            "--reload_interval",
            "1",
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        runs: list[str] = []
        while time.monotonic() < deadline and len(runs) < expected_runs:
            with contextlib.suppress(OSError):  # not listening yet
                runs = get_json(f"{base}/data/runs")
            time.sleep(0.5)
        yield base, runs
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_tensorboard_answers_custom_vs_builtin_through_its_http_api(sweep_dir):
    with tensorboard_server(sweep_dir.parent.parent, 8) as (base, runs):
        # One run per job, one per group of seeds, the group view's own (the report's), and
        # the lab's check of the custom Function (myrelu).
        report_run = f"multirun/{sweep_dir.name}/groups"
        (check,) = (sweep_dir / "lab").iterdir()
        lab_run = f"multirun/{sweep_dir.name}/lab/{check.name}"
        jobs = {
            f"multirun/{sweep_dir.name}/{p.name}"
            for p in sweep_dir.iterdir()
            if (p / ".hydra").is_dir()
        }
        labels = {a: f"activation={a}" for a in ("myrelu", "relu")}
        groups = {f"{report_run}/{label.replace(' ', ',')}" for label in labels.values()}
        assert set(runs) == jobs | groups | {report_run, lab_run}
        tags = get_json(f"{base}/data/plugin/scalars/tags")
        for run in jobs:
            assert {
                "loss/train",
                "loss/train_log10",
                "norm/grad_w1",
                "norm/grad_w2",
                "norm/grad_total",
                "norm/grad_total_log10",
                "norm/weight_w1",
                "units/dead_fraction",
                "units/exact_zeros",
                "units/steps_with_exact_zeros",
                "summary/final_loss",
            } <= set(tags[run])
            # Loss sorts first among the families, by character (Time Series) and in the
            # Scalars tab, which puts a family going on with `_` or a digit before the one it
            # extends (33.5: `loss_gap_log10` came first there, `loss` last).
            assert sorted(tags[run])[0].startswith("loss/")
            families = {tag.split("/")[0] for tag in tags[run]}
            assert not [f for f in families if re.fullmatch(r"loss[_0-9].*", f)]
            # Each myrelu run has its relu run (same seed) as reference; relu has none. The
            # gap's chart says what -17 means where its tag is its only title.
            gap_tag = f"lossgap_log10/{labels['myrelu']}"
            assert (gap_tag in tags[run]) == ("myrelu" in run)
            if "myrelu" in run:
                assert "-17 where the two losses are identical" in tags[run][gap_tag]["description"]
        for label in labels.values():
            run = f"{report_run}/{label.replace(' ', ',')}"
            stats = ("mean", "min", "max")
            assert {f"lossrange_log10/{label}/{stat}" for stat in stats} | {
                "loss/train",
                "loss/train_log10",
                "summary/final_loss",
                "summary/min_loss",
            } <= set(tags[run])
        # The report's figure in the Images tab: loss_curves.png, byte for byte.
        images = get_json(f"{base}/data/plugin/images/tags")
        assert sorted(images[report_run]) == [
            "report/loss_curves",
            "report/pair: activation=myrelu vs activation=relu",
        ]
        query = urllib.parse.urlencode({"run": report_run, "tag": "report/loss_curves"})
        (image,) = get_json(f"{base}/data/plugin/images/images?{query}")
        png = get_bytes(f"{base}/data/plugin/images/individualImage?{image['query']}")
        assert png == (sweep_dir / "loss_curves.png").read_bytes()
        # Its table in the Text tab, rendered from the Markdown of summary.md.
        assert get_json(f"{base}/data/plugin/text/tags")[report_run] == ["report/summary"]
        query = urllib.parse.urlencode({"run": report_run, "tag": "report/summary"})
        (text,) = get_json(f"{base}/data/plugin/text/text?{query}")
        assert "<table>" in text["text"]
        assert "no difference detected over 2 seeds" in text["text"]
        # The HParams tab: what varies first (it shows five), the gap to the reference a metric.
        experiment = post_json(f"{base}/data/plugin/hparams/experiment", {"experimentName": ""})
        shown = [info["name"] for info in experiment["hparamInfos"]][:5]
        differs = {info["name"] for info in experiment["hparamInfos"] if info.get("differs")}
        assert {"activation", "seed", "activation.target"} <= differs and "seed" in shown
        assert "data.d_in" not in differs and "device" not in differs
        request = {
            "experimentName": "",
            "allowedStatuses": ["STATUS_SUCCESS", "STATUS_UNKNOWN"],
            "colParams": [{"metric": {"tag": "summary/final_loss"}, "order": "ORDER_ASC"}],
            "startIndex": 0,
            "sliceSize": 10,
        }
        sessions = post_json(f"{base}/data/plugin/hparams/session_groups", request)
        sessions = sessions["sessionGroups"]

        def metric(group: dict, tag: str) -> float | None:
            values = [m["value"] for m in group["metricValues"] if m["name"]["tag"] == tag]
            return values[0] if values else None

        finals = [metric(g, "summary/final_loss") for g in sessions]
        # A session per job, and one per group: its mean over the seeds, as summary.csv has it.
        expected_finals = sorted(
            [
                json.loads((p / "summary.json").read_text())["final_loss"]
                for p in sweep_dir.iterdir()
                if (p / ".hydra").is_dir()
            ]
            + [
                float(row["final_loss_mean"])
                for row in csv.DictReader((sweep_dir / "summary.csv").open())
            ]
        )
        assert finals == pytest.approx(expected_finals, rel=1e-6)
        for group in sessions:
            gap = metric(group, "summary/final_loss_vs_reference")
            custom = group["hparams"]["activation.target"] == "reluexp.functions.MyReLU"
            assert (gap is not None) == custom
        seeds = sorted(g["hparams"]["seed"] for g in sessions)
        assert seeds == ["0", "0", "1", "1", "mean of 0, 1", "mean of 0, 1"]
        # Custom Scalars: loss first, a band per group, a chart per custom/reference pair.
        layout = get_json(f"{base}/data/plugin/custom_scalars/layout")
        assert [c["title"] for c in layout["category"]][0] == "loss"
        charts = {chart["title"]: chart for chart in layout["category"][0]["chart"]}
        assert list(charts)[0] == "log10 loss, every run"
        assert charts["log10 loss, every run"]["multiline"]["tag"] == ["loss/train_log10"]
        bands = charts["log10 loss per group: mean over seeds, min-max band"]["margin"]["series"]
        assert [band["value"] for band in bands] == [
            f"lossrange_log10/{labels[a]}/mean" for a in ("relu", "myrelu")
        ]
        pair = "log10 |relative loss gap|: activation=myrelu vs activation=relu (-17: identical)"
        assert re.fullmatch(charts[pair]["multiline"]["tag"][0], gap_tag)


def test_the_headline_sweeps_dashboard_fills_by_itself(tmp_path):
    """47.1: the closing line of `python -m reluexp -m experiment=custom_vs_builtin` named a
    logdir of 43 runs; TensorBoard ticks none past 40, and every tab but Time Series opened
    blank. The logdir it names now holds at most 40, and every tab the docs show has data. (The
    sweep directory's 47: 35 jobs, 7 groups, the report's and the lab's check of each of the 4
    custom Functions.)"""
    result = run_cli("-m", "experiment=custom_vs_builtin", "device=cpu", "threads=1", cwd=tmp_path)
    closing = result.stderr.strip().splitlines()[-1]
    logdir = tmp_path / command_after("Dashboard", closing).split()[2]
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    assert logdir == sweep_dir / "groups"
    assert f"every job: `tensorboard --logdir {logdir.parent.relative_to(tmp_path)}`, 47 runs" in (
        closing
    )
    with tensorboard_server(logdir, 8) as (base, runs):
        assert sorted(runs) == [".", *sorted(p.name for p in logdir.iterdir() if p.is_dir())]
        assert len(runs) == 8 <= 40
        tags = get_json(f"{base}/data/plugin/scalars/tags")
        for run in set(runs) - {"."}:
            assert {"loss/train", "loss/train_log10"} <= set(tags[run]), run
        customs = ("myrelu", "lean_relu", "leaky_relu", "silu")
        for custom in customs:
            assert f"lossgap_log10/activation={custom}" in tags[f"activation={custom}"]
        # Images and Text: the report's run.
        images = get_json(f"{base}/data/plugin/images/tags")["."]
        assert "report/loss_curves" in images and len(images) == 1 + len(customs)
        assert "report/summary" in get_json(f"{base}/data/plugin/text/tags")["."]
        # Custom Scalars: every chart of the loss category matches a tag of some run.
        layout = get_json(f"{base}/data/plugin/custom_scalars/layout")
        every_tag = {tag for run_tags in tags.values() for tag in run_tags}
        for chart in layout["category"][0]["chart"]:
            if "multiline" in chart:
                patterns = chart["multiline"]["tag"]
            else:
                patterns = [series["value"] for series in chart["margin"]["series"]]
            for pattern in patterns:
                assert any(re.fullmatch(pattern, tag) for tag in every_tag), chart["title"]
        # HParams: a session per group.
        request = {
            "experimentName": "",
            "allowedStatuses": ["STATUS_SUCCESS", "STATUS_UNKNOWN"],
            "colParams": [],
            "startIndex": 0,
            "sliceSize": 100,
        }
        sessions = post_json(f"{base}/data/plugin/hparams/session_groups", request)
        assert len(sessions["sessionGroups"]) == 7


def test_console_script_is_the_module(tmp_path):
    script = shutil.which("reluexp")
    if script is None:
        pytest.skip("the reluexp console script is not installed")
    help_text = subprocess.run(
        [script, "--help"], capture_output=True, text=True, check=True
    ).stdout
    module_help = run_cli("--help", cwd=tmp_path).stdout
    assert help_text == module_help
    assert "activation: builtin_leaky_relu, builtin_prelu, builtin_silu, custom" in help_text
    assert "experiment: cifar10_resnet20, custom_vs_builtin, digits_custom_vs_builtin" in help_text


def test_help_teaches_each_key_and_the_launchers_without_importing_torch(tmp_path):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "reluexp", "--help", "data=digits"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    # This command's values (data=digits' batch), each with its meaning from the schema.
    assert "\ndata.batch_size=128\n    Examples per step, a new seeded order each epoch" in (
        result.stdout
    )
    assert "\nlr=0.1\n    The learning rate.\n" in result.stdout
    assert "\nhydra/launcher: basic, joblib, slurm, submitit_local, submitit_slurm\n" in (
        result.stdout
    )
    assert "\nhydra/sweeper: basic" in result.stdout
    imported = [line.split("|")[-1].strip() for line in result.stderr.splitlines()]
    assert "reluexp.config" in imported and "torch" not in imported
    # 76.4: it ended `Then: tensorboard --logdir outputs`, a view that opens blank past 40 runs.
    assert result.stdout.rstrip().endswith(
        "\nThen: the Dashboard: command its closing line prints. Hydra's own help: --hydra-help."
    )


@pytest.mark.parametrize("quiet", ["false", "true"])
def test_a_run_ends_with_one_closing_line_kept_in_its_log(tmp_path, quiet):
    """31.9: the closing line reaches the run's reluexp.log too, quiet or not."""
    run = tmp_path / "run"
    result = run_cli(
        "steps=3", "device=cpu", f"quiet={quiet}", f"hydra.run.dir={run}", cwd=tmp_path
    )
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("reluexp: completed after 3 steps, final loss ")
    assert last.endswith("Run dir: run. Dashboard: `tensorboard --logdir run`")
    assert (run / "reluexp.log").read_text().strip().splitlines()[-1].endswith(last)


def test_a_classifiers_closing_line_and_job_lines_say_its_validation_accuracy(tmp_path):
    """47.3: the accuracy a classifier is trained for was in summary.json alone."""
    run = tmp_path / "run"
    result = run_cli("data=digits", "steps=20", "device=cpu", f"hydra.run.dir={run}", cwd=tmp_path)
    record = summary(run)
    last = result.stderr.strip().splitlines()[-1]
    accuracy = f", validation accuracy {record['val_accuracy']:.1%}"
    assert f"final loss {record['final_loss']!r}{accuracy}" in last
    sweep = tmp_path / "sweep"
    result = run_cli(
        "-m",
        "data=digits",
        "steps=20",
        "seed=1,2",
        "device=cpu",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    for number, job in enumerate(sorted(sweep.glob("00*"))):
        accuracy = summary(job)["val_accuracy"]
        assert f"[{number + 1}/2] seed={number + 1} completed loss=" in result.stderr
        assert f" val_accuracy={accuracy:.1%} in " in result.stderr


def test_progress_logs_plain_lines_when_not_a_terminal(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="reluexp"):
        runner.run(Config(device="cpu", steps=5), tmp_path)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress:")]
    # 74.5: no `loss nan` before the first flush (at the run's end, for 5 steps).
    assert lines and lines[-1].startswith("progress: step 5/5 ")
    assert not [line for line in lines if "nan" in line]
    assert "steps/s ETA 0:00" in lines[-1]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="reluexp"):
        runner.run(Config(device="cpu", steps=5, quiet=True), tmp_path / "quiet")
    assert not [r for r in caplog.records if r.getMessage().startswith("progress:")]


def test_the_progress_line_says_when_a_busy_machine_slowed_the_run(monkeypatch, caplog):
    """48: on a busy machine the article's run fell from 729 to 45 steps/s, unexplained."""
    clock = iter([0.0, 1.0, 11.0, 21.0, 22.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    monkeypatch.setattr(progress.os, "cpu_count", lambda: 2)
    loads = iter([(5.2, 0, 0), (1.0, 0, 0)])
    monkeypatch.setattr(progress.os, "getloadavg", lambda: next(loads))
    line = Progress(total=1000, start_step=0, loss=lambda: 1.0, enabled=True)
    line.interactive = False
    with caplog.at_level(logging.INFO, logger="reluexp"):
        for step in (100, 200, 300, 400):  # 100 steps/s over the first second, then 10, 10, 100
            line.update(step)
    said = [r.getMessage() for r in caplog.records]
    assert not said[0].endswith(")")
    assert said[1].endswith(
        "(10x slower than its first steps: the machine is busy, load 5.2 on 2 cores)"
    )
    assert not said[2].endswith(")") and not said[3].endswith(")")  # quiet machine; fast again


def test_on_a_terminal_the_busy_note_is_a_log_line_once_and_no_loss_before_a_flush(
    monkeypatch, caplog
):
    """74.5: on a terminal the note showed for one 0.2 s redraw and never reached reluexp.log;
    the first redraws showed `loss nan` before any loss was flushed."""
    clock = iter([0.0, 1.0, 11.0, 21.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(progress.os, "getloadavg", lambda: (5.2, 0, 0))
    losses = iter([None, 2.5, 2.5])
    terminal = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)  # the first line at once
    line = Progress(total=1000, start_step=0, loss=lambda: next(losses), enabled=True)
    line.interactive = True
    with caplog.at_level(logging.INFO, logger="reluexp"):
        for step in (100, 200, 300):  # 100 steps/s over the first second, then 10, 10
            line.update(step)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "at step 200 (10x slower than its first steps: the machine is busy, load 5.2 on 2 cores)"
    ]
    redraws = terminal.getvalue().split("\r")
    assert "100/1000 100 steps/s" in redraws[1] and "loss" not in redraws[1]
    assert "200/1000 loss 2.5 " in terminal.getvalue()


def test_a_machine_busy_from_the_start_is_said_on_the_first_progress_line(monkeypatch, caplog):
    """62.1: a run slow from its start said nothing (the note fired only on a slowdown after
    the first line); with torch's threads above one it is said on the first line."""
    clock = iter([])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    monkeypatch.setattr(progress.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(progress.os, "getloadavg", lambda: (4.5, 0, 0))
    for threads, said in ((2, True), (1, False)):
        clock = iter([0.0, 1.0])
        line = Progress(total=1000, start_step=0, loss=lambda: 1.0, enabled=True, threads=threads)
        line.interactive = False
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="reluexp"):
            line.update(100)
        (first,) = [r.getMessage() for r in caplog.records]
        note = (
            " (the machine is busy, load 4.5 on 2 cores: torch's 2 threads wait on each other "
            "when the cores are taken; threads=1 may run faster)"
        )
        assert first.endswith(note) == said, first


def test_the_process_ends_as_any_python_program_under_standard_tools(tmp_path):
    tools = {
        "cProfile": ["-m", "cProfile", "-o", str(tmp_path / "p.prof")],
        "coverage": ["-m", "coverage", "run", f"--data-file={tmp_path / 'cov'}"],
        "importtime": ["-X", "importtime"],
    }
    for name, tool in tools.items():
        done = subprocess.run(
            [sys.executable, *tool, "-m", "reluexp", "steps=5", f"hydra.run.dir={name}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, (name, done.stderr[-2000:])
    assert pstats.Stats(str(tmp_path / "p.prof")).total_calls > 10_000
    assert (tmp_path / "cov").stat().st_size > 0
    assert "import time:" in done.stderr and "| torch" in done.stderr


def test_an_in_process_caller_keeps_control(tmp_path, monkeypatch):
    """main() ends as a function does: by returning, or with SystemExit carrying the status;
    the caller's own finally blocks run."""
    monkeypatch.chdir(tmp_path)
    outcomes = []
    for argv in (["steps=2", "device=cpu"], ["lr=0"]):
        monkeypatch.setattr(sys, "argv", ["reluexp", *argv])
        try:
            cli.main()
            outcomes.append(None)
        except SystemExit as stop:
            outcomes.append(stop.code)
        finally:
            outcomes.append("finally")
    assert outcomes == [None, "finally", 2, "finally"]


def test_ctrl_c_between_sweep_jobs_writes_the_summary_and_exits_130(tmp_path, monkeypatch, capsys):
    """33.1: a Ctrl-C after a job ended (in Hydra's code, between jobs): no traceback, the
    sweep's summary with the jobs not started, its closing line; the process's handlers are
    put back for an in-process caller."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.chdir(tmp_path)
    sweep_dir = tmp_path / "sweep"
    monkeypatch.setattr(
        sys,
        "argv",
        ["reluexp", "-m", "seed=0,1,2", "steps=2", "device=cpu", f"hydra.sweep.dir={sweep_dir}"],
    )
    ended = []

    def interrupted_after_the_first(*args):
        ended.append(args)
        signal.raise_signal(signal.SIGINT)
        return "a job line"

    monkeypatch.setattr(lifecycle, "job_line", interrupted_after_the_first)
    with pytest.raises(SystemExit) as stopped:
        cli.main()
    assert stopped.value.code == 130 and len(ended) == 1
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    assert "reluexp: sweep ended, 3 jobs: completed 1, not started 2." in stderr
    assert "not started: 2" in (sweep_dir / "summary.md").read_text()


# `python -m reluexp ARGS` whose end-of-sweep report gets a SIGTERM as it starts.
SIGTERM_IN_THE_REPORT = """
import signal, sys
from reluexp import cli
from reluexp.shell import lifecycle

write, calls = lifecycle.write_sweep_summary, []

def signalled_in_the_report(sweep_dir, *check):
    calls.append(sweep_dir)
    if len(calls) == 1:
        signal.raise_signal(signal.SIGTERM)
    return write(sweep_dir, *check)

lifecycle.write_sweep_summary = signalled_in_the_report
sys.argv[0] = "reluexp"
cli.main()
"""


def test_sigterm_during_the_end_of_sweep_report_still_writes_it_and_its_closing_line(tmp_path):
    """31.10: SIGTERM outside training stops as Ctrl-C does there: the report is written
    whole, the closing line said, exit 143 (the process was killed without either)."""
    command = [sys.executable, "-c", SIGTERM_IN_THE_REPORT, "-m", "seed=0,1", "steps=2"]
    done = subprocess.run(
        [*command, "device=cpu", "hydra.sweep.dir=sweep"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("reluexp: sweep ended, 2 jobs: completed 2.")
    )
    assert "completed: 2" in (tmp_path / "sweep" / "summary.md").read_text()


def test_ctrl_c_during_start_up_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["reluexp", "steps=2", "device=cpu"])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "prepare", interrupted)
    with pytest.raises(SystemExit) as stopped:
        cli.main()
    assert stopped.value.code == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "reluexp: interrupted during start-up; nothing was trained"
    )


@pytest.mark.parametrize(("log_every", "rows"), [([], 751), (["log_every=1"], 3000)])
def test_tensorboard_started_as_the_closing_line_says_draws_every_streamed_point(
    tmp_path, log_every, rows
):
    """60: TensorBoard keeps a random 1,000 points a tag: a 3,000-step run streamed every step
    and drew a third of it, its exact zeros kept or dropped at random. Unset, log_every streams
    every fourth step and the last (751 rows: every third and the last were 1,001, 74.5);
    log_every=1, all 3,000, and the closing line's command keeps them all."""
    result = run_cli("steps=3000", *log_every, *SMALL, cwd=tmp_path)
    command = shlex.split(command_after("Dashboard", result.stderr.strip().splitlines()[-1]))
    assert command[:2] == ["tensorboard", "--logdir"]
    kept = [f"--samples_per_plugin=scalars={rows}"] if rows > TENSORBOARD_POINTS else []
    assert command[3:] == kept
    run_dir = tmp_path / command[2]
    assert json.loads((run_dir / "summary.json").read_text())["recorded_steps"] == rows
    with tensorboard_server(run_dir, 1, command[3:]) as (base, runs):
        points = get_json(f"{base}/data/plugin/scalars/scalars?run=.&tag=loss/train")
    steps = [step for _, step, _ in points]
    assert len(steps) == rows and steps[-1] == 2999
    if not log_every:
        assert steps[:4] == [0, 4, 8, 12]


def test_a_rate_under_one_step_a_second_reads_in_seconds_a_step():
    """62.6: a ResNet's short trial on a CPU said `0 steps/s`."""
    assert [progress.pace(r) for r in (729.4, 1.0, 0.4, 0.0123)] == [
        "729 steps/s",
        "1 steps/s",
        "2.5 s/step",
        "81.3 s/step",
    ]
