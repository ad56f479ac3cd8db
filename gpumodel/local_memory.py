"""The local-memory level: register spills of 255-register builds, written through L1 to the L2.

What a spill costs where (results/ncu_levels.csv, the SM-side crossbar counters):
    L1 -> L2  every byte a thread stores to its stack frame (STL) crosses to the L2, as a global store
              does: fa2_tc d = 128 writes exactly 16 B per thread per step + 16 B per thread per CTA
              beyond O and lse (272,629,760 B at N = 4096), d = 64 exactly 52 B per thread per masked
              step (causal 27,262,976 B; non-causal 0 B: that build spills only in its masked step).
    L2 -> L1  the frame is re-read (LDL) within the step that wrote it, from L1: the SMs' read bytes are
              0.99-1.00x of the model without any spill term, for every spilling build.
    DRAM      nothing the model counts: a frame slot is re-written every step, so its reuse distance is
              one step of the resident CTAs (their K/V tiles, a few MB) and it stays resident (dirty) in
              the L2; DRAM sees at most the frames of the resident threads once, written back when
              evicted after the kernel (<= 264 CTAs x 128 threads x 56 B = 1.9 MB, under 1% of any
              DRAM level here). The measured DRAM excess of SDPA flash at d = 128 is 80-90% reads, which a
              write-back cannot produce: results/gpu_model_known_gaps.json.

Bytes per thread, per build:
    ours (fa2_tc)   results/tc_spills.json (lab/spill_sites.py): the distinct frame bytes the STLs
                    of each region write, from the SASS of the NVRTC build, split into the masked step
                    (FA2 Alg. 1 lines 8-10 with the causal / Nk-tail mask), the unmasked step, and once
                    per CTA (prologue, epilogue). Builds with no spill stores (tc_resources.json) have none.
    SDPA flash      no SASS: one constant per build (head dim), bytes per thread per step, fitted on ONE
                    ncu row, N = 4096 non-causal (FIT_FILE, `python -m gpumodel.local_memory`); its causal
                    and N = 16384 rows are held out.
"""
from __future__ import annotations

import argparse
import json
from functools import lru_cache
from pathlib import Path

from counting.tiling import Tiling, cdiv
from gpumodel.builds import KernelDescriptor, build_data
from gpumodel import measured

ROOT = Path(__file__).resolve().parent.parent
SPILLS = ROOT / "results" / "tc_spills.json"
FIT_FILE = ROOT / "results" / "local_memory_fit.json"
TRAIN = dict(source="ncu_levels.csv", n=4096, causal=False)  # the one training row per SDPA flash build


@lru_cache(maxsize=1)
def _spill_rows() -> list:
    try:
        return json.loads(SPILLS.read_text())["rows"]
    except (OSError, KeyError, ValueError):
        return []


@lru_cache(maxsize=1)
def _fit() -> dict:
    try:
        return json.loads(FIT_FILE.read_text())
    except (OSError, ValueError):
        return {}


def ours(kernel: str, defines: dict) -> dict | None:
    """Bytes per thread (unmasked step, masked step, CTA) of a build, from tc_spills.json; None: not listed."""
    for row in _spill_rows():
        if row["kernel"] == kernel and row["defines"] == defines:
            return dict(local_step_bytes=row["stl_bytes_unmasked_step"],
                        local_masked_step_bytes=row["stl_bytes_masked_step"],
                        local_cta_bytes=row["stl_bytes_per_cta"],
                        local_source="results/tc_spills.json (SASS of the NVRTC build)")
    return None


def sdpa_flash(d: int) -> dict | None:
    per = _fit().get("sdpa_flash", {}).get(str(d))
    if per is None:
        return None
    return dict(local_step_bytes=per["bytes_per_thread_step"], local_masked_step_bytes=per["bytes_per_thread_step"],
                local_cta_bytes=0.0, local_source=f"results/local_memory_fit.json (fitted on {per['train']})")


