"""The process-wide state a job sets (torch threads, malloc, RNG) and puts back, so every job of an
in-process sweep runs exactly as it would alone; and the SLURM job the process is."""

import ctypes
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch

# glibc's mallopt parameters (malloc.h) and the defaults it starts with.
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
GLIBC_DEFAULTS = {M_TRIM_THRESHOLD: 128 * 1024, M_MMAP_MAX: 65536}
KEEP_FREED_MEMORY = {M_TRIM_THRESHOLD: 2**31 - 1, M_MMAP_MAX: 0}


def set_malloc(settings: dict[int, int], release_free_memory: bool = False) -> bool:
    """Apply glibc mallopt settings (and hand free memory back to the OS); False without glibc."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except AttributeError:
        return False
    for parameter, value in settings.items():
        mallopt(parameter, value)
    if release_free_memory:
        libc.malloc_trim(0)
    return True


@contextmanager
def keep_freed_memory() -> Iterator[None]:
    """While active, glibc's malloc keeps freed memory for reuse instead of handing it back.

    By default glibc serves every block above its mmap threshold (32 MiB at most) with a fresh
    mmap, so a large step's activations are page-faulted in again at every step: about a fifth
    of the step at N=4096, H=4096 (benchmarks/limit.py). Same-shaped steps reuse the blocks.
    Afterwards glibc's defaults are put back and the kept memory is handed back (malloc_trim),
    so the next job starts as it would alone (glibc's dynamic mmap threshold stays off: a
    setting of speed, never of results).
    """
    applied = set_malloc(KEEP_FREED_MEMORY)
    try:
        yield
    finally:
        if applied:
            set_malloc(GLIBC_DEFAULTS, release_free_memory=True)


@contextmanager
def heap_left_alone() -> Iterator[None]:
    """While the training loop runs, Python's garbage collector leaves alone what was alive
    before it (the config, the model, torch's and Hydra's modules: ~260,000 objects), which a
    full collection walked in ~0.1 s at a random step of a long run streaming every step (a
    1% cost at every step of a 24-layer MLP); what the loop makes is collected as ever. Put
    back after (gc.unfreeze); a caller's own gc.freeze() is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def job_environment(device: torch.device, threads: int | None) -> Iterator[None]:
    """Set what a job changes process-wide (torch threads, malloc, RNG state) and put all of it
    back when the job ends, whatever ran before it in the same process. (Signal handlers are
    the entry point's: reluexp.shell.stops.)"""
    saved_threads = torch.get_num_threads()
    saved_rng = torch.get_rng_state()
    saved_cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with keep_freed_memory() if device.type == "cpu" else nullcontext():
            yield
    finally:
        torch.set_num_threads(saved_threads)
        torch.set_rng_state(saved_rng)
        if saved_cuda_rng is not None:
            torch.cuda.set_rng_state_all(saved_cuda_rng)


def slurm_job_id() -> str | None:
    """This process's SLURM job (`<array job>_<task>` for an array task), None outside SLURM."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return os.environ.get("SLURM_JOB_ID")
