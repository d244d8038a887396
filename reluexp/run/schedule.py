"""The learning rate at each step: the configured lr times the schedule's factor, a function of
the step alone (so a resumed run's lr is the uninterrupted run's, with nothing to save), the
same values as torch.optim.lr_scheduler's CosineAnnealingLR and MultiStepLR stepped once a
step, after a linear warmup."""

import bisect
import math

from reluexp.config import Config
from reluexp.options import Schedule


def scheduled(config: Config) -> bool:
    """The lr changes during the run (then it streams: tags.LR)."""
    return config.schedule.name != Schedule.constant or config.schedule.warmup > 0


def learning_rate(config: Config, step: int) -> float:
    """The lr of training step `step`: config.lr times the schedule's factor."""
    return config.lr * lr_factor(config, step)


def lr_factor(config: Config, step: int) -> float:
    """The factor of config.lr at `step` (0-based): during schedule.warmup steps it rises
    linearly to 1 ((step + 1) / warmup); then `constant` keeps 1, `cosine` falls along half a
    cosine to 0 at the last step's end, `step` multiplies by schedule.gamma at every milestone
    reached."""
    schedule = config.schedule
    if step < schedule.warmup:
        return (step + 1) / schedule.warmup
    if schedule.name == Schedule.cosine:
        span = config.steps - schedule.warmup
        return 0.5 * (1 + math.cos(math.pi * (step - schedule.warmup) / span))
    if schedule.name == Schedule.step:
        return schedule.gamma ** bisect.bisect_right(schedule.milestones, step)
    return 1.0
