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


def test_cache_key_hashes_the_kernels_headers_for_a_source_outside_kernels_cuda(tmp_path, monkeypatch):
    """A lab/cuda/ source includes kernels/cuda/*.cuh by relative path: editing one must change its cache key
    (else a stale cubin is loaded); a kernels/cuda source's key is what it was (its folder is hashed once)."""
    from kernels import loader

    kdir = tmp_path / "kernels_cuda"
    kdir.mkdir()
    (kdir / "pipe.cuh").write_text("// v1\n")
    lab = tmp_path / "lab_cuda"
    lab.mkdir()
    src = lab / "k.cu"
    src.write_text('#include "../kernels_cuda/pipe.cuh"\n')
    monkeypatch.setattr(loader, "CUDA_DIR", kdir)
    monkeypatch.setattr(loader, "nvrtc_version", lambda: (13, 0))
    before = loader._cache_key(src, ["-arch=sm_90a"])
    (kdir / "pipe.cuh").write_text("// v2\n")
    assert loader._cache_key(src, ["-arch=sm_90a"]) != before
    shipped = kdir / "s.cu"
    shipped.write_text("//\n")
    monkeypatch.setattr(loader, "CUDA_DIR", tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    alone = loader._cache_key(shipped, ["-arch=sm_90a"])
    monkeypatch.setattr(loader, "CUDA_DIR", kdir)
    assert loader._cache_key(shipped, ["-arch=sm_90a"]) == alone
