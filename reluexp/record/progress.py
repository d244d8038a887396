"""Progress of one run: a live line on an interactive terminal, plain log lines elsewhere."""

import logging
import math
import os
import sys
import time
from collections.abc import Callable

log = logging.getLogger("reluexp")

# A terminal line is redrawn this often; a log (CI, SLURM) gets a line this often.
REDRAW_SECONDS = 0.2
LOG_SECONDS = 30.0
# A run this many times slower than over its first steps, on a machine with more runnable
# processes than cores, says that the machine is why (its steps/s are not the code's).
SLOWDOWN = 2.0


def pace(rate: float) -> str:
    """Steps a second as a person reads them: `240 steps/s`, or under one a second, `2.5 s/step`
    (a ResNet on a CPU read `0 steps/s`)."""
    return f"{rate:.0f} steps/s" if rate >= 1 or rate <= 0 else f"{1 / rate:.3g} s/step"


def duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def busy_load() -> str | None:
    """`load 5.2 on 2 cores` where the machine has more runnable processes than cores; else
    None."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    return f"load {load:.1f} on {cores} cores" if load > cores else None


class Progress:
    """Steps, latest flushed loss, steps/s and ETA; costs one clock read per step when idle."""

    def __init__(
        self,
        total: int,
        start_step: int,
        loss: Callable[[], float | None],
        enabled: bool,
        threads: int = 1,
    ):
        """loss: the latest flushed loss, None before the first flush. threads: torch's
        intra-op threads for the run, which a busy machine's first line names."""
        self.total = total
        self.threads = threads
        self.start_step = start_step
        self.loss = loss
        self.enabled = enabled and total > start_step
        self.interactive = sys.stderr.isatty()
        self.started = time.perf_counter()
        self.next_at = self.started + (REDRAW_SECONDS if self.interactive else LOG_SECONDS)
        # The steps/s since the line before, and over the first line's steps.
        self.last = (start_step, self.started)
        self.first_rate: float | None = None
        # On a terminal the busy note is said once as a log line too: a redraw shows it for
        # 0.2 s, and the live line never reaches the run's log.
        self.busy_said = False

    def update(self, step: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now < self.next_at:
            return
        rate = (step - self.start_step) / (now - self.started)
        eta = (self.total - step) / rate if rate > 0 else math.inf
        loss = self.loss()
        shown = "" if loss is None else f" loss {loss:.4g}"
        text = f"{step}/{self.total}{shown} {pace(rate)} ETA {duration(eta)}"
        busy = self.busy_machine(step, now)
        if busy and self.interactive and not self.busy_said:
            self.busy_said = True
            self.close()  # the live line, cleared for the log line
            log.warning("at step %s%s", step, busy)
        text += busy
        if self.interactive:
            width = 24
            filled = width * step // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}\033[K")
            sys.stderr.flush()
            self.next_at = now + REDRAW_SECONDS
        else:
            log.info("progress: step %s", text)
            self.next_at = now + LOG_SECONDS

    def busy_machine(self, step: int, now: float) -> str:
        """` (... the machine is busy, load 5.2 on 2 cores)` where the steps since the last
        line ran SLOWDOWN times slower than the first line's and the machine has more runnable
        processes than cores; else ''."""
        last_step, last_time = self.last
        self.last = (step, now)
        recent = (step - last_step) / (now - last_time) if now > last_time else math.inf
        if self.first_rate is None:
            self.first_rate = recent
            return self.busy_from_the_start()
        busy = busy_load() if recent * SLOWDOWN <= self.first_rate else None
        if busy is None:
            return ""
        return (
            f" ({self.first_rate / recent:.0f}x slower than its first steps: the machine is "
            f"busy, {busy})"
        )

    def busy_from_the_start(self) -> str:
        """The first line's note where the machine is busy as the run starts and torch runs
        several threads, which spin and wait on each other when other work holds the cores
        (a model of the digits took 70 s at 2 threads, 6 s at 1, under load 4)."""
        busy = busy_load() if self.threads > 1 else None
        if busy is None:
            return ""
        return (
            f" (the machine is busy, {busy}: torch's {self.threads} threads wait on each other "
            "when the cores are taken; threads=1 may run faster)"
        )

    def close(self) -> None:
        if self.enabled and self.interactive:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
