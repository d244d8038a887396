"""Sweeps on a real single-node SLURM cluster, started for these tests and stopped after them
(tests/slurm/start-slurm.sh): both launchers, SLURM job ids, a line per job in the launching
terminal, jobs no node can take refused, and SIGUSR2 (SLURM's warning before a time limit or a
preemption) checkpointing, requeueing and resuming a run bit for bit in its own directory."""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from reluexp.config import config_from_dict
from reluexp.run import runner
from reluexp.run.checkpoint import CHECKPOINT_NAME
from tests.helpers import REPO_ROOT, SMALL, STEPS, scalars

# One worker starts the private cluster once for the module (pytest-xdist's loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

SCRIPTS = REPO_ROOT / "tests" / "slurm"
DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch")


def free_port() -> int:
    """A port nothing listens on now, on 127.0.0.1: a cluster of an earlier run that is still
    up (or another's) keeps its own."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def cluster(owner: int) -> Iterator[tuple[dict[str, str], list[psutil.Process]]]:
    """A private single-node cluster on free ports: a client's environment and the daemons.
    Stopped when the block ends, and by a watcher of its own when the process `owner` ends
    first, however it ends."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"SLURM is not installed here (no {', '.join(missing)}); .ci/run installs it")
    if os.geteuid() != 0:
        pytest.skip("the test cluster runs its daemons as root")
    # munged wants every directory above its socket open to all (pytest's tmp dirs are not).
    parent = Path(tempfile.mkdtemp(prefix="reluexp-slurm-"))
    parent.chmod(0o755)
    base = parent / "cluster"
    env = {
        **os.environ,
        "SLURM_BASE": str(base),
        "SLURMCTLD_PORT": str(free_port()),
        "SLURMD_PORT": str(free_port()),
    }
    watcher = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "stop_when_gone.py"), str(owner), str(base)],
        start_new_session=True,  # a signal to the owner's process group spares it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        started = subprocess.run(
            [str(SCRIPTS / "start-slurm.sh")], env=env, capture_output=True, text=True, timeout=180
        )
        assert started.returncode == 0, started.stderr
        env["SLURM_CONF"] = str(base / "etc" / "slurm.conf")
        # This cluster's daemons, by their pid files: never another user's processes.
        daemons = [
            psutil.Process(int(pid_file.read_text()))
            for pid_file in (base / "run").glob("*.pid")
            if psutil.pid_exists(int(pid_file.read_text()))
        ]
        assert {d.name() for d in daemons} >= {"slurmctld", "slurmd", "munged"}, daemons
        yield env, daemons
    finally:
        stopped = subprocess.run(
            [str(SCRIPTS / "stop-slurm.sh")], env=env, capture_output=True, text=True, timeout=180
        )
        watcher.kill()
        watcher.wait()
    assert stopped.returncode == 0, stopped.stderr
    assert not base.exists()
    parent.rmdir()
    _, alive = psutil.wait_procs(daemons, timeout=60)
    assert not alive, f"SLURM daemons outlived the tests: {alive}"


@pytest.fixture(scope="module")
def slurm_env():
    """The environment of a client of a private cluster; the cluster is gone afterwards."""
    with cluster(os.getpid()) as (env, _):
        yield env


def test_a_cluster_whose_test_process_is_killed_stops(tmp_path):
    """51.5: a test run stopped by a timeout (SIGTERM, or SIGKILL) skips the fixtures'
    teardown: the cluster's watcher stops its daemons once the process that started it has
    ended, and the next cluster starts on ports of its own."""
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with cluster(owner.pid) as (env, daemons):
            owner.kill()
            owner.wait()
            _, alive = psutil.wait_procs(daemons, timeout=120)
            assert not alive, f"the daemons outlived the process that started them: {alive}"
            assert not Path(env["SLURM_BASE"]).exists()
    finally:
        owner.kill()


def docs_slurm_commands() -> list[list[str]]:
    """The docs' SLURM commands (docs/how-to/slurm.md), with the test cluster's partition."""
    page = (REPO_ROOT / "docs" / "how-to" / "slurm.md").read_text()
    lines = [line.split("  #")[0].strip() for line in page.splitlines()]
    commands = [line for line in lines if line.startswith("python -m reluexp -m hydra/launcher=")]
    commands = [c for c in commands if "slurm" in c]
    return [shlex.split(c.replace("<partition>", "debug"))[3:] for c in commands]


