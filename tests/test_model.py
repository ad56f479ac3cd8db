"""The tiny transformer trained with variants.attention(variant="fa2") follows SDPA's losses."""
from __future__ import annotations

import pytest
import torch

from model.data import batches, byte_corpus, stdlib_sources
from model.gpt import GPT, GPTConfig, sdpa_attention
from model.train import attention_by_name, main, train

TINY = GPTConfig(n_layer=2, d_model=64, n_head=4, ctx=64)
# float32 everywhere; the two attentions differ by rounding (~1e-7 relative in o and its
# gradients), and 10 AdamW steps keep that far below this
LOSS_RTOL = 1e-4


@pytest.fixture(scope="module")
def corpus():
    return byte_corpus(256 * 1024)


@pytest.mark.parametrize("variant", ["fa2", "naive"])
def test_reference_attention_follows_sdpa_losses(corpus, variant):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add scheduling noise and contention
    try:
        # blocks smaller than ctx: several tiles a side, a masked diagonal, hidden tiles skipped
        want = train(TINY, sdpa_attention, 10, 4, 3e-3, 0, corpus=corpus)
        got = train(TINY, attention_by_name(variant, 16, 32), 10, 4, 3e-3, 0, corpus=corpus)
    finally:
        torch.set_num_threads(threads)
    assert want[-1] < want[0] - 0.5  # it learns something: a test that can fail
    for step, (a, b) in enumerate(zip(want, got)):
        assert abs(a - b) <= LOSS_RTOL * abs(a), f"step {step}: sdpa {a} vs {variant} {b}"


def test_a_different_attention_gives_different_losses(corpus):
    """The comparison above can fail: a non-causal attention does not follow the causal one."""
    leaky = lambda q, k, v, causal=True: sdpa_attention(q, k, v, causal=False)  # noqa: E731
    a = train(TINY, sdpa_attention, 3, 4, 3e-3, 0, corpus=corpus)
    b = train(TINY, leaky, 3, 4, 3e-3, 0, corpus=corpus)
    assert abs(a[-1] - b[-1]) > LOSS_RTOL * a[-1]


def test_training_is_deterministic(corpus):
    cfg = GPTConfig(n_layer=1, d_model=32, n_head=2, ctx=16)
    assert train(cfg, sdpa_attention, 3, 2, 1e-3, 7, corpus=corpus) == \
        train(cfg, sdpa_attention, 3, 2, 1e-3, 7, corpus=corpus)


def test_corpus_and_batches(corpus):
    assert corpus.dtype == torch.uint8 and corpus.numel() == 256 * 1024
    assert torch.equal(corpus[:1000], byte_corpus(1000))
    assert all("site-packages" not in p.parts for p in stdlib_sources()[:50])
    x, y = next(batches(corpus, 3, 17, torch.Generator().manual_seed(0)))
    assert x.shape == y.shape == (3, 17) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_model_shapes_and_tied_embeddings():
    model = GPT(TINY, sdpa_attention)
    idx = torch.randint(0, 256, (2, 10))
    logits, loss = model(idx)
    assert logits.shape == (2, 10, 256) and loss is None
    assert model.head.weight is model.tok.weight
    assert GPT(TINY, sdpa_attention, tie_embeddings=False).head.weight is not model.tok.weight


def test_bad_input():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(d_model=30, n_head=4)
    with pytest.raises(ValueError, match="n_layer must be a positive integer"):
        GPTConfig(n_layer=0)
    with pytest.raises(ValueError, match="longer than ctx=64"):
        GPT(TINY)(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 256\)"):
        GPT(TINY)(torch.full((1, 4), 256))
    with pytest.raises(ValueError, match=r"integer tensor \(B, N\)"):
        GPT(TINY)(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"integer tensor \(B, N\)"):
        GPT(TINY)(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="max_bytes"):
        byte_corpus(0)
    with pytest.raises(ValueError, match="more than ctx"):
        next(batches(torch.zeros(10, dtype=torch.uint8), 2, 64, torch.Generator()))
    with pytest.raises(ValueError, match="unknown attention 'fa9'"):
        attention_by_name("fa9")


def test_cli_bad_attention_is_one_line(capsys):
    assert main(["--attention", "fa9", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "unknown attention 'fa9'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message")
def test_cli_cuda_without_a_gpu_is_one_line(capsys):
    assert main(["--device", "cuda", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "sees no CUDA device" in err and len(err.strip().splitlines()) == 1
    assert main(["--device", "nonsense", "--steps", "1"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
