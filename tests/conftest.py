"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from src.core.logging import reset_logging


@pytest.fixture(autouse=True)
def _fresh_shared_logger() -> Iterator[None]:
    """Start and end every test without sinks, so no test sees another's log configuration."""
    reset_logging()
    yield
    reset_logging()