def sweep(env, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "reluexp", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_docs_have_both_launchers():
    launchers = [args[1] for args in docs_slurm_commands()]
    assert launchers == ["hydra/launcher=slurm", "hydra/launcher=submitit_slurm"]


@pytest.mark.parametrize("args", docs_slurm_commands(), ids=lambda args: args[1])
def test_every_job_runs_as_a_slurm_job(slurm_env, tmp_path, args):
    result = sweep(slurm_env, tmp_path, *args)
    assert result.returncode == 0, result.stderr
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    summaries = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]
    assert [s["status"] for s in summaries] == ["completed", "completed"]
    job_ids = [s["slurm_job_id"] for s in summaries]
    assert all(job_ids) and len(set(job_ids)) == 2
    assert "2 jobs: completed: 2" in (sweep_dir / "summary.md").read_text()
    # The launching terminal shows one line per job as it ends, with its SLURM job.
    lines = [line for line in result.stderr.splitlines() if re.match(r"\[\d/2\] ", line)]
    assert sorted(line.split()[1] for line in lines) == ["activation=myrelu", "activation=relu"]
    for summary in summaries:
        activation = next(o for o in summary["overrides"] if o.startswith("activation="))
        (line,) = [line for line in lines if activation in line.split()]
        assert line.endswith(f"(SLURM job {summary['slurm_job_id']})")
    # Without accounting, submitit's sacct warning on every poll is not the user's to read.
    assert "sacct" not in result.stderr


def test_a_job_no_node_can_take_is_one_line_before_submitting(slurm_env, tmp_path):
    result = sweep(
        slurm_env, tmp_path, "-m", "hydra/launcher=slurm", "hydra.launcher.mem_gb=100000"
    )
    assert result.returncode == 2
    assert re.fullmatch(
        r"reluexp: error: hydra.launcher.mem_gb=100000: the nodes of the default partition have "
        r"at most \S+ GB; such a job would never be scheduled",
        result.stderr.strip(),
    )
    assert not list(tmp_path.glob("outputs/multirun/*/.submitit"))


def squeue(env, *args: str) -> str:
    result = subprocess.run(["squeue", "-h", *args], env=env, capture_output=True, text=True)
    return result.stdout.strip()


