"""The large training step against this machine's matmul peak, with and without reluexp's malloc.

    python -m benchmarks.limit [--repetitions 3]

Each repetition starts two fresh processes, alternating (glibc's dynamic mmap threshold cannot
be restored in a process): one with glibc's default malloc, one with the settings of
`process.keep_freed_memory()`, as every CPU run of reluexp has. Each measures a 4096²
`torch.mm` and the large `torch.relu` training step (N=4096, D_in=1024, H=4096, D_out=10:
forward, backward, update), medians.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

from benchmarks.activations import SIZES, step_time
from benchmarks.common import machine, write_section
from reluexp.run.process import KEEP_FREED_MEMORY, set_malloc

MATMUL_N = 4096


def step_flops(size: tuple[int, int, int, int]) -> float:
    n, d_in, h, d_out = size
    # forward x@w1 and h@w2; backward dW1 = x^T dH, dW2 = h^T dY, dH = dY W2^T
    return 2 * n * d_in * h * 2 + 2 * n * h * d_out * 3


def matmul_gflops(repetitions: int = 3) -> float:
    a, b = torch.randn(MATMUL_N, MATMUL_N), torch.randn(MATMUL_N, MATMUL_N)
    a.mm(b)
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        a.mm(b)
        times.append(time.perf_counter() - start)
    return 2 * MATMUL_N**3 / statistics.median(times) / 1e9


def child(keep_freed: bool) -> None:
    """One process's measurement, as JSON on stdout."""
    if keep_freed:
        set_malloc(KEEP_FREED_MEMORY)
    size = SIZES["large"]
    step_time(torch.relu, size, 1)  # warm-up: first-touch of every buffer
    seconds = statistics.median(step_time(torch.relu, size, 1) for _ in range(3))
    peak = matmul_gflops()
    step_gflops = step_flops(size) / seconds / 1e9
    print(json.dumps({"step_s": seconds, "step_gflops": step_gflops, "peak": peak}))


def measure(keep_freed: bool) -> dict[str, float]:
    mode = "keep" if keep_freed else "default"
    command = [sys.executable, "-m", "benchmarks.limit", "--child", mode]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--child", choices=["keep", "default"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child == "keep")
        return
    runs: dict[str, list[dict[str, float]]] = {"glibc default": [], "keep_freed_memory": []}
    for _ in range(args.repetitions):
        runs["glibc default"].append(measure(keep_freed=False))
        runs["keep_freed_memory"].append(measure(keep_freed=True))
    size = SIZES["large"]
    lines = [
        "## Limit: the large step against the matmul peak",
        "",
        f"`python -m benchmarks.limit`: {machine()}. {args.repetitions} alternating pairs of fresh "
        f"processes; each measures a {MATMUL_N}² `torch.mm` (the peak) and the large `relu` step "
        f"({step_flops(size) / 1e9:.1f} GFLOP: N={size[0]}, D_in={size[1]}, H={size[2]}, "
        f"D_out={size[3]}), medians. The fraction is each process's step GFLOP/s over its "
        "own peak.",
        "",
        "| malloc | ms per step | step GFLOP/s | matmul peak GFLOP/s | fraction of peak "
        "(min–max) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, samples in runs.items():
        fractions = [s["step_gflops"] / s["peak"] for s in samples]
        lines.append(
            f"| {name} | {statistics.median(s['step_s'] for s in samples) * 1e3:.0f} "
            f"| {statistics.median(s['step_gflops'] for s in samples):.0f} "
            f"| {statistics.median(s['peak'] for s in samples):.0f} "
            f"| {statistics.median(fractions):.0%} ({min(fractions):.0%}–{max(fractions):.0%}) |"
        )
    lines += [
        "",
        "With glibc's defaults every activation-sized block (64 MiB here) is a fresh mmap, "
        "page-faulted in again at every step; reluexp's CPU runs keep freed blocks for reuse.",
    ]
    write_section("limit", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
