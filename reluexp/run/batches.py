"""Each step's examples: the whole training set, or minibatches in a seeded order per epoch."""

import torch

from reluexp.run.data import Dataset


class Batches:
    """Each step's examples: the whole training set, or data.batch_size of them, in an order
    drawn anew each epoch (a remainder smaller than a batch is left out). The order of epoch e
    depends on the seed and e only, so a resumed run sees the batches it would have seen."""

    def __init__(self, data: Dataset, batch_size: int | None, seed: int):
        self.x, self.y, self.seed = data.x, data.y, seed
        self.size = len(data.x) if batch_size is None else min(batch_size, len(data.x))
        self.per_epoch = len(data.x) // self.size
        self.epoch, self.order = -1, torch.empty(0)

    def at(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.size == len(self.x):
            return self.x, self.y
        epoch, index = divmod(step, self.per_epoch)
        if epoch != self.epoch:
            generator = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % 2**63)
            self.order = torch.randperm(len(self.x), generator=generator).to(self.x.device)
            self.epoch = epoch
        chosen = self.order[index * self.size : (index + 1) * self.size]
        return self.x[chosen], self.y[chosen]
