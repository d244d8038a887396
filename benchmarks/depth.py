"""What streaming every step costs as a model gets deeper: MLPs of 1, 4, 12 and 24 hidden layers
of width 100 on the article's data (`model.init=scaled lr=1e-5`: 24 layers diverge at 1e-4), and
the digits study's CNN,
each per step with every step streamed (log_every=1), with nothing streamed between print steps
(log_every=1000000), and as the same training written by hand; also the hand loop computing the
streamed statistics bare, kept as a stream keeps them and dropped at once: the floors under what
streaming every step can cost.

    python -m benchmarks.depth [--repetitions 9] [--steps 400] [--threads 1] [--device cpu]

In-process, alternating: each round runs every loop once; a paired ratio is a round's time over
the hand-written loop's (or the unstreamed run's) of the same network in the same round.
Nothing streamed / by hand is reluexp's model path without the stream (a Module per layer, the
parameters looked up by name, the runner's loop): the floor's ratio is about that times what
streaming adds (streamed / nothing streamed) over what the kept statistics add by hand. The
last column sets what streaming adds to reluexp's step beside what the statistics, kept, add to
the hand loop's: the stream's own cost against the floor's, the model paths left out.
"""

import argparse
import gc
import time
from collections.abc import Callable
from functools import partial

import torch

from benchmarks.common import (
    alternate,
    machine,
    paired_ratio,
    reluexp_loop,
    summarize,
    write_section,
)
from benchmarks.digits_bare import DROPPED, KEPT, keep, site_statistics
from benchmarks.digits_bare import train as digits_by_hand
from reluexp.functions.activations import MyReLU
from reluexp.run.process import keep_freed_memory

DEPTHS = (1, 4, 12, 24)
WIDTH = 100
LR = 1e-5
NOTHING_STREAMED = 1_000_000


def mlp_overrides(depth: int, device: str) -> list[str]:
    hidden = ",".join([str(WIDTH)] * depth)
    return [
        f"model.hidden=[{hidden}]",
        "model.init=scaled",
        f"lr={LR}",
        "activation=myrelu",
        f"device={device}",
    ]


CNN_OVERRIDES = ["model=cnn", "data=digits", "activation=relu"]


def mlp_by_hand(
    depth: int,
    steps: int,
    device: str,
    statistics: str | None = None,
    recorded: Callable[[int], bool] | None = None,
) -> float:
    """The article's loop with `depth` hidden layers: the same draws (x, y, then the weights
    scaled by sqrt(2 / fan_in)) on the CPU, moved to the device, MyReLU, the summed squared
    error, w -= LR * w.grad. With `statistics` (KEPT or DROPPED), every step also computes what
    reluexp streams, bare: a dot product per gradient and per weight, and per site its input's
    nonzeros and its output's largest and smallest value per unit (no bookkeeping: KEPT is
    the floor of streaming every step, DROPPED the floor of computing its statistics at all);
    with `recorded`, only at the steps it accepts (a run's cadence: benchmarks/overhead.py)."""
    generator = torch.Generator("cpu").manual_seed(42)
    x = torch.randn(64, 1000, generator=generator).to(device)
    y = torch.randn(64, 10, generator=generator).to(device)
    sizes = [1000] + [WIDTH] * depth + [10]
    weights = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        w = torch.randn(fan_in, fan_out, generator=generator) * (2 / fan_in) ** 0.5
        weights.append(w.to(device).requires_grad_())
    flat = [w.detach().view(-1) for w in weights]
    kept: list[list[torch.Tensor]] = []
    with keep_freed_memory():
        start = time.perf_counter()
        for t in range(steps):
            h, sites = x, []
            computing = statistics and (recorded is None or recorded(t))
            for w in weights[:-1]:
                pre = h.mm(w)
                h = MyReLU.apply(pre)
                if computing:
                    sites.append((pre.detach(), h.detach()))
            loss = (h.mm(weights[-1]) - y).pow(2).sum()
            if t % 100 == 99:
                loss.item()
            loss.backward()
            with torch.no_grad():
                computed = []
                if computing:
                    for pre, post in sites:
                        computed += site_statistics(pre, post)
                    computed += [torch.dot(g, g) for g in (w.grad.view(-1) for w in weights)]
                for w in weights:
                    w -= LR * w.grad
                    w.grad = None
                if computing:
                    computed += [torch.dot(v, v) for v in flat]
                    keep(kept, computed, statistics)
        loss.item()  # an accelerator's queued steps end here
        return (time.perf_counter() - start) / steps


