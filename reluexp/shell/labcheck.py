"""A sweep's lab checks as its process runs them (its end, or `python -m reluexp.report`): each
said on the terminal as it starts and with its verdict and time as it ends, bounded in time
(lab_seconds), ended at once by a stop; the sweep's summary is written whatever a Function does.
The time limit is a timer's signal (SIGALRM), which raises where the check is: a Function that
never returns in Python code, or sleeps, is ended there."""

import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reluexp.shell.session import Session
from reluexp.shell.stops import STOPS, Phase
from reluexp.sweeps.report.verdicts import NotChecked, function_name


class TimeUp(BaseException):
    """Raised where a lab check is when its time is up. A BaseException: no `except Exception`
    on its way (the lab's, a user's) takes it for the Function's error."""


class LabCheck(Phase):
    """A lab check of a sweep's Function: a stop raises where it is (it may never return); its
    timer's signal raises TimeUp there."""

    signals = (*STOPS, signal.SIGALRM)

    def meaning(self) -> str:
        return "lab check"

    def woken(self, signum: int) -> None:
        raise TimeUp


@dataclass
class BoundedCheck:
    """The lab's check of a sweep's Functions (a sweeps.report.verdicts.FunctionCheck), each for
    at most `seconds`, in the command's session. After a stop, no further Function is checked
    (`stopped_by` holds the signal: the command ends with 128 + it once its report is
    written)."""

    session: Session
    seconds: float
    quiet: bool = False
    stopped_by: int | None = None

    def __call__(self, function: dict[str, Any], directory: Path) -> object:
        from reluexp.lab.sweep import check_activation

        if self.stopped_by is not None:
            raise NotChecked("the command was stopped")
        if self.seconds <= 0:
            raise NotChecked("lab_seconds=0")
        self.say(f"reluexp: the lab checks {function_name(function)} ...", end="")
        phase, start = LabCheck(), time.perf_counter()
        try:
            with self.session.holding(phase):
                signal.setitimer(signal.ITIMER_REAL, self.seconds)
                try:
                    verdict = check_activation(function, directory)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except TimeUp:
            self.say(f" not checked: took longer than {self.seconds:g} s")
            raise NotChecked(f"took longer than {self.seconds:g} s") from None
        except KeyboardInterrupt:
            self.stopped_by = phase.signum or signal.SIGINT
            name = signal.Signals(self.stopped_by).name
            self.say(f" not checked: stopped by {name}")
            raise NotChecked(f"stopped by {name}") from None
        self.say(f" {verdict} ({time.perf_counter() - start:.1f} s)")
        return verdict

    def say(self, text: str, end: str = "\n") -> None:
        if not self.quiet:
            print(text, end=end, file=sys.stderr, flush=True)
