"""Fixtures the test modules share: the article's loop run once per session, independently of
reluexp, with its own ReLU and with torch.relu (each step's loss, norms and counters); and the
process state every test starts from."""

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch

from reluexp import hydra_glue
from reluexp.config import Config
from reluexp.validation import task_config
from tests.helpers import seed_loop

# A suite started in the background (CI under nohup, `pytest &`) inherits SIGINT ignored, and so
# would every process it starts, which then keeps ignoring it as reluexp must
# (tests/test_signals.py): the tests that send Ctrl-C need it at its default.
signal.signal(signal.SIGINT, signal.default_int_handler)
# torch's own thread count, which `python -m reluexp` runs with: the independent loop runs with
# it too, whatever a test in this process set (BLAS rounds differently at another count).
DEFAULT_THREADS = torch.get_num_threads()


@pytest.fixture
def composed() -> Callable[..., Config]:
    """The Config `python -m reluexp <overrides>` runs: composed by Hydra from conf/ with the
    overrides, typed and normalized, without running anything."""

    def compose(*overrides: str) -> Config:
        return task_config(hydra_glue.compose_config(list(overrides)))

    return compose


@pytest.fixture(scope="session")
def seed_steps() -> list[dict]:
    """The article's 500 steps with its ReLU (tests.helpers.SeedRelu); a shorter run is a
    prefix of them."""
    with torch_threads(DEFAULT_THREADS):
        return seed_loop()


@pytest.fixture(scope="session")
def seed_steps_with_torch_relu() -> list[dict]:
    """The same 500 steps with torch.relu."""
    with torch_threads(DEFAULT_THREADS):
        return seed_loop(relu=torch.relu)


@pytest.fixture(scope="session")
def seed_steps_on_one_thread() -> tuple[list[dict], list[dict]]:
    """The article's first 200 steps with its ReLU and with torch.relu on one torch thread, as
    the lab trains its runs (reluexp.check's default)."""
    with torch_threads(1):
        return seed_loop(steps=200), seed_loop(relu=torch.relu, steps=200)


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
