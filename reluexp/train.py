"""The training loop: seed-exact reference experiment, every step's metrics streamed to the sink."""

import logging
import math
import platform
import subprocess
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import reluexp
from reluexp.activations import resolve_activation
from reluexp.config import Config, ConfigError, Dtype, config_dict, hidden_sizes, validate
from reluexp.data import make_data
from reluexp.model import forward, init_weights
from reluexp.sink import Sink

log = logging.getLogger("reluexp")

# Metric rows wait on the device and reach the host in blocks: at most this many steps, ...
FLUSH_ROWS = 256
# ... or this many seconds, so a slow run still streams.
FLUSH_SECONDS = 2.0


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


def metric_tags(num_weights: int) -> list[str]:
    """Tags of one metric row, in the order step_metrics() fills it."""
    names = [f"w{i}" for i in range(1, num_weights + 1)]
    return [
        "loss/train",
        *(f"grad_norm/{n}" for n in names),
        "grad_norm/total",
        *(f"weight_norm/{n}" for n in names),
        "activation/dead_fraction",
        "activation/exact_zeros",
    ]


def step_metrics(
    loss: torch.Tensor,
    weights: list[torch.Tensor],
    hidden: list[tuple[torch.Tensor, torch.Tensor]],
) -> torch.Tensor:
    """One row of metric_tags(), computed on the device without a host sync."""
    grad_norms = torch._foreach_norm([w.grad for w in weights])
    weight_norms = torch._foreach_norm(weights)
    total_grad_norm = torch.linalg.vector_norm(torch.stack(grad_norms))
    # A unit is dead when its activation is 0 for every example of the batch.
    dead_units = sum((post == 0).all(dim=0).sum() for _, post in hidden)
    num_units = sum(post.shape[1] for _, post in hidden)
    # Pre-activations exactly 0.0 are where a ReLU's subgradient convention matters.
    exact_zeros = sum((pre == 0).sum() for pre, _ in hidden)
    return torch.stack(
        [
            loss.detach(),
            *grad_norms,
            total_grad_norm,
            *weight_norms,
            (dead_units / num_units).to(loss.dtype),
            exact_zeros.to(loss.dtype),
        ]
    )


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
    }


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run(config: Config, run_dir: Path, overrides: Sequence[str] = ()) -> float:
    """Train the configured model, stream its metrics into run_dir; return the final loss."""
    validate(config)
    device = resolve_device(config.device)
    dtype_name = Dtype(config.dtype).value
    dtype = getattr(torch, dtype_name)
    activation = resolve_activation(config.activation.target)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    run_dir.mkdir(parents=True, exist_ok=True)

    # One CPU generator in the seed's order (x, y, w1, w2, ...): CPU and GPU runs start identical.
    generator = torch.Generator("cpu").manual_seed(config.seed)
    x, y = make_data(config.data.n, config.data.d_in, config.data.d_out, generator)
    sizes = [config.data.d_in, *hidden_sizes(config.model.hidden), config.data.d_out]
    weights = init_weights(sizes, generator)
    x, y = x.to(device, dtype), y.to(device, dtype)
    weights = [w.to(device, dtype).requires_grad_() for w in weights]

    tags = metric_tags(len(weights))
    sink = Sink(
        run_dir,
        {
            "status": "running",
            "started_at": now(),
            "steps_done": 0,
            "device": str(device),
            "dtype": dtype_name,
            "threads": torch.get_num_threads(),
            "seed": config.seed,
            "versions": versions(),
            "overrides": list(overrides),
            "config": config_dict(config),
        },
    )
    sink.hparams_start(hparams(config, device))

    buffer = torch.empty(FLUSH_ROWS, len(tags), device=device, dtype=dtype)
    buffered_steps: list[int] = []
    buffered_times: list[float] = []
    losses: list[float] = []
    diverged_at: int | None = None

    def flush() -> None:
        """Bring buffered rows to the host (one sync), stream them, stop at a non-finite loss."""
        nonlocal diverged_at
        rows = buffer[: len(buffered_steps)].tolist()
        for i, row in enumerate(rows):
            if not math.isfinite(row[0]):
                diverged_at = buffered_steps[i]
                del rows[i + 1 :]
                break
        sink.scalars(tags, buffered_steps, buffered_times, rows)
        losses.extend(row[0] for row in rows)
        buffered_steps.clear()
        buffered_times.clear()

    start = last_flush = time.perf_counter()
    step = 0
    while step < config.steps and diverged_at is None:
        y_pred, hidden = forward(x, weights, activation)
        loss = (y_pred - y).pow(2).sum()
        if step % config.print_every == config.print_every - 1:
            log.info("%d %r", step, loss.item())
        loss.backward()
        with torch.no_grad():
            if step % config.log_every == 0 or step == config.steps - 1:
                buffer[len(buffered_steps)] = step_metrics(loss, weights, hidden)
                buffered_steps.append(step)
                buffered_times.append(time.time())
            # Exactly the seed's update expression: torch.optim.SGD rounds differently.
            for w in weights:
                w -= config.lr * w.grad
                w.grad.zero_()
        step += 1
        if len(buffered_steps) == FLUSH_ROWS or time.perf_counter() - last_flush > FLUSH_SECONDS:
            flush()
            last_flush = time.perf_counter()
    if buffered_steps:
        flush()
    wall_time = time.perf_counter() - start

    steps_done = step if diverged_at is None else diverged_at + 1
    final_loss = losses[-1] if losses else math.nan
    min_loss = min(losses, default=math.nan)
    status = "completed" if diverged_at is None else "diverged"
    sink.hparams_end(max(steps_done - 1, 0), final_loss, min_loss)
    sink.update(
        status=status,
        ended_at=now(),
        steps_done=steps_done,
        diverged_at_step=diverged_at,
        final_loss=final_loss,
        min_loss=min_loss,
        wall_time_s=wall_time,
        steps_per_s=step / wall_time if wall_time > 0 else None,
    )
    sink.close()
    if diverged_at is not None:
        log.warning("diverged: non-finite loss at step %d", diverged_at)
    return final_loss
