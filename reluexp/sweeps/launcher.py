"""Sweeps through submitit, as local processes or SLURM jobs (the launcher plugin in
hydra_plugins/reluexp_launcher): the jobs are submitted as Hydra's submitit launcher submits
them, then followed in the launching process until each has ended. A job's line reaches the
terminal as it ends; a job that ended without a result (killed, out of memory, node failure,
cancelled) becomes a failed result here, recorded in its run's summary.json, and the sweep
goes on to its summary. Nothing is written into submitit's folder."""

import math
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from reluexp.record.summary import RunSummary, SummaryError, record_lost
from reluexp.sweeps.names import job_prefix
from reluexp.sweeps.report.discovery import UNREADABLE
from reluexp.sweeps.slurm import ENDED_STATES, GONE, slurm_states
from reluexp.sweeps.terminal import job_line, sweep_plan

POLL_SECONDS = 1.0
# A job SLURM shows as ended this long, with no result, is lost: a requeued job shows its
# step's end (FAILED, NonZeroExitCode) until the requeue takes, over a second on a loaded
# controller.
ENDED_SECONDS = 10.0


def submit(launcher: Any, job_overrides: list[list[str]], initial_job_idx: int) -> list[Any]:
    """The jobs, submitted as hydra-submitit-launcher 1.2.0's BaseSubmititLauncher.launch submits
    them: its executor and parameters, one array of calls to the launcher itself. (Its launch
    also waits on every result in turn, which a job killed without a word never gives; hence
    this copy of its first half, and pyproject.toml's exact pin of that release.)"""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    cluster, params = launcher.cluster, launcher.params
    init_keys = {"max_num_timeout"}
    executor = submitit.AutoExecutor(
        cluster=cluster,
        folder=params["submitit_folder"],
        **{f"{cluster}_{k}": v for k, v in params.items() if k in init_keys},
    )
    shared = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(
        **{
            k if k in shared else f"{cluster}_{k}": v
            for k, v in params.items()
            if k not in init_keys | {"submitit_folder"}
        }
    )
    sweep = launcher.config.hydra.sweep
    Path(str(sweep.dir)).mkdir(parents=True, exist_ok=True)
    if "mode" in sweep:
        os.chmod(str(sweep.dir), mode=int(str(sweep.mode), 8))
    calls = [
        (list(overrides), "hydra.sweep.dir", number, f"job_id_for_{number}", Singleton.get_state())
        for number, overrides in enumerate(job_overrides, initial_job_idx)
    ]
    return executor.map_array(launcher, *zip(*calls))


@dataclass
class Job:
    number: int
    overrides: list[str]
    submitted: Any  # a submitit Job


class JobFollower:
    """Follows a sweep's submitted jobs until each has ended: its result when it returned one,
    a failed result when it ended without (a local process that died; a SLURM job that SLURM
    has shown as ended for ENDED_SECONDS with no result: not one between a requeue's two
    states)."""

    def __init__(self, config: DictConfig, jobs: list[Job], on_slurm: bool):
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.plan = sweep_plan(self.sweep_dir)
        self.quiet = bool(config.get("quiet", False))
        self.on_slurm = on_slurm
        self.pending = {job.number: job for job in jobs}
        self.results: dict[int, JobReturn] = {}
        # Job number -> when SLURM was first seen showing it ended, in the current stretch.
        self.ended_since: dict[int, float] = {}

    def follow(self) -> list[JobReturn]:
        while True:
            self.look()
            if not self.pending:
                return [self.results[number] for number in sorted(self.results)]
            time.sleep(POLL_SECONDS)

    def look(self) -> None:
        ended_now = {}
        for job in list(self.pending.values()):
            if job.submitted.paths.result_pickle.exists():
                self.returned(job)
            elif not self.on_slurm and job.submitted.done():
                self.lost(job, "its process ended without a result (killed, or out of memory)")
        waiting = list(self.pending.values())
        if self.on_slurm and waiting:
            states = slurm_states([job.submitted.job_id for job in waiting])
            if states is None:  # SLURM could not be asked; its controller may answer next time
                return
            for job in waiting:
                state = states.get(job.submitted.job_id, GONE)
                if state == GONE or state.split()[0] in ENDED_STATES:
                    ended_now[job.number] = state
        now = time.monotonic()
        self.ended_since = {n: self.ended_since.get(n, now) for n in ended_now}
        for number, state in ended_now.items():
            job = self.pending[number]
            ended_for = now - self.ended_since[number]
            if ended_for >= ENDED_SECONDS and not job.submitted.paths.result_pickle.exists():
                self.lost(job, f"SLURM ended the job {state} before it returned a result")

    def returned(self, job: Job) -> None:
        del self.pending[job.number]
        try:
            result = job.submitted.results()[0]
        except Exception as error:  # the job raised outside reluexp's own handling
            self.lost(job, f"{type(error).__name__}: {str(error).splitlines()[0]}")
            return
        self.results[job.number] = result
        try:
            summary = RunSummary.read(Path(result.hydra_cfg.hydra.runtime.output_dir))
        except AttributeError:  # no config came back: nothing says where it ran
            summary = RunSummary(status="failed", overrides=job.overrides)
        except SummaryError as error:  # the run's own record: it says what it cannot read
            summary = RunSummary(status=UNREADABLE, overrides=job.overrides, error=str(error))
        self.say(job, summary)

    def lost(self, job: Job, reason: str) -> None:
        """The result the job would have returned as a failed run; its run's summary says why
        (a job that never started has no run: the sweep summary lists it as not started)."""
        self.pending.pop(job.number, None)
        job_id = job.submitted.job_id if self.on_slurm else None
        summary = next(
            (
                recorded
                for run_dir in self.sweep_dir.glob(f"{job_prefix(job.number)}_*")
                if (recorded := record_lost(run_dir, job.overrides, reason, job_id)) is not None
            ),
            RunSummary(
                status="not started", overrides=job.overrides, error=reason, slurm_job_id=job_id
            ),
        )
        result = JobReturn(overrides=job.overrides, status=JobStatus.COMPLETED)
        result.return_value = math.nan
        self.results[job.number] = result
        self.say(job, summary)

    def say(self, job: Job, summary: RunSummary) -> None:
        if not self.quiet:
            print(job_line(job.number, self.plan, summary), file=sys.stderr, flush=True)


def launch(
    launcher: Any,
    job_overrides: list[list[str]],
    initial_job_idx: int,
    waiting: Callable[[], AbstractContextManager[None]],
) -> list[JobReturn]:
    """Submit the jobs and follow each to its end: a result for every job, in job order. The
    wait is in `waiting()` (the sweep's own stop ends it at once)."""
    submitted = submit(launcher, job_overrides, initial_job_idx)
    jobs = [
        Job(initial_job_idx + i, list(overrides), job)
        for i, (overrides, job) in enumerate(zip(job_overrides, submitted))
    ]
    with waiting():
        return JobFollower(launcher.config, jobs, on_slurm=launcher.cluster == "slurm").follow()
