"""The counting memory model that every PyTorch reference is written against.

A reference never touches HBM directly. It calls

    Qi = mem.load("Q", q[..., r0:r1, :])        # counted HBM read of the view (returned as float32)
    S  = mem.matmul(Qi, Kj.transpose(-1, -2))   # counted 2·m·n·k FLOPs per product
    P  = mem.exp(S - m)                         # counted exponentials
    mem.store("O", o[..., r0:r1, :], Oi / li)   # counted HBM write into the view

so the code itself says which tensor lives on chip and which crosses to HBM. A cluster's exchange
between the shared memories of its CTAs (v_once placement "cluster", issue 18) is `mem.dsmem(name,
value)`: counted in `dsmem_bytes` (float32 bytes), never as HBM traffic. Counts are whole-problem
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

One Memory counts one run: a reference refuses a Memory that already holds counts (two runs would
add up without a word) unless it was made with `accumulate=True` (e.g. forward + backward of one
training step) or `reset()` since. Counts never go negative (a negative tally raises).

Progress: a run that lasts longer than `progress_after_s` (default 5 s; meta-tensor counting at
N = 64k takes minutes) prints a status line to stderr every 10 s: elapsed time, matmul FLOPs and
HBM bytes counted so far. `progress=False` silences it; a callable gets (elapsed seconds, Counts)
about once a second instead.
"""
from __future__ import annotations

import copy
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from counting import checks

FLOP_KINDS = ("matmul", "exp", "other")


class SramOverflow(ValueError):
    """A variant's on-chip working set does not fit the SRAM capacity the model was given."""

    def __init__(self, what: str, needed: int, capacity: int):
        self.what, self.needed, self.capacity = what, needed, capacity
        super().__init__(
            f"{what} needs {needed:,} bytes of SRAM but the capacity is {capacity:,} bytes "
            f"(over by {needed - capacity:,} bytes)"
        )


class Tally(Counter):
    """A Counter that refuses negative counts (elements, bytes and FLOPs are never negative)."""

    def __setitem__(self, key, value):
        if value < 0:
            raise ValueError(f"count of {key!r} would become {value}: counts cannot be negative")
        super().__setitem__(key, value)


@dataclass
class Counts:
    """What one run moved and computed, for the whole (B, H) problem."""

    reads: Counter = field(default_factory=Tally)  # tensor name -> elements read from HBM
    writes: Counter = field(default_factory=Tally)  # tensor name -> elements written to HBM
    read_bytes: Counter = field(default_factory=Tally)
    write_bytes: Counter = field(default_factory=Tally)
    flops: Counter = field(default_factory=Tally)  # kind -> FLOPs
    sram_peak_bytes: int = 0
    # tensor name -> bytes one CTA read from another CTA's shared memory (a cluster's DSMEM; no HBM byte)
    dsmem_bytes: Counter = field(default_factory=Tally)

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
            "dsmem_bytes": dict(self.dsmem_bytes),
        }