def for_descriptor(data: dict, d: int, dtype: str) -> dict:
    """The local-memory fields of a descriptor's data (empty: the build spills nothing the model knows)."""
    if data["kernel"] == "sdpa_flash":
        return sdpa_flash(d) or {}
    if data["kernel"] == "fa2_tc":  # its options are its defines less HEAD_DIM and IS_BF16
        defs = dict(data.get("options", {}), HEAD_DIM=d, IS_BF16=int(dtype == "bf16"))
        return ours("fa2_tc", defs) or {}
    return {}


def steps(desc, n_q: int, n_k: int, causal: bool) -> tuple[int, int, int]:
    """(unmasked steps, masked steps, CTAs) of one (batch, head): a step is masked when its key block holds
    the Nk tail or a column past some row's causal limit (the kernel's need_mask)."""
    t = Tiling(n_q, n_k, desc.block_q, desc.block_k, causal)
    plain = masked = 0
    for i in range(t.t_r):
        m = t.masked_steps(i)
        masked += m
        plain += len(t.k_blocks(i)) - m
    return plain, masked, (1 if desc.grid == "heads" else cdiv(n_q, desc.block_q))


def local_bytes(desc, batch: int, heads: int, n_q: int, n_k: int, causal: bool) -> int:
    """Bytes the build's spill stores write from L1 to the L2 over the whole problem."""
    if not (desc.local_step_bytes or desc.local_masked_step_bytes or desc.local_cta_bytes):
        return 0
    plain, masked, ctas = steps(desc, n_q, n_k, causal)
    threads = 32 * desc.warps
    per_head = threads * (plain * desc.local_step_bytes + masked * desc.local_masked_step_bytes
                          + ctas * desc.local_cta_bytes)
    return round(batch * heads * per_head)


def is_train(cell: dict) -> bool:
    """The ncu rows the SDPA flash constants were fitted on (their L2 bytes are not held out)."""
    return (cell["kernel"] == "sdpa_flash" and cell["source"] == TRAIN["source"] and cell["n_q"] == TRAIN["n"]
            and cell["causal"] == TRAIN["causal"] and "time_s" not in cell)


def fit() -> dict:
    """SDPA flash's bytes per thread per step, per head dim, from its N = 4096 non-causal ncu row:
    (SM-side write bytes - O - lse) / (threads x steps). Its descriptor is the build's data alone (builds.py): the
    fields read here (tiling, warps, grid) are the launch's, not what describe() adds from this module's fit."""
    out = {}
    src = measured.RESULTS / TRAIN["source"]
    cells = measured.read_ncu_csv(src) if src.exists() else []
    for c in cells:
        if c["kernel"] != "sdpa_flash" or c["n_q"] != TRAIN["n"] or c["causal"] != TRAIN["causal"]:
            continue
        writes = c.get("l2_sm_write_bytes")
        if writes is None:
            continue
        desc = KernelDescriptor(**build_data("sdpa_flash", c["d"], c["dtype"], False, n_q=c["n_q"], n_k=c["n_k"]))
        item = 2
        out_bytes = c["batch"] * c["heads"] * c["n_q"] * (c["d"] * item + 4)
        plain, masked, _ = steps(desc, c["n_q"], c["n_k"], False)
        per = (writes - out_bytes) / (c["batch"] * c["heads"] * (plain + masked) * 32 * desc.warps)
        out[str(c["d"])] = dict(bytes_per_thread_step=round(per, 3),
                                train=f"{TRAIN['source']} sdpa_flash N={c['n_q']} d={c['d']} non-causal")
    return {"sdpa_flash": out, "script": "gpumodel/local_memory.py",
            "rule": "(l1tex__m_l1tex2xbar_write_bytes - O - lse) / (B·H x steps x threads) of the one training row"}


def main(argv=None) -> int:
    argparse.ArgumentParser(  # no options: --help (or a typo) says what would be overwritten instead of refitting
        prog="python -m gpumodel.local_memory",
        description=f"Refit SDPA flash's spill bytes per thread on its ncu row and write {FIT_FILE.relative_to(ROOT)}. "
                    "Takes no arguments.").parse_args(argv)
    result = fit()
    FIT_FILE.write_text(json.dumps(result, indent=1) + "\n")
    _fit.cache_clear()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
