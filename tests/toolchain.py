"""Whether this machine can compile CUDA without a GPU (NVRTC and the CUDA headers kernels.loader finds): the compile
tests' one probe. TOOLCHAIN is None when it can, else why not; needs_nvrtc skips a test with that reason."""
from __future__ import annotations

import pytest

from kernels import loader

try:
    loader.nvrtc_version()
    loader.cuda_include_dirs()
    TOOLCHAIN = None
except loader.ToolchainMissing as exc:  # genuinely absent NVRTC or CUDA headers
    TOOLCHAIN = str(exc)

needs_nvrtc = pytest.mark.skipif(TOOLCHAIN is not None, reason=f"no NVRTC toolchain: {TOOLCHAIN}")
