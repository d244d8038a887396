"""The seed's ReLU as a run's activation, for tests of stops at a known step whatever the
machine's load: in a process whose environment asks for it, it signals its own process at a
given step (as a signal from outside would land there), or slows every step after one (so
that a signal from outside lands while the run trains). A process without either trains as
`activation=myrelu` does, number for number."""

import os
import signal
import time

from reluexp.functions import MyReLU

TARGET = "activation.target=tests.stops.StopsItself"
# "SIGINT@300": the process sends itself SIGINT in step 300's backward (its 301st call: a model
# with one activation site); "SIGTERM,SIGTERM@300" sends both, in order.
STOP = "RELUEXP_TEST_STOP"
# "0.01@200": every backward from step 200 on sleeps 0.01 s.
SLOW = "RELUEXP_TEST_SLOW"


def stopping(signals: str, step: int) -> dict[str, str]:
    """The environment of a process whose run stops itself at `step`."""
    return {**os.environ, STOP: f"{signals}@{step}", "PYTHONPATH": repo_root()}


def slowed(seconds: float, step: int) -> dict[str, str]:
    """The environment of a process whose run slows to `seconds` a step from `step` on."""
    return {**os.environ, SLOW: f"{seconds}@{step}", "PYTHONPATH": repo_root()}


def repo_root() -> str:
    """Where `tests.stops` imports from, whatever the process's working directory."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class StopsItself(MyReLU):
    """The seed's Function; its backward counts its calls and does what the environment says."""

    calls = 0

    @staticmethod
    def backward(ctx, grad_output):
        step = StopsItself.calls
        StopsItself.calls += 1
        if STOP in os.environ:
            names, at = os.environ[STOP].split("@")
            if step == int(at):
                for name in names.split(","):
                    os.kill(os.getpid(), getattr(signal, name))
        if SLOW in os.environ:
            seconds, at = os.environ[SLOW].split("@")
            if step >= int(at):
                time.sleep(float(seconds))
        return MyReLU.backward(ctx, grad_output)
