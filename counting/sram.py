"""The on-chip working sets the references declare (require_sram), as torch-free integer functions.

`variants/<name>.py` re-export these as `sram_bytes` (the one source of truth), and the closed forms
and the CLI import them from here, so the report path never imports torch. Sizes in bytes; tiles of
Q, K, V, f in the input dtype (itemsize), S/P tiles, accumulators and statistics in float32.
"""
from __future__ import annotations

from counting.cluster import reference_plan

F32 = 4


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def naive_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal=False) -> int:
    """The largest of the three passes' working sets."""
    br, bc = min(block_q, n_q), min(block_k, n_k)
    pass1 = (br * d + bc * d) * itemsize + br * bc * F32  # Q_i, K_j tiles; S tile
    pass2 = n_k * F32  # one row of S/P
    pass3 = (br * bc + bc * d) * itemsize + br * d * F32  # P tile, V_j tile; O_i accumulator
    return max(pass1, pass2, pass3)


def fa1_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal=False) -> int:
    """On chip: K_j, V_j, Q_i, O_i tiles; the S/P tile and ℓ_i, m_i, ℓ_i^new, m_i^new in float32."""
    br, bc = min(block_q, n_q), min(block_k, n_k)
    return (2 * bc * d + 2 * br * d) * itemsize + (br * bc + 4 * br) * F32


def fa2_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal=False) -> int:
    """On-chip working set: Q_i, K_j, V_j tiles; S/P tile, O_i accumulator, ℓ_i, m_i in float32."""
    br, bc = min(block_q, n_q), min(block_k, n_k)
    return (br * d + 2 * bc * d) * itemsize + (br * bc + br * d + 2 * br) * F32


# "cluster" (issue 18): the f row split over a thread-block cluster's shared memories (counting.cluster);
# "auto" still chooses between one CTA's smem and HBM only (what one thread block does)
V_ONCE_PLACEMENTS = ("auto", "sram", "hbm", "cluster")
V_ONCE_RESCALES = ("eager", "lazy")


def check_v_once_options(placement, rescale):
    if placement not in V_ONCE_PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose one of {', '.join(V_ONCE_PLACEMENTS)}")
    if rescale not in V_ONCE_RESCALES:
        raise ValueError(f"unknown rescale {rescale!r}; choose one of {', '.join(V_ONCE_RESCALES)}")


def v_once_valid(placement, rescale) -> bool:
    """Whether the pair is a v_once configuration: the cluster keeps each f block relative to its own
    max m_ij and scales it once by the cluster's final max (lazy by construction); eager rescaling would
    rewrite other CTAs' slices through DSMEM at every new max, which no kernel here does."""
    return not (placement == "cluster" and rescale != "lazy")


def check_v_once_pair(placement, rescale):
    check_v_once_options(placement, rescale)
    if not v_once_valid(placement, rescale):
        raise ValueError(f"placement 'cluster' rescales lazily by construction (each f block once, by the "
                         f"cluster's final max); use rescale='lazy', not {rescale!r}")


def v_once_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal=False, *, placement="auto",
                      rescale="eager", capacity=None) -> int:
    """On chip: Q_i, one K_j or V_j tile, the S tile, f (the whole row or one tile), O_i, ℓ_i, m_i,
    and with lazy rescaling the Tc block maxima. "auto" resolves against `capacity` (None: fits).
    "cluster": one CTA's shared memory (counting.cluster.smem_bytes: Q_i, the K/V ring, its f slice, its
    block maxima) in the smallest cluster that holds the row within `capacity` (None: unlimited, one CTA);
    where none does, the largest cluster's bytes, over `capacity`."""
    check_v_once_pair(placement, rescale)
    if placement == "cluster":  # per CTA: the kernel's own budget (counting.cluster), its cluster against capacity
        return reference_plan(n_q, n_k, d, block_q=block_q, block_k=block_k, itemsize=itemsize,
                              capacity=capacity).smem_bytes
    if placement == "auto":
        placement = v_once_resolve_placement(n_q, n_k, d, block_q, block_k, itemsize, causal,
                                             rescale=rescale, capacity=capacity)
    br, bc = min(block_q, n_q), min(block_k, n_k)
    f_cols = n_k if placement == "sram" else bc
    block_maxima = br * _cdiv(n_k, block_k) if rescale == "lazy" else 0
    return ((br * d + bc * d + br * f_cols) * itemsize
            + (br * bc + br * d + 2 * br + block_maxima) * F32)


def v_once_resolve_placement(n_q, n_k, d, block_q, block_k, itemsize, causal=False, *, rescale="eager",
                             capacity=None) -> str:
    """"sram" when the f row fits `capacity` with the rest of the working set, else "hbm"."""
    need = v_once_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal, placement="sram",
                             rescale=rescale)
    return "sram" if capacity is None or need <= capacity else "hbm"


def split_kv_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal=False) -> int:
    """A split's working set (counting/decode.py): FA2's (Q_i, K_j, V_j tiles; S/P, O_i, ℓ_i, m_i in float32) at the
    packed rows (n_q = g·Nq) and the longest sequence (n_k, at least 1). The merge holds one row's S statistics."""
    br, bc = min(block_q, n_q), min(block_k, max(1, n_k))
    return (br * d + 2 * bc * d) * itemsize + (br * bc + br * d + 2 * br) * F32


SRAM_BYTES = {"naive": naive_sram_bytes, "fa1": fa1_sram_bytes, "fa2": fa2_sram_bytes,
              "v_once": v_once_sram_bytes, "split_kv": split_kv_sram_bytes}