def cnn_by_hand(steps: int, device: str, statistics: str | None = None) -> float:
    """The digits CNN written by hand (benchmarks/digits_bare.py) under the malloc settings
    reluexp's CPU runs and the MLPs' hand loop use: glibc's defaults would give the hand loop a
    page fault per reallocated block, a cost reluexp does not pay."""
    with keep_freed_memory():
        return digits_by_hand("cnn", steps, device, statistics)


def differences(samples: list[float], baseline: list[float]) -> list[float]:
    """Each round's time less the baseline's of the same round."""
    return [sample - base for sample, base in zip(samples, baseline)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--steps", type=int, default=400)
    # One thread by default: on a shared 2-core machine two threads wait on each other's core,
    # and the medians spread more than the stream costs.
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # Every loop's garbage collections leave the imported heap alone, as reluexp's own loop does
    # (run/process.heap_left_alone): a full one walks it in ~0.1 s, in whichever loop it falls.
    gc.freeze()
    steps, device = args.steps, args.device
    # Each model's overrides, and its hand loop (statistics=None, KEPT or DROPPED).
    models: dict[str, tuple[list[str], Callable[..., float]]] = {
        f"MLP, {depth} hidden": (
            mlp_overrides(depth, device),
            partial(mlp_by_hand, depth, steps, device),
        )
        for depth in DEPTHS
    }
    cnn_overrides = [*CNN_OVERRIDES, f"device={device}"]
    models["digits CNN"] = (cnn_overrides, partial(cnn_by_hand, steps, device))
    candidates = {}
    for name, (overrides, by_hand) in models.items():
        candidates |= {
            f"{name}: by hand": by_hand,
            **{
                f"{name}: by hand, statistics {kind}": partial(by_hand, statistics=kind)
                for kind in (KEPT, DROPPED)
            },
            f"{name}: nothing streamed": (
                lambda overrides=overrides: reluexp_loop(overrides, steps, NOTHING_STREAMED)
            ),
            f"{name}: every step streamed": (
                lambda overrides=overrides: reluexp_loop(overrides, steps, 1)
            ),
        }
    samples = alternate(candidates, args.repetitions)
    lines = [
        "## Depth: what streaming every step costs as the model gets deeper",
        "",
        f"`python -m benchmarks.depth --device {device}`: {machine(device)}. MLPs of width "
        f"{WIDTH} on the article's data (`model.init=scaled lr={LR:g} activation=myrelu`) and "
        "the digits CNN "
        f"(`{' '.join(cnn_overrides)}`); medians (min–max) over {args.repetitions} alternating "
        f"repetitions of {steps} steps. Paired ratios: a round's time over the same network's "
        "in the same round.",
        "",
        "| model | by hand, µs/step | nothing streamed, µs/step | every step streamed, µs/step "
        "| streamed / nothing streamed | nothing streamed / by hand (the model path) "
        "| streamed / by hand | by hand with the statistics kept "
        "/ by hand | by hand with the statistics dropped / by hand | streamed / by hand with "
        "the statistics kept (the floor) | what streaming adds / what the statistics kept add "
        "by hand |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in models:
        by_hand = samples[f"{name}: by hand"]
        off = samples[f"{name}: nothing streamed"]
        on = samples[f"{name}: every step streamed"]
        floors = [samples[f"{name}: by hand, statistics {kind}"] for kind in (KEPT, DROPPED)]
        floor_ratios = [paired_ratio(floor, by_hand) for floor in floors]
        floor_ratios.append(paired_ratio(on, floors[0]))
        # The stream's own cost beside the statistics' bare cost: the model paths (a Module and
        # its hooks against plain tensors) left out of both.
        floor_ratios.append(paired_ratio(differences(on, off), differences(floors[0], by_hand)))
        lines.append(
            f"| {name} | {summarize(by_hand, 1e6)} | {summarize(off, 1e6)} | "
            f"{summarize(on, 1e6)} | {paired_ratio(on, off)} | {paired_ratio(off, by_hand)} | "
            f"{paired_ratio(on, by_hand)} | "
            f"{' | '.join(floor_ratios)} |"
        )
    write_section("depth" if device == "cpu" else f"depth-{device}", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
