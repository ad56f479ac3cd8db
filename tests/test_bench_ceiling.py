"""lab/tc_ceiling.cu: each loop issues as many of its instruction as lab/tc_ceiling.py counts (SASS from NVRTC and
nvdisasm, no GPU). Stop 25's first shared-load loop counted 16 loads per unrolled body where ptxas had merged repeated
ones into 9, and read 215 B per clock against the guide's 128; this is the check that would have caught it."""
from __future__ import annotations

import collections
import re
import subprocess

import pytest

from lab.tc_ceiling import SOURCE

CHAINS = 8


def _sass(defines: dict) -> str:
    pytest.importorskip("cuda.core")
    from lab import spill_sites
    from kernels import loader

    try:
        tool = spill_sites.nvdisasm()
    except SystemExit:
        pytest.skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)")
    cubin = loader.cubin_path(SOURCE, defines=defines, arch="sm_90a")
    return subprocess.run([tool, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout


def _loop_body(sass: str, kernel: str, op: str) -> int:
    """How many `op` the kernel's busiest basic block holds: its unrolled loop body."""
    section = next(s for s in re.split(r"\n\s*\.section\s+\.text\.", sass) if s.split(",")[0] == kernel)
    counts = [collections.Counter(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Za-z0-9_.]+)", block))[op]
              for block in re.split(r"\n\.L_x_\d+:", section)]
    return max(counts)


@pytest.mark.parametrize("kernel, op", [("lds_ceiling", "LDS.128"), ("ffma_ceiling", "FFMA"),
                                        ("mufu_ceiling", "MUFU.EX2"), ("mma_ceiling", "HMMA.16816.F32")])
def test_every_counted_instruction_is_issued(kernel, op):
    """CHAINS per iteration, unrolled by ptxas: the body holds a whole number of iterations' worth, none merged."""
    n = _loop_body(_sass({"CHAINS": CHAINS}), kernel, op)
    assert n >= CHAINS and n % CHAINS == 0, f"{kernel}: {n} {op} in its loop body, not a multiple of {CHAINS}"


@pytest.mark.parametrize("rs", [0, 1])
def test_wgmma_loop_issues_its_four_k_slices(rs):
    n = _loop_body(_sass({"WN": 128, "NWG": 2, "RS": rs, "WAIT": 1}), "wgmma_ceiling", "HGMMA.64x128x16.F32")
    assert n >= 4 and n % 4 == 0


def test_an_sms_rate_is_over_its_busy_interval():
    """Stop 28: lds_ceiling's two CTAs per SM ran one after the other (70 registers x 2 x 512 threads > 64K) and a
    rate over the longest CTA's own span read 251 B/clk, twice the datasheet's 128. Over each SM's interval from its
    first start to its last end, CTAs in turn give the true rate and are named; overlapping ones give the same rate."""
    from lab.tc_ceiling import sm_rates

    together = [(0, 1000, 0), (10, 1000, 0), (0, 990, 1), (5, 1000, 1)]
    in_turn = [(0, 1000, 0), (1000, 2000, 0), (0, 1000, 1), (1001, 2001, 1)]
    rates, rate, cycles, problems = sm_rates(together, 1000.0, sms=2, ctas_per_sm=2)
    assert rate == pytest.approx(2.0, rel=0.02) and problems == [] and cycles == 1000
    rates, rate, cycles, problems = sm_rates(in_turn, 1000.0, sms=2, ctas_per_sm=2)
    assert rate == pytest.approx(1.0, rel=0.01) and any("one after another" in p for p in problems)
    _, _, _, problems = sm_rates(together[:3], 1000.0, sms=2, ctas_per_sm=2)
    assert any("CTAs per SM [1, 2]" in p for p in problems)
    _, rate, _, problems = sm_rates(together + [(-1, -1, -1)], 1000.0, sms=2, ctas_per_sm=2)
    assert rate == pytest.approx(2.0, rel=0.02) and any("1 CTAs wrote no interval" in p for p in problems)


def test_the_shared_load_configs_fit_an_sm():
    """Every lds config's warps per SM fit the kernel's registers (the launch of 32 warps failed in stop 28)."""
    import re as _re

    from lab.tc_ceiling import OTHER

    ptxas = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-o", "/dev/null", f"-DCHAINS={CHAINS}", "-DWN=128",
                            "-DNWG=2", "-DRS=0", "-DWAIT=1", "-Xptxas", "-v", str(SOURCE)],
                           capture_output=True, text=True)
    if ptxas.returncode != 0:
        pytest.skip("no nvcc")
    regs = int(_re.search(r"Compiling entry function 'lds_ceiling'.*?Used (\d+) registers", ptxas.stderr, _re.S)[1])
    for cfg in (c for c in OTHER if c["PIPE"] == "lds"):
        assert regs * 32 * cfg["WARPS"] * cfg["CTAS"] <= 65536, (cfg, regs)


def test_ncu_levels_target_takes_builds_by_config_and_refuses_unknown_names(monkeypatch, capsys):
    """NCU_LEVELS_KERNELS: commas inside [...] or {...} belong to one name (a v_once_tc placement, a JSON config); a
    name that is neither a known kernel nor fa2_tc{...} / fa2_wgmma{...} is refused before any GPU work (stop 28)."""
    from lab import ncu_levels_target as t

    monkeypatch.setenv("NCU_LEVELS_KERNELS", 'fa2_tc{"BLOCK_N":32,"MIN_BLOCKS":2},v_once_tc[hbm,lazy],sdpa_flash')
    monkeypatch.setenv("NCU_LEVELS_SHAPES", "16384x128,65536x128")
    shapes, kernels, causal = t._overrides()
    assert shapes == [(16384, 128), (65536, 128)] and not causal
    assert kernels == ['fa2_tc{"BLOCK_N":32,"MIN_BLOCKS":2}', "v_once_tc[hbm,lazy]", "sdpa_flash"]
    monkeypatch.setenv("NCU_LEVELS_KERNELS", "fa2_tc,nosuch")
    with pytest.raises(SystemExit, match="unknown kernel\\(s\\) nosuch"):
        t.main()
