"""Each step's examples: the whole training set, or minibatches in a seeded order per epoch,
augmented where asked."""

import torch
from torch.nn import functional

from reluexp.run.data import Dataset

# The standard augmentation of the CIFAR papers: images padded by this many zero pixels on each
# side, a random crop of the original size, a horizontal flip half of the time.
PAD = 4


def augmented(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A batch of images (N, C, H, W), each shifted by a random crop of its padded self and
    flipped left to right with probability 1/2: one gather on the batch's device, the draws
    from the CPU generator."""
    n, channels, height, width = x.shape
    shifts = torch.randint(0, 2 * PAD + 1, (2, n), generator=generator).to(x.device)
    flipped = (torch.rand(n, generator=generator) < 0.5).to(x.device)
    rows = shifts[0, :, None] + torch.arange(height, device=x.device)
    columns = shifts[1, :, None] + torch.arange(width, device=x.device)
    columns = torch.where(flipped[:, None], columns.flip(1), columns)
    padded = functional.pad(x, (PAD, PAD, PAD, PAD))
    examples = torch.arange(n, device=x.device)[:, None, None, None]
    planes = torch.arange(channels, device=x.device)[None, :, None, None]
    return padded[examples, planes, rows[:, None, :, None], columns[:, None, None, :]]


class Batches:
    """Each step's examples: the whole training set, or data.batch_size of them, in an order
    drawn anew each epoch (a remainder smaller than a batch is left out), augmented where
    asked. The order of epoch e depends on the seed and e only, a step's augmentation on the
    seed and the step only, so a resumed run sees the batches it would have seen."""

    def __init__(self, data: Dataset, batch_size: int | None, seed: int, augment: bool = False):
        self.data, self.seed, self.augment = data, seed, augment
        self.size = len(data.x) if batch_size is None else batch_size
        self.per_epoch = len(data.x) // self.size
        self.epoch, self.order = -1, torch.empty(0)
        # The whole set, unaugmented, is every step's batch: its inputs made once.
        self.every_step = (
            (data.inputs(data.x), data.y) if self.size == len(data.x) and not augment else None
        )

    def at(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.every_step is not None:
            return self.every_step
        x, y = self.chosen(step)
        x = self.data.inputs(x)
        if not self.augment:
            return x, y
        generator = torch.Generator().manual_seed((self.seed * 1_000_033 + step) % 2**63)
        return augmented(x, generator), y

    def chosen(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.data.x, self.data.y
        if self.size == len(x):
            return x, y
        epoch, index = divmod(step, self.per_epoch)
        if epoch != self.epoch:
            generator = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % 2**63)
            self.order = torch.randperm(len(x), generator=generator).to(x.device)
            self.epoch = epoch
        chosen = self.order[index * self.size : (index + 1) * self.size]
        return x[chosen], y[chosen]
