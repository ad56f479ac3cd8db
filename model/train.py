"""Train the tiny GPT for a few steps with a chosen attention; deterministic given the seed.

    python -m model.train --attention fa2 --steps 20 --n-layer 2 --d-model 64 --n-head 4 --ctx 64

`train(...)` returns the losses, so two attentions can be compared step by step from one seed: the
references in `variants/` must follow SDPA's losses (tests/test_model.py).
"""
from __future__ import annotations

import argparse
import contextlib
import sys

import torch

from model.data import batches, byte_corpus
from model.gpt import GPT, GPTConfig, sdpa_attention
from variants import VARIANTS, attention

DEFAULT_CORPUS_BYTES = 8 * 1024 * 1024


def train(config: GPTConfig, attention, steps: int, batch: int, lr: float, seed: int, device="cpu",
          dtype=None, log_every: int = 0, corpus: torch.Tensor | None = None) -> list[float]:
    """AdamW for `steps` steps on random byte windows; returns the loss of every step.

    dtype: None trains in float32; torch.bfloat16/float16 run the forward under autocast (the
    attention then sees half-precision q, k, v). log_every > 0 prints every that many steps."""
    torch.manual_seed(seed)
    model = GPT(config, attention).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    corpus = byte_corpus(DEFAULT_CORPUS_BYTES) if corpus is None else corpus
    data = batches(corpus, batch, config.ctx, torch.Generator().manual_seed(seed))
    device_type = torch.device(device).type
    autocast = (torch.autocast(device_type, dtype=dtype) if dtype is not None
                else contextlib.nullcontext())
    losses = []
    model.train()
    for step in range(steps):
        x, y = (t.to(device) for t in next(data))
        with autocast:
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:5d}  loss {losses[-1]:.4f}", flush=True)
    return losses


def attention_by_name(name: str, block_q: int = 64, block_k: int = 64):
    if name == "sdpa":
        return sdpa_attention
    if name not in VARIANTS:
        raise ValueError(f"unknown attention {name!r}; choose sdpa or one of {', '.join(VARIANTS)}")
    return lambda q, k, v, causal=True: attention(q, k, v, variant=name, causal=causal,
                                                  block_q=block_q, block_k=block_k)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m model.train", description=__doc__.splitlines()[0])
    p.add_argument("--attention", default="sdpa", help="sdpa, naive, fa1, fa2 or v_once")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--block", type=int, default=64, help="Br = Bc of the reference attentions")
    args = p.parse_args(argv)
    try:
        if min(args.steps, args.batch) <= 0:
            raise ValueError("--steps and --batch must be positive")
        device = torch.device(args.device)  # a bad name is torch's RuntimeError, reported below
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {args.device}: this torch ({torch.__version__}) sees no CUDA device")
        cfg = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model, ctx=args.ctx)
        fn = attention_by_name(args.attention, args.block, args.block)
        train(cfg, fn, args.steps, args.batch, args.lr, args.seed, args.device, log_every=1)
    except (ValueError, RuntimeError) as e:
        print(f"model.train: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