def start_long_sweep(env, cwd: Path, seeds: str, steps: int = STEPS) -> subprocess.Popen:
    """A sweep of long jobs; returns once job 0 has written its first checkpoint."""
    args = ["-m", "hydra/launcher=slurm", f"seed={seeds}", f"steps={steps}", "checkpoint_every=200"]
    process = subprocess.Popen(
        [sys.executable, "-m", "reluexp", *args, *SMALL],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not list(cwd.glob(f"outputs/multirun/*/000_*/{CHECKPOINT_NAME}")):
        assert time.monotonic() < deadline and process.poll() is None, "the job never checkpointed"
        time.sleep(0.1)
    return process


def jobs_story(cwd: Path) -> str:
    """For a failed assertion: each job's submitit log (its attempts, signals, requeues)."""
    logs = sorted(cwd.glob("outputs/multirun/*/.submitit/*/*_log.*"))
    return "\n".join(f"== {log.name}\n{log.read_text()[-3000:]}" for log in logs)


def test_a_cancelled_job_is_a_result_and_the_sweep_goes_on(slurm_env, tmp_path):
    process = start_long_sweep(slurm_env, tmp_path, "1,2")
    first = json.loads(next(tmp_path.glob("outputs/multirun/*/000_*/summary.json")).read_text())
    subprocess.run(["scancel", first["slurm_job_id"]], env=slurm_env, check=True)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    assert "2 jobs: completed: 1, interrupted: 1" in (sweep_dir / "summary.md").read_text()
    (cancelled,) = sweep_dir.glob("000_*")
    summary = json.loads((cancelled / "summary.json").read_text())
    assert (summary["status"], summary["signal"]) == ("interrupted", "SIGTERM")
    assert re.search(r"\[1/2\] seed=1 interrupted .*\(SLURM job \S+\)", stderr)


def job_python(job_id: str, env: dict[str, str]) -> int:
    """The pid of the Python process running SLURM job `<array>_<task>` of the cluster whose
    client environment is `env` (another worker's cluster numbers its jobs from 1 too)."""
    array, task = job_id.split("_")
    wanted = {
        "SLURM_ARRAY_JOB_ID": array,
        "SLURM_ARRAY_TASK_ID": task,
        "SLURM_CONF": env["SLURM_CONF"],
    }
    for process in psutil.process_iter():
        try:
            command, variables = process.cmdline(), process.environ()
        except psutil.Error:
            continue
        # Not srun, whose command line names the same module.
        python = bool(command) and Path(command[0]).name.startswith("python")
        if python and "submitit.core._submit" in command and wanted.items() <= variables.items():
            return process.pid
    raise AssertionError(f"no Python process for SLURM job {job_id}")


def test_a_killed_job_is_a_failed_result_reported_as_it_ends(slurm_env, tmp_path):
    # SIGKILL, as the OOM killer sends it: the job never writes a result; submitit alone
    # (without SLURM accounting) would wait for one forever.
    process = start_long_sweep(slurm_env, tmp_path, "1,2", steps=10**6)
    killed = json.loads(next(tmp_path.glob("outputs/multirun/*/000_*/summary.json")).read_text())
    os.kill(job_python(killed["slurm_job_id"], slurm_env), signal.SIGKILL)
    deadline = time.monotonic() + 300
    line = ""
    while not line.startswith("[1/2] "):
        assert time.monotonic() < deadline and process.poll() is None, "no line for the job"
        line = process.stderr.readline()
    assert line.startswith("[1/2] seed=1 failed")  # only what varies across the sweep
    assert line.strip().endswith(
        " failed: SLURM ended the job FAILED (NonZeroExitCode) before it returned a result "
        f"(SLURM job {killed['slurm_job_id']})"
    )
    # The line came as the job ended, while the sweep's other job still runs.
    (other,) = squeue(slurm_env, "-o", "%i").split()
    assert squeue(slurm_env, "-j", other, "-o", "%T") == "RUNNING"
    subprocess.run(["scancel", other], env=slurm_env, check=True)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 1, stderr
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    assert "2 jobs: failed: 1, interrupted: 1" in (sweep_dir / "summary.md").read_text()
    (run_dir,) = sweep_dir.glob("000_*")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "ended the job FAILED" in summary["error"]
    assert re.search(r"\[2/2\] seed=2 interrupted ", stderr)


def test_a_job_cancelled_before_it_starts_is_reported_and_never_waited_for(slurm_env, tmp_path):
    # A job as wide as the node: the second job waits until the first is done.
    cpus = subprocess.run(
        ["sinfo", "-h", "-o", "%c"], env=slurm_env, capture_output=True, text=True, check=True
    ).stdout.split()[0]
    args = ["-m", "hydra/launcher=slurm", f"hydra.launcher.cpus_per_task={cpus}", "seed=1,2"]
    process = subprocess.Popen(
        [sys.executable, "-m", "reluexp", *args, f"steps={STEPS}", *SMALL],
        cwd=tmp_path,
        env=slurm_env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while sorted(squeue(slurm_env, "-r", "-o", "%T").split()) != ["PENDING", "RUNNING"]:
        assert time.monotonic() < deadline and process.poll() is None, "no job ever waited"
        time.sleep(0.1)
    pending = squeue(slurm_env, "-r", "-t", "PENDING", "-o", "%i")
    subprocess.run(["scancel", pending], env=slurm_env, check=True)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 1, stderr
    assert re.search(
        r"\[2/2\] seed=2 not started: SLURM ended the job CANCELLED .*before it returned a "
        rf"result \(SLURM job {pending}\)",
        stderr,
    )
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    assert "2 jobs: completed: 1, not started: 1" in (sweep_dir / "summary.md").read_text()


def test_sigusr2_requeues_the_job_and_it_resumes_bit_for_bit(slurm_env, tmp_path):
    process = start_long_sweep(slurm_env, tmp_path, "1")
    deadline = time.monotonic() + 300
    job = squeue(slurm_env, "-o", "%i")
    # What SLURM sends before a time limit or a preemption (sbatch --signal=USR2@...).
    subprocess.run(["scancel", "--signal=USR2", job], env=slurm_env, check=True)
    while squeue(slurm_env, "-j", job, "-o", "%T") != "PENDING":
        assert time.monotonic() < deadline, "the job was not requeued"
        time.sleep(0.1)
    # A requeued job waits out SLURM's requeue hold (minutes); the test need not, but it must
    # not start the job in the second its first attempt was killed in: the node refuses that
    # launch ("Job credential revoked") and the job ends FAILED, never run again.
    update = ["scontrol", "update", f"JobId={job}", "StartTime=now+2"]
    subprocess.run(update, env=slurm_env, check=True)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr + jobs_story(tmp_path)
    (run_dir,) = tmp_path.glob("outputs/multirun/*/000_*")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps_done"] == STEPS
    assert summary["resumes"] == 1 and summary["slurm_job_id"] == job
    # Both parts of the run in one directory, one TensorBoard run; the same numbers as a run
    # that was never interrupted (same config and thread count).
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2
    config = config_from_dict(summary["config"])
    config.threads = summary["threads"]
    runner.run(config, tmp_path / "uninterrupted")
    assert scalars(run_dir)["loss/train"] == scalars(tmp_path / "uninterrupted")["loss/train"]
