"""What reluexp asks SLURM: whether its nodes can take a sweep's jobs, and each job's state."""

import re
import subprocess

from omegaconf import DictConfig

from reluexp.config import ConfigError

GONE = "(no longer known to SLURM)"
# Job states after which SLURM runs nothing more for the job (squeue --states=all).
ENDED_STATES = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}


def check_slurm_resources(launcher: DictConfig) -> None:
    """A job asking for more CPUs or memory than any node of its partition has is never
    scheduled, and SLURM says nothing: say it before submitting."""
    partition = launcher.get("partition")
    where = f"partition {partition}" if partition else "the default partition"
    command = ["sinfo", "-h", "-o", "%c %m", *(["-p", partition] if partition else [])]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ConfigError(
            f"hydra/launcher=slurm: cannot ask SLURM for its nodes ({error})"
        ) from None
    # One line per group of nodes: CPUs and memory (MB), e.g. "2 24105".
    fields = [re.findall(r"\d+", line)[:2] for line in answer.stdout.splitlines()]
    nodes = [(int(pair[0]), int(pair[1])) for pair in fields if len(pair) == 2]
    if answer.returncode != 0 or not nodes:
        reason = (answer.stderr.strip().splitlines() or ["sinfo lists no nodes"])[-1]
        key = f"hydra.launcher.partition={partition}" if partition else "hydra/launcher"
        raise ConfigError(f"{key}: SLURM has no nodes in {where} here ({reason})")
    most_cpus, most_memory_mb = max(c for c, _ in nodes), max(m for _, m in nodes)
    cpus = launcher.get("cpus_per_task") or 1
    if cpus * (launcher.get("tasks_per_node") or 1) > most_cpus:
        raise ConfigError(
            f"hydra.launcher.cpus_per_task={cpus}: the nodes of {where} have at most "
            f"{most_cpus} CPUs; such a job would never be scheduled"
        )
    memory_gb = launcher.get("mem_gb")
    if memory_gb and memory_gb * 1024 > most_memory_mb:
        raise ConfigError(
            f"hydra.launcher.mem_gb={memory_gb}: the nodes of {where} have at most "
            f"{most_memory_mb / 1024:.3g} GB; such a job would never be scheduled"
        )


def slurm_states(job_ids: list[str]) -> dict[str, str] | None:
    """`state (reason)` of each job SLURM still knows, by job id (`<array>_<task>`); None when
    SLURM could not be asked (its controller may be back next time)."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    command = ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(arrays)]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if answer.returncode != 0:
        # Jobs ended long ago (MinJobAge) are forgotten: known to have ended, not how.
        return {} if "Invalid job id" in answer.stderr else None
    states = {}
    for line in answer.stdout.splitlines():
        job_id, state, reason = (line.split("|") + ["", ""])[:3]
        states[job_id] = state if reason in ("", "None") else f"{state} ({reason})"
    return states
