"""A digits run's step against a plain PyTorch loop doing the same: the same data, split and
batches, model, loss, update and validation passes; reluexp adds its stream of metrics (every
10 steps, as the digits preset has it, and every step).

    python -m benchmarks.digits [--repetitions 9] [--steps 600]
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import alternate, machine, summarize, write_section
from reluexp.hydra_glue import compose_config, task_config
from reluexp.run import runner
from reluexp.run.batches import Batches
from reluexp.run.data import read_data
from reluexp.run.process import keep_freed_memory
from reluexp.run.state import seeded_data

OVERRIDES = ["data=digits", "activation=relu", "device=cpu"]


def config(steps: int, log_every: int | None = None):
    """The digits preset (its log_every: 10), or every log_every-th step streamed."""
    chosen = task_config(compose_config([*OVERRIDES, f"steps={steps}"]))
    chosen.quiet = True
    chosen.log_every = log_every or chosen.log_every
    return chosen


def plain_loop(steps: int) -> float:
    """The same training by hand: seconds per step."""
    chosen = config(steps)
    data, generator = seeded_data(chosen, read_data(chosen))
    sizes = data.layer_sizes(chosen.model.hidden)
    weights = [
        (torch.randn(a, b, generator=generator) * (2 / a) ** 0.5).requires_grad_()
        for a, b in zip(sizes, sizes[1:])
    ]
    batches = Batches(data, chosen.data.batch_size, chosen.seed)

    def logits_of(x):
        return torch.relu(x.mm(weights[0])).mm(weights[1])

    with keep_freed_memory():
        start = time.perf_counter()
        for step in range(steps):
            x, y = batches.at(step)
            loss = torch.nn.functional.cross_entropy(logits_of(x), y)
            loss.backward()
            with torch.no_grad():
                if step % chosen.eval_every == 0 or step == steps - 1:
                    val = logits_of(data.x_val)
                    torch.nn.functional.cross_entropy(val, data.y_val)
                    (val.argmax(1) == data.y_val).double().mean()
                for w in weights:
                    w -= w.grad.mul_(chosen.lr)
                    w.grad = None
        return (time.perf_counter() - start) / steps


def reluexp_run(steps: int, log_every: int | None = None) -> float:
    """runner.run's loop per step (summary.json's wall time: the loop and its flushes)."""
    with tempfile.TemporaryDirectory() as run_dir:
        runner.run(config(steps, log_every), Path(run_dir))
        return json.loads((Path(run_dir) / "summary.json").read_text())["wall_time_s"] / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    samples = alternate(
        {
            "plain PyTorch loop": lambda: plain_loop(args.steps),
            "reluexp, data=digits (metrics every 10 steps, the preset's)": lambda: reluexp_run(
                args.steps
            ),
            "reluexp, data=digits, every step streamed (log_every=1)": lambda: reluexp_run(
                args.steps, 1
            ),
        },
        args.repetitions,
    )
    base = statistics.median(samples["plain PyTorch loop"])
    lines = [
        "## Real data: a digits step against a plain loop",
        "",
        f"`python -m benchmarks.digits`: {machine()}. `{' '.join(OVERRIDES)}`: batches of 128 "
        f"of the 1,437 training images, a 64-100-10 MLP, cross-entropy, the manual update, a "
        f"validation pass every 10 steps; medians (min–max) over {args.repetitions} "
        f"alternating repetitions of {args.steps} steps.",
        "",
        "| loop | µs per step | ratio to the plain loop |",
        "| --- | --- | --- |",
    ]
    for name, values in samples.items():
        ratio = statistics.median(values) / base
        lines.append(f"| {name} | {summarize(values, 1e6)} | {ratio:.3f} |")
    write_section("digits", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
