"""What a ResNet-20 step of the CIFAR study costs through reluexp against the same training
written by hand: CIFAR-10-shaped data (random images written as the binary version, 3x32x32,
10 classes), batches of 128 with the padded-crop-and-flip augmentation, torch.relu, SGD with
momentum 0.9 and weight decay 1e-4 on the weights, the step schedule, cross-entropy; reluexp
at the preset's logging (every 100 steps) and streaming every step.

    python -m benchmarks.resnet [--repetitions 3] [--steps 10] [--threads N] [--device cpu]

In-process, alternating; paired ratios are a round's time over the hand-written loop's.
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from benchmarks.common import (
    alternate,
    machine,
    paired_ratio,
    reluexp_loop,
    summarize,
    write_section,
)
from reluexp.run.batches import augmented
from reluexp.run.cifar import CIFAR10, read_cifar
from reluexp.run.process import keep_freed_memory
from reluexp.run.resnet import ResNet
from tests.helpers import write_cifar

BATCH, LR = 128, 0.1


def overrides(root: Path, device: str) -> list[str]:
    return [
        "model=resnet",
        "data=cifar10",
        f"data.root={root}",
        "data.augment=true",
        "activation=relu",
        "optimizer=sgd",
        "optimizer.momentum=0.9",
        "optimizer.weight_decay=1e-4",
        "schedule=step",
        "schedule.milestones=[32000,48000]",
        f"lr={LR}",
        "eval_every=1000000",
        f"device={device}",
    ]


def by_hand(root: Path, steps: int, device: str) -> float:
    """The same training as a user writes it: torch's SGD with two parameter groups, a new
    batch order each epoch, the augmentation, a validation pass (loss, accuracy) at the first
    and the last step as reluexp's loop makes at this eval_every, no other metrics."""
    pixels, y, val_pixels, y_val = (t.to(device) for t in read_cifar(str(root), CIFAR10))
    # Normalized once, kept as float32: the hand loop's data costs nothing per step.
    scaled = pixels.float() / 255
    mean = scaled.mean(dim=(0, 2, 3), keepdim=True)
    std = scaled.std(dim=(0, 2, 3), keepdim=True)
    x, x_val = (scaled - mean) / std, (val_pixels.float() / 255 - mean) / std
    torch.manual_seed(0)
    net = ResNet((3, 32, 32), 10, 20, [16, 32, 64], nn.ReLU).to(device)
    weights = [p for p in net.parameters() if p.dim() >= 2]
    others = [p for p in net.parameters() if p.dim() < 2]
    optimizer = torch.optim.SGD(
        [{"params": weights, "weight_decay": 1e-4}, {"params": others, "weight_decay": 0.0}],
        lr=LR,
        momentum=0.9,
    )
    generator = torch.Generator().manual_seed(0)
    per_epoch = len(x) // BATCH
    with keep_freed_memory():
        start = time.perf_counter()
        for step in range(steps):
            if step % per_epoch == 0:
                order = torch.randperm(len(x), generator=generator).to(device)
            chosen = order[(step % per_epoch) * BATCH : (step % per_epoch + 1) * BATCH]
            loss = nn.functional.cross_entropy(net(augmented(x[chosen], generator)), y[chosen])
            loss.backward()
            if step in (0, steps - 1):
                net.eval()
                with torch.no_grad():
                    logits = net(x_val)
                    nn.functional.cross_entropy(logits, y_val)
                    (logits.argmax(1) == y_val).double().mean()
                net.train()
            optimizer.step()
            optimizer.zero_grad()
        loss.item()
        return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory) / "cifar"
        write_cifar(root, CIFAR10, binary=True, per_batch=512)
        given = overrides(root, args.device)
        samples = alternate(
            {
                "by hand": lambda: by_hand(root, args.steps, args.device),
                "preset's logging": lambda: reluexp_loop([*given, "log_every=100"], args.steps),
                "every step streamed": lambda: reluexp_loop(given, args.steps, 1),
            },
            args.repetitions,
        )
    hand = samples["by hand"]
    lines = [
        "## ResNet-20: a step of the CIFAR study",
        "",
        f"`python -m benchmarks.resnet --device {args.device}`: {machine(args.device)}. "
        f"ResNet-20 on CIFAR-10-shaped data, batches of 128 with augmentation, SGD with "
        f"momentum and weight decay; medians (min–max) over {args.repetitions} alternating "
        f"repetitions of {args.steps} steps.",
        "",
        "| loop | ms/step | / by hand |",
        "| --- | --- | --- |",
        f"| by hand | {summarize(hand, 1e3)} | 1 |",
    ]
    for name in ("preset's logging", "every step streamed"):
        lines.append(
            f"| reluexp, {name} | {summarize(samples[name], 1e3)} | "
            f"{paired_ratio(samples[name], hand)} |"
        )
    section = "resnet" if args.device == "cpu" else f"resnet-{args.device}"
    write_section(section, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
