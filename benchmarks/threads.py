"""Whether one torch thread is slower than torch's default for the studies' models: the article,
the digits MLP and CNN, and an MLP of 12 hidden layers of width 100, each through reluexp at its
preset's logging, at 1 thread and at torch's default (one per core).

    python -m benchmarks.threads [--repetitions 5]

In-process, alternating: each round runs every model at both counts; a paired ratio is a round's
time at the default over the same model's at 1 thread in the same round.
"""

import argparse

import torch

from benchmarks.common import (
    alternate,
    machine,
    paired_ratio,
    reluexp_loop,
    summarize,
    write_section,
)

# data=digits sets the lr, and the mlp's scaled weights (conf/data_model/digits_mlp.yaml).
DIGITS = ["data=digits"]
MODELS = {
    "article": ([], 1000),
    "digits MLP": (DIGITS, 300),
    "digits CNN": (["model=cnn", *DIGITS], 200),
    "MLP, 12 hidden": (
        [f"model.hidden=[{','.join(['100'] * 12)}]", "model.init=scaled", "lr=1e-5"],
        300,
    ),
}


def at_threads(threads: int, overrides: list[str], steps: int) -> float:
    torch.set_num_threads(threads)
    return reluexp_loop([*overrides, "device=cpu"], steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    default = torch.get_num_threads()
    candidates = {}
    for name, (overrides, steps) in MODELS.items():
        for threads in (1, default):
            candidates[f"{name} at {threads}"] = lambda t=threads, o=overrides, s=steps: at_threads(
                t, o, s
            )
    samples = alternate(candidates, args.repetitions)
    torch.set_num_threads(default)
    lines = [
        "## Threads: one torch thread against torch's default",
        "",
        f"`python -m benchmarks.threads`: {machine()} (the default). Each model through reluexp "
        f"at its preset's logging; medians (min–max) over {args.repetitions} alternating "
        "repetitions.",
        "",
        f"| model | 1 thread, µs/step | {default} threads, µs/step | {default} threads / 1 |",
        "| --- | --- | --- | --- |",
    ]
    for name in MODELS:
        one, many = samples[f"{name} at 1"], samples[f"{name} at {default}"]
        lines.append(
            f"| {name} | {summarize(one, 1e6)} | {summarize(many, 1e6)} | "
            f"{paired_ratio(many, one)} |"
        )
    write_section("threads", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
