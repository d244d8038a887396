"""The training loop: seed-exact reference experiment, every step's metrics streamed to the sink."""

import ctypes
import functools
import json
import logging
import math
import os
import platform
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import reluexp
from reluexp.activations import Activation, resolve_activation
from reluexp.checkpoint import load_checkpoint, save_checkpoint
from reluexp.config import (
    Config,
    ConfigError,
    Dtype,
    Optimizer,
    config_dict,
    config_from_dict,
    hidden_sizes,
    validate,
)
from reluexp.data import make_data
from reluexp.metrics import MetricStream
from reluexp.model import forward, init_weights
from reluexp.progress import Progress
from reluexp.sink import Sink

log = logging.getLogger("reluexp")


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


# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for reuse instead of handing it back to the OS.

    By default glibc serves every block above its mmap threshold (32 MiB at most) with a fresh
    mmap, so a large step's activations are page-faulted in again at every step: about a fifth
    of the step at N=4096, H=4096 (benchmarks/limit.py). Same-shaped steps reuse the blocks; the
    process keeps its peak memory. Process-wide and idempotent; a no-op without glibc.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:
        return
    mallopt(M_MMAP_MAX, 0)
    mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


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


def hparams(config: Config, device: torch.device) -> dict[str, Any]:
    """The config values a run is compared by in TensorBoard's HParams tab."""
    return {
        "activation": config.activation.name,
        "hidden": str(config.model.hidden),
        "n": config.data.n,
        "d_in": config.data.d_in,
        "d_out": config.data.d_out,
        "lr": config.lr,
        "steps": config.steps,
        "seed": config.seed,
        "device": str(device),
        "dtype": Dtype(config.dtype).value,
        "optimizer": Optimizer(config.optimizer).value,
    }


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Interrupted(Exception):
    """The run stopped at a step boundary on a signal, checkpointed; exit with 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """While active, SIGINT/SIGTERM ask the loop to stop at the next step; a second one exits now.

    Every file is written by rename, so exiting at once cannot leave a half-written one.
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
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def run(config: Config, run_dir: Path, overrides: Sequence[str] = ()) -> float:
    """Train the configured model, stream its metrics into run_dir; return the final loss."""
    validate(config)
    summary = {
        "status": "running",
        "started_at": now(),
        "seed": config.seed,
        "overrides": list(overrides),
        "config": config_dict(config),
    }
    return _train(config, run_dir, summary, checkpoint=None)


def resume(run_dir: Path) -> float:
    """Continue an interrupted run in its own directory, from its checkpoint, with its config."""
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise ConfigError(f"resume={run_dir}: not a run directory (no summary.json)")
    try:
        summary = json.loads(summary_path.read_text())
    except json.JSONDecodeError:
        raise ConfigError(f"resume={run_dir}: summary.json is not valid JSON") from None
    if "config" not in summary:
        raise ConfigError(f"resume={run_dir}: the run failed before it started; nothing to resume")
    if summary["status"] in ("completed", "diverged"):
        log.info(
            "%s already %s at step %d; nothing to resume",
            run_dir,
            summary["status"],
            summary["steps_done"],
        )
        return summary["final_loss"]
    checkpoint = load_checkpoint(run_dir)
    if checkpoint["config"] != summary["config"]:
        raise ConfigError(f"resume={run_dir}: checkpoint.pt was written by another config")
    for stale in ("ended_at", "signal", "error"):
        summary.pop(stale, None)
    summary["resumes"] = summary.get("resumes", 0) + 1
    config = config_from_dict(checkpoint["config"])
    validate(config)
    sizes = layer_sizes(config)
    shapes = [tuple(w.shape) for w in checkpoint["weights"]]
    if shapes != list(zip(sizes, sizes[1:])):
        raise ConfigError(f"resume={run_dir}: checkpoint weights {shapes} do not fit the config")
    return _train(config, run_dir, summary, checkpoint)


