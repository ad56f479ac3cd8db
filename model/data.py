"""Training bytes that exist on every machine: the Python standard library's own source.

The corpus is the concatenation of the `.py` files under `sysconfig.get_paths()["stdlib"]` in sorted
path order (site-packages and dist-packages left out), so it is the same for a given Python version
wherever it runs, with nothing to download.
"""
from __future__ import annotations

import sysconfig
from pathlib import Path

import torch


def stdlib_sources() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "__pycache__"}
    return sorted((p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts)),
                  key=lambda p: p.relative_to(root).as_posix())


def byte_corpus(max_bytes: int | None = None) -> torch.Tensor:
    """The stdlib's .py bytes as a uint8 tensor (the first `max_bytes` of them, if given)."""
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                  or max_bytes <= 0):
        raise ValueError(f"max_bytes must be a positive integer or None, got {max_bytes!r}")
    out, size = bytearray(), 0
    for path in stdlib_sources():
        try:
            data = path.read_bytes()
        except OSError:  # unreadable file: skip it, as every machine with this layout would
            continue
        out += data
        size += len(data)
        if max_bytes is not None and size >= max_bytes:
            del out[max_bytes:]
            break
    if not out:
        raise RuntimeError(f"no .py files under {sysconfig.get_paths()['stdlib']}")
    return torch.frombuffer(out, dtype=torch.uint8).clone()


def batches(corpus: torch.Tensor, batch: int, ctx: int, generator: torch.Generator):
    """Endless (x, y) int64 pairs of shape (batch, ctx): random windows, y = x shifted by one byte."""
    if corpus.dim() != 1 or corpus.numel() < ctx + 2:
        raise ValueError(f"corpus must be 1-D with more than ctx + 1 = {ctx + 1} bytes, "
                         f"got shape {tuple(corpus.shape)}")
    offsets = torch.arange(ctx + 1)
    while True:
        starts = torch.randint(0, corpus.numel() - ctx - 1, (batch,), generator=generator)
        window = corpus[starts.unsqueeze(-1) + offsets].long()
        yield window[:, :-1], window[:, 1:]
