"""The process a run lives in: its device, versions, signals, and the process-wide state a job
sets and puts back, so every job of an in-process sweep runs exactly as it would alone."""

import atexit
import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import reluexp
from reluexp.config import Config, ConfigError, Dtype, hidden_sizes, layer_sizes


def resolve_device(name: str) -> torch.device:
    """`auto` picks the best device present; any other name must exist here."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    allowed = "expected auto, cpu, cuda, cuda:N or mps"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device={name!r}: {allowed}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name!r}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            raise ConfigError(f"device={name!r}: this machine has {count} CUDA device(s)")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"device={name!r}: MPS is not available on this machine")
    elif device.type != "cpu":
        raise ConfigError(f"device={name!r}: {allowed}")
    return device


@functools.cache
def versions() -> dict[str, str | None]:
    """Versions that decide a run's numbers, for summary.json."""

    def dist_version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(reluexp.__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hydra": dist_version("hydra-core"),
        "reluexp": reluexp.__version__,
        "git_commit": commit or None,
    }


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


def slurm_job_id() -> str | None:
    """This process's SLURM job (`<array job>_<task>` for an array task), None outside SLURM."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def stop_signals() -> tuple[int, ...]:
    """The signals that stop a run at a step boundary: SIGINT, SIGTERM, and in a SLURM job
    SIGUSR2, which SLURM sends before a time limit or preemption (submitit's protocol)."""
    if slurm_job_id() is None:
        return (signal.SIGINT, signal.SIGTERM)
    return (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)


class StopSignals:
    """While active, stop_signals() ask the loop to stop at the next step; a second one exits
    now. Every file is written by rename, so exiting at once cannot leave a half-written one.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            os._exit(128 + signum)
        self.signum = signum

    def __enter__(self) -> "StopSignals":
        # Handlers can only be set from the main thread (a threaded launcher runs jobs elsewhere).
        if threading.current_thread() is threading.main_thread():
            for signum in stop_signals():
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


@contextmanager
def job_environment(device: torch.device, threads: int | None) -> Iterator[StopSignals]:
    """Set what a job changes process-wide (torch threads, malloc, signal handlers, RNG state)
    and put all of it back when the job ends, whatever ran before it in the same process."""
    saved_threads = torch.get_num_threads()
    saved_rng = torch.get_rng_state()
    saved_cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        malloc = keep_freed_memory() if device.type == "cpu" else nullcontext()
        with malloc, StopSignals() as stop:
            yield stop
    finally:
        torch.set_num_threads(saved_threads)
        torch.set_rng_state(saved_rng)
        if saved_cuda_rng is not None:
            torch.cuda.set_rng_state_all(saved_cuda_rng)


LOCK_NAME = ".reluexp.lock"


@contextmanager
def hold_run(run_dir: Path) -> Iterator[None]:
    """One process at a time trains in a run directory: a second (say, a second `resume=` of
    the same run) is refused. The lock is the kernel's: a killed process releases it."""
    lock = open(run_dir / LOCK_NAME, "a+")  # noqa: SIM115 (closed below)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise ConfigError(
                f"{run_dir}: another reluexp process (pid {holder}) is training in it"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield
    finally:
        lock.close()


def available_memory(device: torch.device) -> int | None:
    """Bytes the run can still allocate on the device; None where it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            return None
        for line in meminfo.splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def check_memory(config: Config, device: torch.device) -> None:
    """Refuse sizes whose tensors cannot fit before allocating any (a lower bound of a step's
    peak: data, weights with their gradients and optimizer state, each layer's two activations
    and its gradient)."""
    sizes = layer_sizes(config)
    weights = sum(a * b for a, b in zip(sizes, sizes[1:]))
    activations = config.data.n * (sum(hidden_sizes(config.model.hidden)) + config.data.d_out)
    elements = config.data.n * (config.data.d_in + config.data.d_out) + 4 * weights
    needed = (elements + 3 * activations) * getattr(torch, Dtype(config.dtype).value).itemsize
    available = available_memory(device)
    if available is not None and needed > available:
        raise ConfigError(
            f"data.n={config.data.n}, data.d_in={config.data.d_in}, "
            f"model.hidden={config.model.hidden}, data.d_out={config.data.d_out}: needs at "
            f"least {needed / 2**30:.3g} GiB on {device}, {available / 2**30:.3g} GiB available"
        )


def process_state(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid from /proc/PID/stat; None once it is gone."""
    try:
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
    except (OSError, IndexError, ValueError):
        return None
    return state, int(ppid)


def child_processes() -> list[int]:
    """The pids of this process's children (a parallel launcher's workers), from /proc."""
    pids = [int(path.name) for path in Path("/proc").iterdir() if path.name.isdigit()]
    return [pid for pid in pids if (process_state(pid) or ("", 0))[1] == os.getpid()]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def stop_processes(pids: list[int], signum: int, timeout: float = 120.0) -> None:
    """Pass the signal on and wait for each process to end; kill what outlives the timeout."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        # A zombie has ended: its parent (init, here) has not reaped it yet.
        alive = [pid for pid in alive if (process_state(pid) or ("Z", 0))[0] != "Z"]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def exit_without_teardown(code: int | str | None) -> None:
    """Exit as `sys.exit(code)` would, less the interpreter's teardown of every module: once
    torch is imported that teardown alone takes about a quarter of a second, longer than all
    of Hydra's start. The atexit handlers (logging's flush and close among them) run and the
    standard streams are flushed first, so nothing written is lost. While another thread or a
    child process is still running, the exit is Python's own, which waits for them."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
    if any(not t.daemon for t in others) or child_processes():
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
