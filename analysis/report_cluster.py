"""Where each v_once placement applies, for `fa-traffic report` (issue 18 item 2): torch-free.

For a shape, the f row of a Br = 64 Q block goes
    sram      one thread block holds it: v_once_tc's own plan (kernels/v_once_tc.py, the kernel the report
              runs for v_once) fits the 227 KB a block may have
    cluster   else the smallest thread-block cluster of CS CTAs whose shared memories hold it
              (counting.cluster.plan: the cluster kernel's budget; CS <= 8 portable, 16 non-portable)
    hbm       else no cluster holds it: the row spills (placement "auto" does this)
The report prints one caption line of these per shape, and refuses (exit 2, one line) an explicit
--placement cluster at a shape no cluster holds.
"""
from __future__ import annotations

from counting import cluster
from counting.cluster import check_cluster_holds, most_keys  # noqa: F401  (the report's names)


def _one_cta_holds(n_q: int, n_k: int, d: int, causal: bool) -> bool:
    try:
        from kernels import v_once_tc  # in the try: a launcher module may be absent (ImportError), as KERNELS allows

        return bool(v_once_tc.plan(n_q, n_k, d, causal=causal, placement="auto")["fits_sram"])
    except (ValueError, ImportError):  # a head dim it does not build, or an f row past even the spill
        p = cluster.plan(n_k, d)
        return p is not None and p.cluster_size == 1


def applies(n_q: int, n_k: int, d: int, causal: bool = False, itemsize: int = 2) -> tuple[str, int | None]:
    """("sram", 1), ("cluster", CS) or ("hbm", None): where the f row of this shape lives on an H200."""
    if _one_cta_holds(n_q, n_k, d, causal):
        return "sram", 1
    p = cluster.plan(n_k, d, itemsize=itemsize)
    return ("cluster", p.cluster_size) if p is not None else ("hbm", None)


def label(where: tuple[str, int | None]) -> str:
    kind, cs = where
    if kind != "cluster":
        return kind
    return f"cluster ({cs} CTAs{'' if cs <= cluster.PORTABLE_MAX else ', non-portable'})"


def caption_line(problems, causal: bool = False, itemsize: int = 2) -> str:
    """'v_once f row (Br = 64, H200): N=1024 d=64 sram; N=16384 d=64 cluster (8 CTAs); ...'."""
    cells = []
    for n_q, n_k, d in problems:
        n = f"{n_q}" if n_q == n_k else f"{n_q}×{n_k}"
        cells.append(f"N={n} d={d} {label(applies(n_q, n_k, d, causal, itemsize))}")
    limits = ", ".join(f"d={d}: {most_keys(d, itemsize=itemsize):,} keys"
                       for d in sorted({d for _, _, d in problems}))
    return (f"v_once f row of a 64-row Q block (H200, 227 KB per block): {'; '.join(cells)}.\n"
            f"(sram = one thread block, cluster = --placement cluster's CTAs (kernel v_once_cluster), hbm = spilled; "
            f"a 16-CTA cluster holds up to {limits}; DSMEM = the cluster's two reductions through distributed "
            f"shared memory, no L2 or DRAM byte)")
