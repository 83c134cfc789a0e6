"""Fixtures for the dflash tests."""

import pytest

torch = pytest.importorskip("torch")  # the training tests need it; the diagnostics do not

from dflash import TargetModel

from .helpers import make_target


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def target() -> TargetModel:
    return make_target()
