"""The digits study's training written by hand, as a user would without reluexp: the bare
baseline of benchmarks/digits.py. scikit-learn's bundled digits (8x8 images, a fifth held out),
batches of 128 in a new order each epoch, torch.relu, cross-entropy, w -= lr * w.grad at lr 0.1,
a validation pass (loss and accuracy) every 10 steps and at the last, the loss printed every
100. The model is the study's MLP (64-100-10, no biases) or its CNN (3x3 convolutions of 16 and
32 channels, the second of stride 2, then a linear layer). With `statistics`, every step also
computes what reluexp streams, bare (benchmarks/depth.py's floors).

    python benchmarks/digits_bare.py mlp|cnn [steps]
"""

import sys
import time

import torch
from sklearn.datasets import load_digits
from torch import nn

from reluexp.record.metrics import nonzeros

BATCH, LR, EVAL_EVERY = 128, 0.1, 10
# How a hand loop computes the statistics reluexp streams: kept for STREAM_BLOCK steps (what a
# stream must at least do, as reluexp's flushes do), or dropped as soon as computed (what the
# ops alone cost).
KEPT, DROPPED = "kept", "dropped"
STREAM_BLOCK = 256


def site_statistics(pre: torch.Tensor, post: torch.Tensor) -> list[torch.Tensor]:
    """What reluexp streams of an activation site, bare: its input's nonzeros (counted as reluexp
    counts them: metrics.nonzeros), and its output's largest and smallest value per unit over
    the batch (a channel of an image is one unit: its positions reduced too, after the
    batch)."""
    high, low = post.amax(0), post.amin(0)
    if post.dim() == 4:
        high, low = high.amax((1, 2)), low.amin((1, 2))
    return [nonzeros(pre), high, low]


def keep(kept: list[list[torch.Tensor]], computed: list[torch.Tensor], statistics: str) -> None:
    """A step's statistics kept until a block of STREAM_BLOCK steps is full, or dropped."""
    if statistics == KEPT:
        kept.append(computed)
        if len(kept) == STREAM_BLOCK:
            kept.clear()


def digits(generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    images, labels = load_digits(return_X_y=True)
    x = torch.tensor(images / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(labels)
    order = torch.randperm(len(x), generator=generator)
    held_out = round(0.2 * len(x))
    return x[order[held_out:]], y[order[held_out:]], x[order[:held_out]], y[order[:held_out]]


def network(name: str) -> nn.Module:
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(), nn.Linear(64, 100, bias=False), nn.ReLU(), nn.Linear(100, 10, bias=False)
        )
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(), nn.Flatten(), nn.Linear(32 * 4 * 4, 10),
    )  # fmt: skip


def train(name: str, steps: int, device: str = "cpu", statistics: str | None = None) -> float:
    """Seconds per step of the training loop (the data drawn on the CPU, then moved); with
    `statistics` (KEPT or DROPPED), each step also computes what reluexp streams: per ReLU its
    site_statistics, a dot product per gradient and per parameter."""
    generator = torch.Generator().manual_seed(42)
    x, y, x_val, y_val = (t.to(device) for t in digits(generator))
    net = network(name).to(device)
    params = list(net.parameters())
    flat = [p.detach().view(-1) for p in params]
    kept: list[list[torch.Tensor]] = []
    per_epoch = len(x) // BATCH
    start = time.perf_counter()
    for step in range(steps):
        index = step % per_epoch
        if index == 0:
            order = torch.randperm(len(x), generator=generator)
        chosen = order[index * BATCH : (index + 1) * BATCH].to(device)
        h, sites = x[chosen], []
        for layer in net:
            output = layer(h)
            if statistics and isinstance(layer, nn.ReLU):
                sites.append((h.detach(), output.detach()))
            h = output
        loss = nn.functional.cross_entropy(h, y[chosen])
        loss.backward()
        with torch.no_grad():
            computed = []
            if statistics:
                for pre, post in sites:
                    computed += site_statistics(pre, post)
                computed += [torch.dot(g, g) for g in (p.grad.view(-1) for p in params)]
            if step % EVAL_EVERY == 0 or step == steps - 1:
                logits = net(x_val)
                nn.functional.cross_entropy(logits, y_val)
                (logits.argmax(1) == y_val).double().mean()
            for p in params:
                p -= p.grad.mul_(LR)
                p.grad = None
            if statistics:
                computed += [torch.dot(v, v) for v in flat]
                keep(kept, computed, statistics)
        if step % 100 == 99:
            print(step, loss.item())
    loss.item()  # an accelerator's queued steps end here
    return (time.perf_counter() - start) / steps


if __name__ == "__main__":
    train(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 500)