class Memory:
    """HBM <-> SRAM traffic, FLOPs and the SRAM working set of one forward pass.

    sram_bytes: on-chip capacity a working set is checked against (None: unlimited).
    counting:   False makes every method a thin pass-through (what `mem=None` means).
    accumulate: True lets several runs add into one set of counts (default: one run, then reset()).
    progress:   None: a status line on stderr once a run passes `progress_after_s`; False: silent;
                a callable: called as progress(elapsed_s, counts) about once a second instead.
    """

    def __init__(self, sram_bytes: int | None = None, *, counting: bool = True, accumulate: bool = False,
                 progress=None, progress_after_s: float = 5.0):
        self.sram_bytes = checks.sram_capacity("sram_bytes", sram_bytes)
        self.counting = checks.flag("counting", counting)
        self.accumulate = checks.flag("accumulate", accumulate)
        if progress is not None and progress is not False and not callable(progress):
            raise TypeError(f"progress must be None, False or a callable, got {progress!r}")
        self.progress, self.progress_after_s = progress, float(progress_after_s)
        self.reset()

    def reset(self) -> None:
        """Forget the counts: the Memory can count a new run."""
        self.counts = Counts()
        self.runs = 0
        self._before = None
        self._t0 = self._last = None
        self._shown = False

    def begin_run(self) -> None:
        """Called by every reference at its start (through `resolve`): one run per Memory."""
        if self.counting and self.runs and not self.accumulate:
            raise RuntimeError("this Memory already holds the counts of a run; call mem.reset() or "
                               "pass a new Memory() (or Memory(accumulate=True) to add runs up)")
        self._before = (self.runs, copy.deepcopy(self.counts))  # what an SramOverflow puts back
        self.runs += 1
        self._t0 = self._last = time.monotonic()
        self._shown = False

    def _tick(self) -> None:
        """Progress after progress_after_s, at most once a second (cheap: one clock read)."""
        if self.progress is False or self._t0 is None:
            return
        now = time.monotonic()
        interval = 1.0 if callable(self.progress) else 10.0
        if now - self._t0 < self.progress_after_s or (self._shown and now - self._last < interval):
            return
        self._last, self._shown = now, True
        if callable(self.progress):
            self.progress(now - self._t0, self.counts)
            return
        c = self.counts
        print(f"[memory model] {now - self._t0:,.0f} s: {c.flops['matmul']:.3e} matmul FLOPs, "
              f"{c.hbm_bytes:.3e} HBM bytes counted so far", file=sys.stderr, flush=True)

    # -- HBM traffic ------------------------------------------------------------------------
    def load(self, name: str, view: torch.Tensor) -> torch.Tensor:
        """Read `view` from HBM into SRAM; computation happens in float32 (float64 inputs, which
        exist for gradcheck, stay float64)."""
        if self.counting:
            n = view.numel()
            self.counts.reads[name] += n
            self.counts.read_bytes[name] += n * view.element_size()
        return view.to(compute_dtype(view.dtype))

    def store(self, name: str, view: torch.Tensor, value: torch.Tensor) -> None:
        """Write `value` from SRAM into the HBM tensor `view` (cast to its dtype)."""
        if self.counting:
            n = view.numel()
            self.counts.writes[name] += n
            self.counts.write_bytes[name] += n * view.element_size()
        view.copy_(value)

    # -- distributed shared memory (issue 18: placement="cluster") ----------------------------
    def dsmem(self, name: str, value: torch.Tensor, itemsize: int = 4) -> torch.Tensor:
        """One CTA reads `value` from another CTA's shared memory in its cluster: counted as DSMEM bytes
        (float32 statistics and partial O: `itemsize` 4 whatever the compute dtype), never as HBM."""
        if self.counting:
            self.counts.dsmem_bytes[name] += value.numel() * itemsize
        return value

    # -- FLOPs ------------------------------------------------------------------------------
    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a (..., m, k) @ b (..., k, n): 2·m·n·k FLOPs per batch entry."""
        out = a @ b
        if self.counting:
            self.counts.flops["matmul"] += 2 * out.numel() * a.shape[-1]
            self._tick()
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
        if nbytes < 0:
            raise ValueError(f"{what}: a working set cannot be negative, got {nbytes} bytes")
        if self.sram_bytes is not None and nbytes > self.sram_bytes:
            # the run stops here: the Memory goes back to what it held before it, so a retry (another
            # placement, a smaller block) can use it, and accumulated counts keep no part of the failed run
            if self._before is not None:
                self.runs, self.counts = self._before
                self._before = None
            raise SramOverflow(what, int(nbytes), self.sram_bytes)
        if self.counting:
            self.counts.sram_peak_bytes = max(self.counts.sram_peak_bytes, int(nbytes))

    def fits(self, nbytes: int) -> bool:
        return self.sram_bytes is None or nbytes <= self.sram_bytes


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The references' on-chip arithmetic type: float32 for every input dtype, but float64 inputs (gradcheck's)
    stay float64. Memory.load converts to it; so does anything a reference holds on chip without a load."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def resolve(mem: Memory | None) -> Memory:
    """`mem=None` means: compute, count nothing. Starts the run (a used Memory is refused)."""
    if mem is None:
        return Memory(counting=False)
    if not isinstance(mem, Memory):
        raise TypeError(f"mem must be an counting.memory.Memory or None, got {type(mem).__name__}")
    mem.begin_run()
    return mem
