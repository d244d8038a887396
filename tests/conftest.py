"""Fixtures the test modules share: the article's loop run once per session, independently of
reluexp, with its own ReLU and with torch.relu (each step's loss, norms and counters)."""

import pytest
import torch

from tests.helpers import seed_loop


@pytest.fixture(scope="session")
def seed_steps() -> list[dict]:
    """The article's 500 steps with its ReLU (tests.helpers.SeedRelu); a shorter run is a
    prefix of them."""
    return seed_loop()


@pytest.fixture(scope="session")
def seed_steps_with_torch_relu() -> list[dict]:
    """The same 500 steps with torch.relu."""
    return seed_loop(relu=torch.relu)
