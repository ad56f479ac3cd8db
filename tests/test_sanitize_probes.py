"""bench/sanitize.py counts cuda.bindings' failed cuGetProcAddress lookups apart from real errors (docs/usage.md,
"compute-sanitizer"): a synthetic log in the sanitizer's format."""
from __future__ import annotations

from bench import sanitize

PROBE = ('========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to "named symbol not found" on CUDA API call to '
         'cuGetProcAddress_v2.\n=========     Saved host backtrace up to driver entry point at error\n')
OTHER = ('========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA API call to '
         'cuLaunchKernel.\n')
INVALID = "========= Invalid __global__ read of size 4 bytes\n"


def test_lookups_are_counted_apart_and_other_api_errors_count():
    log = (PROBE * 34 + f"{sanitize.MARK}fa2_wgmma\n" + PROBE + OTHER + INVALID
           + "========= ERROR SUMMARY: 37 errors\n")
    assert sanitize.driver_probes(log) == 35
    total, per_kernel = sanitize.count_errors(log, "memcheck")
    assert total == 2 and per_kernel == {"fa2_wgmma": 2}


def test_a_clean_run_is_zero():
    total, per_kernel = sanitize.count_errors(PROBE * 34 + "========= ERROR SUMMARY: 34 errors\n", "memcheck")
    assert total == 0 and per_kernel == {}