def squared_error(
    x: torch.Tensor, y: torch.Tensor, weights: list[torch.Tensor], activation: Activation
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The article's loss, sum((y_pred - y)^2), and the hidden layers the metrics read."""
    y_pred, hidden = forward(x, weights, activation)
    return (y_pred - y).pow(2).sum(), hidden


def layer_sizes(config: Config) -> list[int]:
    return [config.data.d_in, *hidden_sizes(config.model.hidden), config.data.d_out]


def make_optimizer(config: Config, weights: list[torch.Tensor]) -> torch.optim.Optimizer | None:
    """None for the seed's manual update, which the loop applies itself."""
    if config.optimizer == Optimizer.sgd:
        return torch.optim.SGD(weights, lr=config.lr)
    if config.optimizer == Optimizer.adam:
        return torch.optim.Adam(weights, lr=config.lr)
    return None


def _train(
    config: Config, run_dir: Path, summary: dict[str, Any], checkpoint: dict[str, Any] | None
) -> float:
    device = resolve_device(config.device)
    dtype_name = Dtype(config.dtype).value
    dtype = getattr(torch, dtype_name)
    activation = resolve_activation(config.activation.target, config.activation.params)
    if device.type == "cpu":
        keep_freed_memory()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    run_dir.mkdir(parents=True, exist_ok=True)

    # One CPU generator in the seed's order (x, y, w1, w2, ...): CPU and GPU runs start identical.
    generator = torch.Generator("cpu").manual_seed(config.seed)
    x, y = make_data(config.data.n, config.data.d_in, config.data.d_out, generator)
    weights = init_weights(layer_sizes(config), generator)
    if checkpoint is not None:
        weights = checkpoint["weights"]
    x, y = x.to(device, dtype), y.to(device, dtype)
    weights = [w.to(device, dtype).requires_grad_() for w in weights]
    optimizer = make_optimizer(config, weights)
    # compile=true: forward and loss, and through AOTAutograd their backward, as compiled kernels.
    compute_loss = torch.compile(squared_error) if config.compile else squared_error
    start_step = 0
    if checkpoint is not None:
        start_step = checkpoint["step"]
        if optimizer is not None:
            optimizer.load_state_dict(checkpoint["optimizer"])
        torch.set_rng_state(checkpoint["rng_cpu"])
        if torch.cuda.is_available() and checkpoint["rng_cuda"]:
            torch.cuda.set_rng_state_all(checkpoint["rng_cuda"])

    summary.update(
        status="running",
        device=str(device),
        dtype=dtype_name,
        threads=torch.get_num_threads(),
        versions=versions(),
    )
    sink = Sink(run_dir, summary, purge_step=start_step if checkpoint is not None else None)
    if checkpoint is None:
        sink.declare(hparams(config, device))
    stream = MetricStream(
        sink,
        config.data.n,
        hidden_sizes(config.model.hidden),
        weights,
        min_loss=checkpoint["min_loss"] if checkpoint else math.inf,
        final_loss=checkpoint["final_loss"] if checkpoint else math.nan,
        stop_on_divergence=config.stop_on_divergence,
        print_every=config.print_every,
    )
    progress = Progress(config.steps, start_step, lambda: stream.final_loss, not config.quiet)
    previous_wall_time = checkpoint["wall_time_s"] if checkpoint else 0.0
    start = time.perf_counter()
    step = start_step

    def save(step: int) -> None:
        stream.flush()  # so the checkpoint's min/final loss cover every step before it
        log.debug("checkpoint at step %d", step)
        save_checkpoint(
            run_dir,
            {
                "step": step,
                "weights": [w.detach() for w in weights],
                "optimizer": optimizer.state_dict() if optimizer is not None else {},
                "rng_cpu": torch.get_rng_state(),
                "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "config": config_dict(config),
                "min_loss": stream.min_loss,
                "final_loss": stream.final_loss,
                "wall_time_s": previous_wall_time + time.perf_counter() - start,
            },
        )

    def finish(status: str, **fields: Any) -> None:
        segment_time = time.perf_counter() - start
        wall_time = previous_wall_time + segment_time
        # Steps this process ran, past a divergence too (until a flush saw it).
        executed_steps = step - start_step
        sink.update(
            status=status,
            ended_at=now(),
            steps_done=stream.diverged_at + 1 if stream.stopped else step,
            final_loss=stream.final_loss,
            min_loss=stream.min_loss if math.isfinite(stream.min_loss) else math.nan,
            wall_time_s=wall_time,
            steps_per_s=(executed_steps / segment_time) if segment_time > 0 else None,
            **fields,
        )
        sink.close()

    with StopSignals() as stop:
        try:
            while step < config.steps and not stream.stopped and stop.signum is None:
                loss, hidden = compute_loss(x, y, weights, activation)
                loss.backward()
                # Print steps are recorded too: their lines come from the flushed rows.
                recording = (
                    step % config.log_every == 0
                    or step % config.print_every == config.print_every - 1
                    or step == config.steps - 1
                )
                with torch.no_grad():
                    if recording:
                        stream.record_gradients(loss, [w.grad for w in weights], hidden)
                    if optimizer is None:
                        for w in weights:
                            # The seed's `w -= lr * w.grad`, with lr * w.grad computed in place in
                            # the gradient, which is then dropped instead of zeroed: the same
                            # values, without a temporary, a fill and an accumulate per weight.
                            w -= w.grad.mul_(config.lr)
                            w.grad = None
                    else:
                        optimizer.step()
                        optimizer.zero_grad()
                    if recording:
                        stream.record_weights(step)
                step += 1
                progress.update(step)
                if config.checkpoint_every and step % config.checkpoint_every == 0:
                    save(step)
            stream.flush()
            progress.close()
        except Exception as error:
            progress.close()
            finish("failed", error=f"{type(error).__name__}: {error}")
            raise
        if not stream.stopped:
            save(step)
        if stop.signum is not None:
            finish("interrupted", signal=signal.Signals(stop.signum).name)
            log.warning(
                "interrupted by %s at step %d; checkpoint written",
                signal.Signals(stop.signum).name,
                step,
            )
            raise Interrupted(stop.signum)
    status = "completed" if stream.diverged_at is None else "diverged"
    last_step = stream.diverged_at if stream.stopped else step - 1
    sink.hparams_end(max(last_step, 0), stream.final_loss, stream.min_loss)
    finish(status, diverged_at_step=stream.diverged_at)
    if stream.diverged_at is not None:
        log.warning("diverged: non-finite loss at step %d", stream.diverged_at)
    return stream.final_loss
