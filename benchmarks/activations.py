"""Per-step time and saved-activation memory of every shipped activation.

    python -m benchmarks.activations [--repetitions 5] [--device cpu]

At the reference size (N=64, D_in=1000, H=100) and a large one (N=4096, D_in=1024, H=4096):
a bare training step (forward, backward, the article's update) per activation, alternating,
medians; and the bytes the step's graph keeps for backward (unique storages, via saved-tensor
hooks). Malloc as in reluexp's CPU runs (process.keep_freed_memory); the matmul limit is
benchmarks/limit.py.
"""

import argparse
import statistics
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from benchmarks.common import alternate, machine, summarize, write_section
from reluexp.functions.targets import resolve_activation
from reluexp.run.mlp import init_weights
from reluexp.run.process import KEEP_FREED_MEMORY, set_malloc

CONF = Path(__file__).resolve().parent.parent / "conf" / "activation"
SIZES = {"reference": (64, 1000, 100, 10), "large": (4096, 1024, 4096, 10)}


class FunctionFloor(torch.autograd.Function):
    """The least an autograd.Function costs: a clamp forward, saving nothing, and a backward
    that returns the gradient unchanged. Its gradient is wrong for a ReLU: timed, never trained."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class FloorSavingOutput(FunctionFloor):
    """The floor, plus saving the output and unpacking it in the backward (as lean_relu does)."""

    @staticmethod
    def forward(ctx, x):
        output = x.clamp(min=0)
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        _ = ctx.saved_tensors  # unpacked, as lean_relu's backward does
        return grad_output


class FloorNewGradient(FunctionFloor):
    """The floor, plus a backward that returns a new tensor from lean_relu's kernel (here on
    the gradient itself: a timing probe)."""

    @staticmethod
    def backward(ctx, grad_output):
        return torch.ops.aten.threshold_backward(grad_output, grad_output, 0)


# Not shipped: what lean_relu's time over torch.relu is made of.
PROBES = {
    "function_floor": FunctionFloor.apply,
    "floor_saving_output": FloorSavingOutput.apply,
    "floor_new_gradient": FloorNewGradient.apply,
}


def shipped(device: str) -> dict[str, object]:
    activations = {}
    for path in sorted(CONF.glob("*.yaml")):
        entry = OmegaConf.load(path)
        if entry.target is not None:
            # The Module a model places (an ActivationLayer, or the target's own Module).
            make = resolve_activation(entry.target, entry.get("params") or {})
            activations[entry.name] = make().to(device)
    return activations


def setup(size: tuple[int, int, int, int], device: str):
    """Drawn on the CPU, then moved (as a run's data and weights are)."""
    n, d_in, h, d_out = size
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, d_in, generator=generator), torch.randn(n, d_out, generator=generator)
    weights = init_weights([d_in, h, d_out], generator)
    return x.to(device), y.to(device), [w.to(device).requires_grad_() for w in weights]


def step_time(activation, size, steps: int, device: str) -> float:
    x, y, weights = setup(size, device)
    start = time.perf_counter()
    for _ in range(steps):
        y_pred = activation(x.mm(weights[0])).mm(weights[1])
        loss = (y_pred - y).pow(2).sum()
        loss.backward()
        with torch.no_grad():
            for w in weights:
                w -= 1e-9 * w.grad
                w.grad = None
    loss.item()  # an accelerator's queued steps end here
    return (time.perf_counter() - start) / steps


def saved_bytes(activation, size, device: str) -> int:
    """Bytes of distinct storages the step's graph saves for backward."""
    x, y, weights = setup(size, device)
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y_pred = activation(x.mm(weights[0])).mm(weights[1])
        (y_pred - y).pow(2).sum()
    return sum(storages.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps")
    args = parser.parse_args()
    device = args.device
    set_malloc(KEEP_FREED_MEMORY)
    activations = {**shipped(device), **PROBES}
    # An accelerator takes the large size in well under a millisecond per step: more steps, so
    # each repetition runs well past the launch and timer overhead.
    large_steps = 2 if device == "cpu" else 50
    lines = [
        "## Activations: step time and saved memory",
        "",
        f"`python -m benchmarks.activations --device {device}`: {machine(device)}. Bare "
        "training step (forward, backward, update), medians (min–max) over "
        f"{args.repetitions} alternating repetitions; "
        "ratios against `relu` (`torch.relu`) measured in the same run. Saved: bytes of the "
        "distinct storages the step's graph keeps for backward.",
    ]
    for label, size, steps, (unit, scale) in [
        ("reference", SIZES["reference"], 200, ("µs", 1e6)),
        ("large", SIZES["large"], large_steps, ("ms", 1e3)),
    ]:
        samples = alternate(
            {
                name: (lambda a=a, size=size, steps=steps: step_time(a, size, steps, device))
                for name, a in activations.items()
            },
            args.repetitions,
        )
        base = statistics.median(samples["relu"])
        base_saved = saved_bytes(activations["relu"], size, device)
        n, d_in, h, d_out = size
        lines += [
            "",
            f"### {label}: N={n}, D_in={d_in}, H={h}, D_out={d_out} ({steps} steps per repetition)",
            "",
            f"| activation | {unit} per step | ratio to relu | saved MiB | extra saved vs relu |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, times in samples.items():
            saved = saved_bytes(activations[name], size, device)
            extra = saved - base_saved
            extra_text = (
                "0"
                if extra == 0
                else f"{extra / 2**20:+.2f} MiB ({extra / (n * h):+.0f} B per N×H element)"
            )
            lines.append(
                f"| {name} | {summarize(times, scale)} | {statistics.median(times) / base:.3f} "
                f"| {saved / 2**20:.2f} | {extra_text} |"
            )
    lines += [
        "",
        "Not shipped, timed to show what lean_relu's time over `relu` is made of (their "
        "gradients are wrong for a ReLU): `function_floor`, a Function whose backward passes "
        "the gradient through unchanged, is what any autograd.Function costs over a built-in "
        "(Python calls in the forward; in the backward, the autograd engine calling back into "
        "Python); `floor_saving_output` adds saving the output and unpacking it; "
        "`floor_new_gradient` adds returning a new tensor from lean_relu's kernel "
        "(`threshold_backward`) instead of the incoming one. lean_relu does both.",
    ]
    write_section("activations" if device == "cpu" else f"activations-{device}", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
