"""Progress of one run: a live line on an interactive terminal, plain log lines elsewhere."""

import logging
import math
import sys
import time
from collections.abc import Callable

log = logging.getLogger("reluexp")

# A terminal line is redrawn this often; a log (CI, SLURM) gets a line this often.
REDRAW_SECONDS = 0.2
LOG_SECONDS = 30.0


def duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Progress:
    """Steps, latest flushed loss, steps/s and ETA; costs one clock read per step when idle."""

    def __init__(self, total: int, start_step: int, loss: Callable[[], float], enabled: bool):
        self.total = total
        self.start_step = start_step
        self.loss = loss
        self.enabled = enabled and total > start_step
        self.interactive = sys.stderr.isatty()
        self.started = time.perf_counter()
        self.next_at = self.started + (REDRAW_SECONDS if self.interactive else LOG_SECONDS)

    def update(self, step: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now < self.next_at:
            return
        rate = (step - self.start_step) / (now - self.started)
        eta = (self.total - step) / rate if rate > 0 else math.inf
        text = f"{step}/{self.total} loss {self.loss():.4g} {rate:.0f} steps/s ETA {duration(eta)}"
        if self.interactive:
            width = 24
            filled = width * step // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}\033[K")
            sys.stderr.flush()
            self.next_at = now + REDRAW_SECONDS
        else:
            log.info("progress: step %s", text)
            self.next_at = now + LOG_SECONDS

    def close(self) -> None:
        if self.enabled and self.interactive:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
