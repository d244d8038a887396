"""A sweep's jobs as they are on disk: every job its plan (multirun.yaml) says, in job order,
each read from its directory (its summary.json) or `not started`; what cannot be read is
`unreadable`, with the reason."""

from dataclasses import dataclass
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from reluexp.record.summary import SUMMARY_NAME, RunSummary, SummaryError
from reluexp.run.rundir import CHECKPOINT_NAME

# libyaml's loader where PyYAML has it: a sweep's report reads every job's hydra.yaml.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

STATUSES = ("completed", "diverged", "interrupted", "failed", "running", "not started")
UNREADABLE = "unreadable"


@dataclass
class Job:
    # None: the sweep planned the job but never made its directory.
    run_dir: Path | None
    summary: RunSummary
    # Overrides every group of its sweep has (steps=200, threads=1), left out of its label.
    constant: frozenset[str] = frozenset()

    @property
    def grouped_by(self) -> frozenset[str]:
        """The job's overrides without its seed (and study name): what its group shares."""
        return frozenset(
            o for o in self.summary.overrides if not o.startswith(("seed=", "experiment="))
        )

    @property
    def group(self) -> str:
        """Its group's label: what tells the group from the sweep's others."""
        return " ".join(sorted(self.grouped_by - self.constant)) or "(defaults)"


def constant_overrides(jobs: list[Job]) -> frozenset[str]:
    """The overrides every group of a sweep has, when it has two groups or more (a single
    group is named by all of its own)."""
    groups = {job.grouped_by for job in jobs}
    return frozenset.intersection(*groups) if len(groups) > 1 else frozenset()


def read_job(run_dir: Path) -> Job:
    """A job directory as a Job: its summary.json; without one, the overrides Hydra saved for
    it. What cannot be read is `unreadable` with the reason."""
    if (run_dir / SUMMARY_NAME).is_file():
        try:
            return Job(run_dir, RunSummary.read(run_dir))
        except SummaryError as error:
            return Job(run_dir, RunSummary(status=UNREADABLE, error=str(error)))
    try:
        overrides = [str(o) for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")]
    except FileNotFoundError:
        overrides = []
    except Exception as error:  # binary garbage, wrong YAML: this job only
        reason = f".hydra/overrides.yaml: {type(error).__name__}"
        return Job(run_dir, RunSummary(status=UNREADABLE, error=reason))
    if (run_dir / CHECKPOINT_NAME).is_file() or any(run_dir.glob("events.out.tfevents.*")):
        reason = f"no {SUMMARY_NAME}, but it trained (events or checkpoint present)"
        return Job(run_dir, RunSummary(status=UNREADABLE, overrides=overrides, error=reason))
    return Job(run_dir, RunSummary(status="not started", overrides=overrides))


def jobs_in(hydra_config: DictConfig) -> list[list[str]] | int:
    """The overrides of every job of a sweep's Hydra config, in job order, as Hydra's basic
    sweeper makes them; for a sweeper that chooses as it goes (Optuna), only how many."""
    if "n_trials" in hydra_config.sweeper:
        return int(hydra_config.sweeper.n_trials)
    # The preset's params, then the command line: BasicSweeper's own order and merge.
    params = [f"{k}={v}" for k, v in (hydra_config.sweeper.get("params") or {}).items()]
    task = list(hydra_config.overrides.task)
    # Here, not at the top: reluexp._compat imports torch, which --help does without.
    from reluexp._compat import grid_jobs

    return grid_jobs(OverridesParser.create().parse_overrides(params + task))


def planned_jobs(sweep_dir: Path) -> list[list[str]] | int | None:
    """jobs_in the sweep's multirun.yaml; None without a readable one (plan_problem says
    why)."""
    try:
        return jobs_in(OmegaConf.load(sweep_dir / "multirun.yaml").hydra)
    except Exception:  # missing, or not what Hydra writes: plan_problem says which
        return None


def searched_keys(sweep_dir: Path) -> frozenset[str] | None:
    """The keys a sweeper that chooses as it goes (Optuna) searches, from multirun.yaml."""
    try:
        return frozenset(OmegaConf.load(sweep_dir / "multirun.yaml").hydra.sweeper.params)
    except Exception:  # missing, or not what Hydra writes
        return None


def plan_problem(sweep_dir: Path) -> str | None:
    """Why the sweep's plan cannot be read, or None when it can."""
    try:
        if planned_jobs(sweep_dir) is not None:
            return None
        OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task  # noqa: B018
    except FileNotFoundError:
        return "no multirun.yaml"
    except Exception as error:
        return f"multirun.yaml is unreadable ({type(error).__name__})"
    return "multirun.yaml does not say the sweep's jobs"


def job_number(run_dir: Path) -> int | None:
    """A job directory's number in its sweep, as Hydra recorded it (.hydra/hydra.yaml's
    hydra.job.num); None where it cannot be read."""
    try:
        recorded = yaml.load((run_dir / ".hydra" / "hydra.yaml").read_text(), Loader=YAML_LOADER)
        number = recorded["hydra"]["job"]["num"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None
    return number if isinstance(number, int) and not isinstance(number, bool) else None


def find_jobs(sweep_dir: Path) -> list[Job]:
    """Every job of the sweep in job order: its directory's state, or `not started`. A job's
    directory is found by the number Hydra recorded for it, whatever else it holds; one whose
    number cannot be read is listed after the others."""
    dirs = [p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir()]
    numbered = sorted(
        ((job_number(run_dir), run_dir) for run_dir in dirs),
        key=lambda pair: (pair[0] is None, pair[0] or 0, pair[1].name),
    )
    found = [(number, read_job(run_dir)) for number, run_dir in numbered]
    by_number = {number: job for number, job in found if number is not None}
    unnumbered = [job for number, job in found if number is None]
    planned = planned_jobs(sweep_dir)
    if planned is None:
        return labelled([job for _, job in found])
    if isinstance(planned, int):
        planned = [[f"(trial {number})"] for number in range(planned)]
    jobs = []
    for number, overrides in enumerate(planned):
        job = by_number.pop(number, None) or Job(
            None, RunSummary(status="not started", overrides=overrides)
        )
        if not job.summary.overrides:  # unreadable: the plan still says what it was
            job.summary.overrides = overrides
        jobs.append(job)
    # Directories the plan does not number are listed all the same.
    return labelled(jobs + list(by_number.values()) + unnumbered)


def labelled(jobs: list[Job]) -> list[Job]:
    constant = constant_overrides(jobs)
    for job in jobs:
        job.constant = constant
    return jobs
