"""kernels.loader's launch path on a GPU (cuda.bindings' cuLaunchKernel from a numpy argument plan): the
cases the kernel suites do not reach. Skipped cleanly without a CUDA device.

- torch's current stream is the one launched on (a side stream, ordered by events, not by luck);
- a thread that never touched CUDA can launch (the primary context is bound on first use);
- one Kernel serves several argument signatures and refills its plan per call;
- the harness's correctness rule passes every registered kernel on one small causal Nq > Nk problem.
"""
from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from bench import harness  # noqa: E402
from kernels import KERNELS  # noqa: E402
from variants.reference import attention_reference  # noqa: E402


def _qkv(n_q=200, n_k=150, d=64, dtype=torch.float16, seed=0, b=2, h=3):
    return harness.random_qkv(b, h, n_q, n_k, d, dtype, seed=seed)


def _err(o, q, k, v, causal):
    ref, _ = attention_reference(q, k, v, causal=causal)
    return float((o.double() - ref).norm() / ref.norm())


def test_launches_on_torchs_current_stream():
    """A long kernel (the teaching fa2, milliseconds) on a side stream (torch's are non-blocking), then a
    copy on that stream: it equals the output only if the launch went there, before the copy."""
    fwd = KERNELS["fa2"].forward
    q, k, v = _qkv(4096, 4096, b=2, h=8)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o, _ = fwd(q, k, v, causal=True)
        copy = o.clone()  # same stream: sees the finished o
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(copy, o) and _err(o[:1, :1], q[:1, :1], k[:1, :1], v[:1, :1], True) < 1e-2


def test_a_fresh_thread_can_launch():
    q, k, v = _qkv()
    result = {}

    def work():
        try:
            o, _ = KERNELS["fa2_tc"].forward(q, k, v, causal=True)
            torch.cuda.synchronize()
            result["err"] = _err(o, q, k, v, True)
        except Exception as exc:  # reported below, in the test's thread
            result["exc"] = exc

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert "exc" not in result, result.get("exc")
    assert result["err"] < 4e-3


def test_one_kernel_many_calls_and_signatures():
    """Calls with different shapes (same signature: the plan is refilled) and different dtypes/causal
    flags in turn: each output matches the reference, so no call sees another's arguments."""
    fwd = KERNELS["fa2_tc"].forward
    for i, (n_q, n_k, dtype, causal) in enumerate([(77, 203, torch.float16, True), (300, 100, torch.bfloat16, True),
                                                   (129, 129, torch.float16, False), (77, 203, torch.float16, True)]):
        q, k, v = _qkv(n_q, n_k, 128, dtype, seed=i)
        o, lse = fwd(q, k, v, causal=causal)
        torch.cuda.synchronize()
        assert _err(o, q, k, v, causal) < (4e-3 if dtype == torch.float16 else 2e-2)


@pytest.mark.parametrize("label", [e.label for e in harness.entries(sdpa=(), all_options=True)])
def test_every_kernel_passes_the_harness_rule(label):
    entry = next(e for e in harness.entries(sdpa=(), all_options=True) if e.label == label)
    rec = harness.check_one(entry, 1, 2, 150, 97, 64, torch.float16, True)
    assert rec.get("skipped") or rec["ok"], rec
