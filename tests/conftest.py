"""Test configuration: hypothesis profiles and shared fixtures."""

from __future__ import annotations

import os

# pytest-xdist runs one worker per core: each worker's torch and BLAS then use their share of the cores (spinning
# thread pools of two workers on two cores would take turns), set before numpy or torch is imported.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import numpy as np  # noqa: E402
import pytest
from hypothesis import HealthCheck, settings

# CI runs are derandomized so a red run can be replayed exactly.
settings.register_profile("ci", deadline=None, derandomize=True, max_examples=100,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
