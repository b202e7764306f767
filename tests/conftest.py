"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from src.core.logging import reset_logging
from src.custom import CUSTOM_ALGOS, CUSTOM_ENVS


@pytest.fixture(autouse=True)
def _fresh_shared_logger() -> Iterator[None]:
    """Start and end every test without sinks, so no test sees another's log configuration."""
    reset_logging()
    yield
    reset_logging()


@pytest.fixture(autouse=True)
def _no_registrations_of_other_tests() -> Iterator[None]:
    """Start and end every test with no task or algorithm given by import path registered, so
    a test sees only what it (or its module's fixtures) registered."""
    CUSTOM_ENVS.clear()
    CUSTOM_ALGOS.clear()
    yield
    CUSTOM_ENVS.clear()
    CUSTOM_ALGOS.clear()
