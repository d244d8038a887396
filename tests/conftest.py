"""Fixtures the test modules share: the article's loop run once per session, independently of
reluexp, with its own ReLU and with torch.relu (each step's loss, norms and counters); and the
process state every test starts from."""

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch

from reluexp import hydra_glue
from reluexp.config import Config
from reluexp.validation import task_config
from tests.helpers import logger_settings, restore_loggers, seed_loop

# pytest-xdist's workers share the cores: each worker's torch, and every process it starts
# (OMP_NUM_THREADS, which torch reads as it starts), runs on its share, as a parallel sweep's
# jobs do, never oversubscribing them (two workers at torch's default of every core ran a
# convolution several times slower).
# (Only in a worker: the controlling process, whose environment the workers inherit, and a
# run with -n 0 keep torch's default, as a user's OMP_NUM_THREADS is kept.)
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // WORKERS))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# A suite started in the background (CI under nohup, `pytest &`) inherits SIGINT ignored, and so
# would every process it starts, which then keeps ignoring it as reluexp must
# (tests/test_signals.py): the tests that send Ctrl-C need it at its default.
signal.signal(signal.SIGINT, signal.default_int_handler)
# torch's own thread count, which `python -m reluexp` runs with: the independent loop runs with
# it too, whatever a test in this process set (BLAS rounds differently at another count).
DEFAULT_THREADS = torch.get_num_threads()


@pytest.fixture(autouse=True)
def loggers_as_they_were() -> Iterator[None]:
    """Each test's loggers put back after it: a command called in the test configures them
    (Hydra's job logging: its file, the captured streams), and a later test on the same worker
    would log into what is gone."""
    saved = logger_settings()
    yield
    restore_loggers(saved)


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
