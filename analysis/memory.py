"""The counting memory model that every PyTorch reference is written against.

A reference never touches HBM directly. It calls

    Qi = mem.load("Q", q[..., r0:r1, :])        # counted HBM read of the view (returned as float32)
    S  = mem.matmul(Qi, Kj.transpose(-1, -2))   # counted 2·m·n·k FLOPs per product
    P  = mem.exp(S - m)                         # counted exponentials
    mem.store("O", o[..., r0:r1, :], Oi / li)   # counted HBM write into the view

so the code itself says which tensor lives on chip and which crosses to HBM. Counts are whole-problem
numbers: a view of a (B, H, N, d) tensor carries B·H rows of work, so per-(batch, head) counts are
multiplied by B·H automatically. Bytes are elements x the itemsize of the HBM tensor the view belongs
to (Q, K, V, O, S, P, f in the input dtype; l, m, lse in float32).

FLOP conventions (the closed forms in `analysis` restate them):
- `matmul`: 2·m·n·k per product (·batch), as executed on full visited tiles;
- `exp`: one per exponential evaluated (`exp`);
- `other`: one per element of each counted elementwise result (`ew`, `rowmax`, `rowsum`, `log`).
  Selects (applying the causal mask, guarding −inf − (−inf)) are bookkeeping, not FLOPs.

`Memory(counting=False)` (what `mem=None` resolves to) does the same arithmetic and counts nothing.
Everything works on `device="meta"` tensors, so large problems can be counted without computing.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

FLOP_KINDS = ("matmul", "exp", "other")


class SramOverflow(ValueError):
    """A variant's on-chip working set does not fit the SRAM capacity the model was given."""

    def __init__(self, what: str, needed: int, capacity: int):
        self.what, self.needed, self.capacity = what, needed, capacity
        super().__init__(
            f"{what} needs {needed:,} bytes of SRAM but the capacity is {capacity:,} bytes "
            f"(over by {needed - capacity:,} bytes)"
        )


@dataclass
class Counts:
    """What one run moved and computed, for the whole (B, H) problem."""

    reads: Counter = field(default_factory=Counter)  # tensor name -> elements read from HBM
    writes: Counter = field(default_factory=Counter)  # tensor name -> elements written to HBM
    read_bytes: Counter = field(default_factory=Counter)
    write_bytes: Counter = field(default_factory=Counter)
    flops: Counter = field(default_factory=Counter)  # kind -> FLOPs
    sram_peak_bytes: int = 0

    @property
    def hbm_read_bytes(self) -> int:
        return sum(self.read_bytes.values())

    @property
    def hbm_write_bytes(self) -> int:
        return sum(self.write_bytes.values())

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    def as_dict(self) -> dict:
        return {
            "reads": dict(self.reads),
            "writes": dict(self.writes),
            "read_bytes": dict(self.read_bytes),
            "write_bytes": dict(self.write_bytes),
            "hbm_read_bytes": self.hbm_read_bytes,
            "hbm_write_bytes": self.hbm_write_bytes,
            "flops": {kind: self.flops.get(kind, 0) for kind in FLOP_KINDS},
            "sram_peak_bytes": self.sram_peak_bytes,
        }


class Memory:
    """HBM <-> SRAM traffic, FLOPs and the SRAM working set of one forward pass.

    sram_bytes: on-chip capacity a working set is checked against (None: unlimited).
    counting:   False makes every method a thin pass-through (what `mem=None` means).
    """

    def __init__(self, sram_bytes: int | None = None, *, counting: bool = True):
        if sram_bytes is not None and (isinstance(sram_bytes, bool) or int(sram_bytes) != sram_bytes
                                       or sram_bytes <= 0):
            raise ValueError(f"sram_bytes must be a positive integer or None, got {sram_bytes!r}")
        self.sram_bytes = None if sram_bytes is None else int(sram_bytes)
        self.counting = counting
        self.counts = Counts()

    # -- HBM traffic ------------------------------------------------------------------------
    def load(self, name: str, view: torch.Tensor) -> torch.Tensor:
        """Read `view` from HBM into SRAM; computation happens in float32 (float64 inputs, which
        exist for gradcheck, stay float64)."""
        if self.counting:
            n = view.numel()
            self.counts.reads[name] += n
            self.counts.read_bytes[name] += n * view.element_size()
        return view if view.dtype == torch.float64 else view.float()

    def store(self, name: str, view: torch.Tensor, value: torch.Tensor) -> None:
        """Write `value` from SRAM into the HBM tensor `view` (cast to its dtype)."""
        if self.counting:
            n = view.numel()
            self.counts.writes[name] += n
            self.counts.write_bytes[name] += n * view.element_size()
        view.copy_(value)

    # -- FLOPs ------------------------------------------------------------------------------
    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a (..., m, k) @ b (..., k, n): 2·m·n·k FLOPs per batch entry."""
        out = a @ b
        if self.counting:
            self.counts.flops["matmul"] += 2 * out.numel() * a.shape[-1]
        return out

    def exp(self, x: torch.Tensor) -> torch.Tensor:
        if self.counting:
            self.counts.flops["exp"] += x.numel()
        return torch.exp(x)

    def ew(self, x: torch.Tensor) -> torch.Tensor:
        """Count one elementwise FLOP per element of an already computed result."""
        if self.counting:
            self.counts.flops["other"] += x.numel()
        return x

    def rowmax(self, x: torch.Tensor) -> torch.Tensor:
        if self.counting:
            self.counts.flops["other"] += x.numel()
        return x.amax(dim=-1, keepdim=True)

    def rowsum(self, x: torch.Tensor) -> torch.Tensor:
        if self.counting:
            self.counts.flops["other"] += x.numel()
        return x.sum(dim=-1, keepdim=True)

    def log(self, x: torch.Tensor) -> torch.Tensor:
        if self.counting:
            self.counts.flops["other"] += x.numel()
        return torch.log(x)

    # -- SRAM -------------------------------------------------------------------------------
    def require_sram(self, what: str, nbytes: int) -> None:
        """Declare an on-chip working set; over capacity is an error with both numbers."""
        if self.counting:
            self.counts.sram_peak_bytes = max(self.counts.sram_peak_bytes, int(nbytes))
        if self.sram_bytes is not None and nbytes > self.sram_bytes:
            raise SramOverflow(what, int(nbytes), self.sram_bytes)

    def fits(self, nbytes: int) -> bool:
        return self.sram_bytes is None or nbytes <= self.sram_bytes


def resolve(mem: Memory | None) -> Memory:
    """`mem=None` means: compute, count nothing."""
    if mem is None:
        return Memory(counting=False)
    if not isinstance(mem, Memory):
        raise TypeError(f"mem must be an analysis.memory.Memory or None, got {type(mem).__name__}")
    return mem
