"""Test-wide settings: hypothesis profiles, the GPU marker's skip and the slow tier.

Profiles: "ci" (fixed budget, derandomised, no deadline: what CI and the README run), "dev" (more
examples, random), "quick" (smoke). Choose with HYPOTHESIS_PROFILE; CI=true selects "ci".

Tiers: a plain `pytest` (the README's command) runs the default tier, a few minutes on 2 cores; tests marked `slow`
(every build of every kernel compiled, the GPU model refitted, the backwards emulated on the CPU) are skipped there
and run with `pytest -m slow` (.ci/run runs both). Tests marked `browser` (the built site in Chromium, offline:
tests/test_site_browser.py) are skipped there too and run with `pytest -m browser` (.ci/run installs the browser). Any -m expression chooses for itself (`-m "slow or not slow"`: all).
"""
import os

import pytest
from hypothesis import HealthCheck, settings

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=25, derandomize=True, print_blob=True, **_common)
settings.register_profile("dev", max_examples=100, **_common)
settings.register_profile("quick", max_examples=5, derandomize=True, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # torch missing or broken: no GPU tests
        return False


def pytest_collection_modifyitems(config, items):
    if not config.option.markexpr:  # no -m: the default tier
        slow = pytest.mark.skip(reason="slow tier: run it with pytest -m slow (.ci/run does)")
        browser = pytest.mark.skip(reason="browser tier: run it with pytest -m browser (.ci/run does)")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(slow)
            elif "browser" in item.keywords:
                item.add_marker(browser)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

