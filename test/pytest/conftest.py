"""Shared pytest fixtures: small graph modules and a seeded RNG."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    """A numpy Generator with a fixed seed."""
    return np.random.default_rng(0)
