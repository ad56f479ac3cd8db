"""kernels.loader on the CPU (tests/test_loader_gpu.py has the GPU side)."""
from __future__ import annotations

import pytest


def test_require_hopper_names_the_gpu_and_the_fallback_and_caches_a_pass(monkeypatch):
    """The sm_90a launchers' one device check (fa2_wgmma, its backward, v_once_cluster)."""
    import types

    import torch

    from kernels import loader

    dev = types.SimpleNamespace(index=12345)
    monkeypatch.setattr(loader, "_HOPPER", set())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(RuntimeError, match=r"^fa2_wgmma needs X; .* is 8\.x -- use kernels\.fa2_tc there$"):
        loader.require_hopper(dev, "fa2_wgmma needs X", "fa2_tc")
    with pytest.raises(RuntimeError, match=r"is 8\.x$"):
        loader.require_hopper(dev, "the backward needs X")
    calls = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: calls.append(1) or (9, 0))
    loader.require_hopper(dev, "x")
    loader.require_hopper(dev, "x")
    assert calls == [1]  # asked once per device
