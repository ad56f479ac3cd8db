"""The notebooks' exercise checks accept a right answer and reject a wrong one (so a failure is the
reader's, not the check's). Each check cell is taken from the notebook's jupytext source and run here."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

jupytext = pytest.importorskip("jupytext")

from analysis.nbtools import human  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _checks(stem):
    nb = jupytext.read(NOTEBOOKS / f"{stem}.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human}
    exec(compile(cell.source, f"{stem}:checks", "exec"), ns)
    return ns


def test_01():
    ns = _checks("01_why_io_matters")
    l2 = 60 * 2 ** 20
    n = math.isqrt(l2 // 4)
    n += 4 * n * n < l2
    ns["check_l2_fill"](n)
    with pytest.raises(AssertionError):
        ns["check_l2_fill"](n + 1)
    ns["check_intensity"](128, 64.0)
    with pytest.raises(AssertionError):
        ns["check_intensity"](128, 32.0)


def test_02():
    ns = _checks("02_online_softmax")
    ns["check_rescales"](lambda t: t * (t - 1) // 2, lambda t: t)
    with pytest.raises(AssertionError):
        ns["check_rescales"](lambda t: t * t, lambda t: t)
    fp16 = max(s.item() for s in torch.arange(10, 12, 1 / 128, dtype=torch.float16) if math.isfinite(math.exp(s.item()))
               and math.exp(s.item()) < 65520)
    ns["check_overflow_limits"](fp16, 88.5)
    with pytest.raises(AssertionError):
        ns["check_overflow_limits"](fp16, 89.0)


def test_03():
    ns = _checks("03_flashattention1")
    ns["check_divisions"](512)
    with pytest.raises(AssertionError):
        ns["check_divisions"](3552)


def test_04():
    ns = _checks("04_flashattention2")
    ns["check_slots"](3, 1024)
    with pytest.raises(AssertionError):
        ns["check_slots"](1, 2048)


def test_05():
    ns = _checks("05_multiply_v_once")

    def fp8_f(q, k, v):
        s = q @ k.T / math.sqrt(q.shape[-1])
        f = torch.exp(s - s.max(-1, keepdim=True).values)
        return (f.to(torch.float8_e4m3fn).float() / f.sum(-1, keepdim=True)) @ v

    ns["check_fp8_f"](fp8_f)
    with pytest.raises(AssertionError):
        ns["check_fp8_f"](lambda q, k, v: torch.softmax(q @ k.T / 8, -1) @ v)
    ns["check_spill_extra"](lambda n, d, br: 2 * n * n * 2)
    with pytest.raises(AssertionError):
        ns["check_spill_extra"](lambda n, d, br: 2 * n * n * d // br)


def test_07():
    from counting import backward_forms as bf
    from counting.gpus import GPUS

    nb = jupytext.read(NOTEBOOKS / "07_backward_recomputation.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human, "bf": bf, "GPUS": GPUS}
    exec(compile(cell.source, "07:checks", "exec"), ns)
    ns["check_softmax_backward_row"](lambda p, dp: p * (dp - (p * dp).sum()))
    with pytest.raises(AssertionError):
        ns["check_softmax_backward_row"](lambda p, dp: p * dp)
    ns["check_fa2_reads"](lambda n, blk, d: bf.backward_counts("fa2", 1, 1, n, n, d, dtype="fp16", block_q=blk,
                                                               block_k=blk).reads)
    with pytest.raises(AssertionError):
        ns["check_fa2_reads"](lambda n, blk, d: {"Q": n * d})
    first = next(m for m in range(1, 1 << 20)
                 if bf.saved_bytes("naive", 32, 16, m, m, "fp16") > GPUS["h200"].hbm_bytes.value)
    ns["check_naive_limit"](first)
    with pytest.raises(AssertionError):
        ns["check_naive_limit"](first + 1)


def test_10():
    from counting import ring as counts
    from counting.gpus import GPUS

    ns = _checks("10_across_gpus")
    ns.update(counts=counts, GPUS=GPUS)
    from variants import attention_reference
    ns["attention_reference"] = attention_reference

    def merge2(o_a, lse_a, o_b, lse_b):
        m = torch.maximum(lse_a, lse_b)
        wa, wb = torch.exp(lse_a - m), torch.exp(lse_b - m)
        return (wa.unsqueeze(-1) * o_a + wb.unsqueeze(-1) * o_b) / (wa + wb).unsqueeze(-1), m + torch.log(wa + wb)

    ns["check_merge"](merge2)
    with pytest.raises(AssertionError):  # the textbook formula without the max: right, until e^1000
        ns["check_merge"](lambda oa, la, ob, lb: ((la.exp().unsqueeze(-1) * oa + lb.exp().unsqueeze(-1) * ob)
                                                  / (la.exp() + lb.exp()).unsqueeze(-1),
                                                  torch.log(la.exp() + lb.exp())))
    with pytest.raises(AssertionError):
        ns["check_merge"](lambda oa, la, ob, lb: ((oa + ob) / 2, torch.maximum(la, lb)))

    def zigzag(n, p, r):
        c = [(i * n // (2 * p), (i + 1) * n // (2 * p)) for i in range(2 * p)]
        return list(range(*c[r])) + list(range(*c[2 * p - 1 - r]))

    ns["check_zigzag"](zigzag)
    with pytest.raises(AssertionError):
        ns["check_zigzag"](lambda n, p, r: range(r * n // p, (r + 1) * n // p))
    a100 = GPUS["a100"]
    ns["check_tokens"](round(2 * a100.fp16_tensor_flops.value / a100.nvlink_bandwidth.value))
    with pytest.raises(AssertionError):
        ns["check_tokens"](round(a100.fp16_tensor_flops.value / a100.nvlink_bandwidth.value))


def test_06():
    import json

    from analysis.results import RESULTS_DIR, load_records, one_per_shape

    nb = jupytext.read(NOTEBOOKS / "06_on_a_real_gpu.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    timed = one_per_shape([r for r in load_records("bench_kernels.json") if r["dtype"] in ("float16", "fp16")])
    ns = {"torch": torch, "math": math, "human": human, "json": json, "RESULTS": RESULTS_DIR, "timed": timed}
    exec(compile(cell.source, "06:checks", "exec"), ns)
    rows = json.loads((RESULTS_DIR / "fwd_wgmma_vs_cudnn_grid" / "four_passes_run3" / "ab_wgmma_speed.json").read_text())
    cells = {(r["variant"].replace("[default]", ""), r["dtype"], r["d"], r["n"], r["causal"]): r for r in rows["rows"]}
    ahead = sum(cells[("sdpa_cudnn", *k[1:])]["median_ms"] >= r["median_ms"] for k, r in cells.items()
                if k[0] == "fa2_wgmma")
    ns["check_cells_ahead"](ahead)
    with pytest.raises(AssertionError):
        ns["check_cells_ahead"](len([k for k in cells if k[0] == "fa2_wgmma"]))  # "every cell": not so
    with pytest.raises(AssertionError):
        ns["check_absorbed"](0.5)
    t = {(r["kernel"], r["n"]): r["tflops"] for r in timed if r["d"] == 64 and not r["causal"]}
    first = min(n for n in {n for _, n in t} if t.get(("fa2", n), 0) > t.get(("naive", n), 0))
    ns["check_teaching_crossover"](first)
    with pytest.raises(AssertionError):
        ns["check_teaching_crossover"](first * 2)


def test_06_absorbed():
    from gpumodel import gpu_model as gm
    from gpumodel.fit_gpu_model import work_of
    from gpumodel.measured import ncu_cells

    ns = _checks_06_only()
    c = next(c for c in ncu_cells() if c["n_q"] == 4096 and not c["causal"] and c.get("lts_bytes")
             and (c["label"], c["d"]) == ("fa2_wgmma", 128))
    req = gm.prepare(work_of(c).desc, c["batch"], c["heads"], c["n_q"], c["n_k"], c["d"], c["dtype"],
                     c["causal"]).levels.requests_bytes
    ns["check_absorbed"](1 - c["dram_bytes"] / req)
    with pytest.raises(AssertionError):
        ns["check_absorbed"](c["dram_bytes"] / req)


def _checks_06_only():
    import json

    from analysis.results import RESULTS_DIR

    nb = jupytext.read(NOTEBOOKS / "06_on_a_real_gpu.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human, "json": json, "RESULTS": RESULTS_DIR, "timed": []}
    exec(compile(cell.source, "06:checks", "exec"), ns)
    return ns


def test_08():
    import json

    from analysis.results import RESULTS_DIR

    nb = jupytext.read(NOTEBOOKS / "08_flashattention_on_hopper.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human, "json": json, "RESULTS": RESULTS_DIR}
    exec(compile(cell.source, "08:checks", "exec"), ns)
    rows = json.loads((RESULTS_DIR / "probe_gpu" / "tc_ceiling" / "tc_ceiling.json").read_text())["rows"]
    r_tc = max(r["flop_per_clk_sm"] for r in rows if r["path"] == "wgmma")
    r_ex = max(r["per_clk_sm"] for r in rows if r["path"] == "mufu")
    ns["check_crossover"](r_tc / (4 * r_ex))
    with pytest.raises(AssertionError):
        ns["check_crossover"](128)
    ns["check_exp_share"](lambda d: (1 / r_ex) / (4 * d / r_tc))
    with pytest.raises(AssertionError):
        ns["check_exp_share"](lambda d: (4 * d / r_tc) / (1 / r_ex))

    def threshold(s, v, bc, tau):
        m, l, o, moves = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=torch.float64), 0
        for j in range(0, s.numel(), bc):
            mx = max(m, s[j:j + bc].max().item())
            if mx > m and mx - m > tau:
                alpha = 2.0 ** (m - mx) if m > -math.inf else 0.0
                o, l, m, moves = o * alpha, l * alpha, mx, moves + 1
            p = torch.exp2(s[j:j + bc] - m)
            o, l = o + p @ v[j:j + bc], l + p.sum().item()
        return o / l, moves

    ns["check_threshold"](threshold)
    with pytest.raises(AssertionError):  # forgets to rescale l with O
        def no_l(s, v, bc, tau):
            m, l, o, moves = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=torch.float64), 0
            for j in range(0, s.numel(), bc):
                mx = max(m, s[j:j + bc].max().item())
                if mx > m and mx - m > tau:
                    o, m, moves = o * (2.0 ** (m - mx) if m > -math.inf else 0.0), mx, moves + 1
                p = torch.exp2(s[j:j + bc] - m)
                o, l = o + p @ v[j:j + bc], l + p.sum().item()
            return o / l, moves
        ns["check_threshold"](no_l)
    with pytest.raises(AssertionError):  # exact, but rescales at every new max
        ns["check_threshold"](lambda s, v, bc, tau: threshold(s, v, bc, 0.0))


def _raises_with(fn, *args, words=()):
    """The check rejects the answer, and its message says something that teaches (contains `words`)."""
    with pytest.raises(AssertionError) as e:
        fn(*args)
    for w in words:
        assert w in str(e.value), f"message {str(e.value)!r} lacks {w!r}"


def test_01_messages_teach():
    ns = _checks("01_why_io_matters")
    l2 = 60 * 2 ** 20
    n = math.isqrt(l2 // 4)
    n += 4 * n * n < l2
    _raises_with(ns["check_l2_fill"], n + 1, words=("smallest N", "print alike"))
    _raises_with(ns["check_l2_fill"], n - 100, words=("too small", "short of"))
    _raises_with(ns["check_intensity"], 128, 128.0, words=("2 bytes",))
    _raises_with(ns["check_intensity"], 64, 16.0, words=("4N²",))
    ns["check_causal_s_bytes"](8192, 8192)
    _raises_with(ns["check_causal_s_bytes"], 4096, 4096, words=("does not halve",))
    ns["check_a100_ridge"](312e12 / 2.039e12)
    _raises_with(ns["check_a100_ridge"], 2.039e12 / 312e12, words=("upside down",))
    _raises_with(ns["check_a100_ridge"], 206.0, words=("get_gpu('a100')",))


def _fa2_forward(q, k, v, br, bc, rescale=True, divide=True, scale=True, lse_log=torch.log, safe=True):
    """The solution of notebook 04's exercise 6, with switches that make the typical wrong answers."""
    n_q, d = q.shape
    o, lse = torch.empty_like(q), torch.empty(n_q, dtype=q.dtype)
    for r0 in range(0, n_q, br):
        qi = q[r0:r0 + br] / (math.sqrt(d) if scale else 1)
        oi = torch.zeros_like(qi)
        li = torch.zeros(len(qi), 1, dtype=q.dtype)
        mi = torch.full((len(qi), 1), -math.inf if safe else 0.0, dtype=q.dtype)
        for c0 in range(0, k.shape[0], bc):
            s = qi @ k[c0:c0 + bc].T
            m_new = torch.maximum(mi, s.amax(-1, keepdim=True)) if safe else mi
            p = torch.exp(s - m_new)
            alpha = torch.exp(mi - m_new) if rescale else torch.ones_like(mi)
            li = alpha * li + p.sum(-1, keepdim=True)
            oi = alpha * oi + p @ v[c0:c0 + bc]
            mi = m_new
        o[r0:r0 + br] = oi / li if divide else oi
        lse[r0:r0 + br] = (mi + lse_log(li)).squeeze(-1)
    return o, lse


def test_04_fa2_forward():
    ns = _checks("04_flashattention2")
    ns["check_fa2_forward"](_fa2_forward)
    f = _fa2_forward
    _raises_with(ns["check_fa2_forward"], lambda *a: f(*a, rescale=False), words=("rescale",))
    _raises_with(ns["check_fa2_forward"], lambda *a: f(*a, divide=False), words=("divided by ℓ",))
    _raises_with(ns["check_fa2_forward"], lambda *a: f(*a, scale=False), words=("√d",))
    _raises_with(ns["check_fa2_forward"], lambda *a: f(*a, lse_log=torch.log2), words=("lse = m + log ℓ",))
    _raises_with(ns["check_fa2_forward"], lambda *a: f(*a, safe=False), words=("running max",))
    _raises_with(ns["check_fa2_forward"], lambda q, k, v, br, bc: (f(q, k, v, br, bc)[0][:-1], f(q, k, v, br, bc)[1]),
                 words=("shape",))


def test_04_solution_is_the_checked_one():
    """The folded solution in the notebook passes its check (the code in the <details> block, run as written)."""
    ns = _checks("04_flashattention2")
    text = (NOTEBOOKS / "04_flashattention2.py").read_text()
    block = "# def fa2_forward(" + text.split("# def fa2_forward(")[1].split("# ```")[0]
    code = "\n".join(line[2:] for line in block.splitlines())
    exec(code, ns)
    ns["check_fa2_forward"](ns["fa2_forward"])


def _checks_07():
    from counting import backward_forms as bf
    from counting.gpus import GPUS

    nb = jupytext.read(NOTEBOOKS / "07_backward_recomputation.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human, "bf": bf, "GPUS": GPUS}
    exec(compile(cell.source, "07:checks", "exec"), ns)
    return ns


def _solution(stem, name):
    """The code of a folded solution (the ```python block after '# def name('), run as written."""
    text = (NOTEBOOKS / f"{stem}.py").read_text()
    block = f"# def {name}(" + text.split(f"# def {name}(")[1].split("# ```")[0]
    ns = {"torch": torch, "math": math}
    exec("\n".join(line[2:] for line in block.splitlines()), ns)
    return ns[name]


def _fa2_backward(q, k, v, o, lse, do, br, bc, use_d=True, tau_on_grads=True):
    n_q, d = q.shape
    tau = 1 / math.sqrt(d)
    D = (do * o).sum(-1, keepdim=True) if use_d else torch.zeros(n_q, 1, dtype=q.dtype)
    g = tau if tau_on_grads else 1.0
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for c0 in range(0, k.shape[0], bc):
        kj, vj = k[c0:c0 + bc], v[c0:c0 + bc]
        for r0 in range(0, n_q, br):
            qi, doi = q[r0:r0 + br], do[r0:r0 + br]
            p = torch.exp(tau * qi @ kj.T - lse[r0:r0 + br, None])
            dv[c0:c0 + bc] += p.T @ doi
            ds = p * (doi @ vj.T - D[r0:r0 + br])
            dq[r0:r0 + br] += g * ds @ kj
            dk[c0:c0 + bc] += g * ds.T @ qi
    return dq, dk, dv


def test_07_solutions_and_new_checks():
    ns = _checks_07()
    ns["check_softmax_backward_row"](_solution("07_backward_recomputation", "softmax_backward_row"))
    ns["check_fa2_reads"](_solution("07_backward_recomputation", "fa2_reads"))
    ns["check_fa2_backward"](_solution("07_backward_recomputation", "fa2_backward"))
    ns["check_fa2_backward"](_fa2_backward)
    _raises_with(ns["check_fa2_backward"], lambda *a: _fa2_backward(*a, use_d=False), words=("D_i = rowsum",))
    _raises_with(ns["check_fa2_backward"], lambda *a: _fa2_backward(*a, tau_on_grads=False), words=("factor τ",))
    _raises_with(ns["check_fa2_backward"], lambda *a: [g.T for g in _fa2_backward(*a)], words=("shape",))

    def unscaled_p(q, k, v, o, lse, do, br, bc):  # P = exp(S - L) without the scale
        return _fa2_backward(q * math.sqrt(q.shape[1]), k, v, o, lse, do, br, bc)
    _raises_with(ns["check_fa2_backward"], unscaled_p, words=("dV",))

    # exercise 4: the bytes the bf16 accumulator saves, against the counted float32 traffic of dQ
    from counting import backward_forms as bf
    c = bf.backward_counts("fa2", 1, 1, 16384, 16384, 64, dtype="bf16", block_q=64, block_k=64)
    # (Tc + 1) float32 reads of the accumulator, as many writes: 2 bytes saved each = the float32 read bytes
    ns["check_dq_saving"](c.read_bytes["dQ"])
    _raises_with(ns["check_dq_saving"], c.read_bytes["dQ"] // 2, words=("half",))
    _raises_with(ns["check_dq_saving"], 2 * c.read_bytes["dQ"], words=("twice",))
    _raises_with(ns["check_dq_saving"], 16384 * 64 * 2, words=("round trip",))

    # exercise 6: a row that sees no key
    from variants import VARIANTS
    q, k, v, do = torch.randn(1, 1, 8, 4), torch.randn(1, 1, 4, 4), torch.randn(1, 1, 4, 4), torch.randn(1, 1, 8, 4)
    o, lse = VARIANTS["fa2"].forward(q, k, v, causal=True, block_q=4, block_k=4)
    dq = VARIANTS["fa2"].backward(q, k, v, o, lse, do, causal=True, block_q=4, block_k=4)[0]
    ns["check_empty_row_dq"](dq[0, 0, 0])
    _raises_with(ns["check_empty_row_dq"], torch.full((4,), float("nan")), words=("finite_or_zero",))
    _raises_with(ns["check_empty_row_dq"], dq[0, 0, -1], words=("sees no key",))


def test_02_messages_and_new_checks():
    ns = _checks("02_online_softmax")
    _raises_with(ns["check_rescales"], lambda t: t * t, lambda t: t, words=("not the new one",))
    _raises_with(ns["check_rescales"], lambda t: t * (t + 1) // 2, lambda t: t, words=("nothing to rescale",))
    _raises_with(ns["check_overflow_limits"], 11.2, 88.5, words=("too high",))
    _raises_with(ns["check_overflow_limits"], 10.0, 88.5, words=("keep going",))
    ns["check_unguarded"](float("nan"))
    _raises_with(ns["check_unguarded"], 1.0, words=("NaN",))
    _raises_with(ns["check_unguarded"], 0.0, words=("NaN",))
    ns["check_passes"](2, 0)
    _raises_with(ns["check_passes"], 3, 0, words=("classic",))
    _raises_with(ns["check_passes"], 2, 1, words=("on chip",))


def test_03_new_checks_and_messages():
    ns = _checks("03_flashattention1")
    _raises_with(ns["check_divisions"], 64, words=("one division per row",))
    _raises_with(ns["check_divisions"], 128, words=("FA2's count",))
    ns["check_final_rows"](range(4))
    _raises_with(ns["check_final_rows"], range(16), words=("only rows",))
    _raises_with(ns["check_final_rows"], [0], words=("not alone",))
    ns["check_swapped_gone"]({"O", "ℓ", "m"})
    _raises_with(ns["check_swapped_gone"], {"O", "l", "m", "K"}, words=("re-read",))
    _raises_with(ns["check_swapped_gone"], {"O"}, words=("missing",))
    ns["check_fixed_block_slope"](0.0)
    _raises_with(ns["check_fixed_block_slope"], -1.0, words=("Theorem 2",))
    ns["check_beats_fa1"](["fa2"])
    _raises_with(ns["check_beats_fa1"], ["fa2", "v_once"], words=("spills",))
    _raises_with(ns["check_beats_fa1"], ["naive", "fa2"], words=("S and P",))
    # the facts the checks rest on, from the package
    from counting import closed_forms
    from counting.gpus import get_gpu
    sram = get_gpu("h200").sram_bytes
    b = {n: closed_forms.counts(n, 1, 1, 4096, 4096, 64, sram_bytes=sram).hbm_bytes
         for n in ("naive", "fa1", "fa2", "v_once")}
    assert {n for n in b if b[n] < b["fa1"]} == {"fa2"}


def test_05_new_checks_and_messages():
    ns = _checks("05_multiply_v_once")
    _raises_with(ns["check_spill_extra"], lambda n, d, br: n * n * 2, words=("half",))
    import variants.v_once as vo
    from counting.gpus import get_gpu
    sram = get_gpu("h200").sram_bytes
    n = 0
    while vo.sram_bytes(n + 64, n + 64, 128, 64, 64, 2, placement="sram", rescale="lazy") <= sram:
        n += 64
    ns["check_longest_fitting"](n)
    _raises_with(ns["check_longest_fitting"], n - 64, words=("so does",))
    _raises_with(ns["check_longest_fitting"], sram // (64 * 2), words=("did you leave out",))
    ns["check_lazy_overhead"](2 / 64)
    _raises_with(ns["check_lazy_overhead"], 1 / 64, words=("float32",))
    ns["check_combine"](_solution("05_multiply_v_once", "combine"))
    _raises_with(ns["check_combine"], lambda parts: sum(p[2] for p in parts) / len(parts), words=("plain average",))
    _raises_with(ns["check_combine"], lambda parts: sum(p[1] * p[2] for p in parts) / sum(p[1] for p in parts),
                 words=("different maxima",))


def test_04_new_checks():
    ns = _checks("04_flashattention2")
    ns["check_fa2_fewer_reads"](128, 64)
    _raises_with(ns["check_fa2_fewer_reads"], 64, 128, words=("Br larger",))
    ns["check_tile_flops"](64, 4288)
    _raises_with(ns["check_tile_flops"], 64, 100, words=("subtract",))
    ns["check_causal_ctas"](32, 31)
    _raises_with(ns["check_causal_ctas"], 16, 31, words=("not the thread blocks",))
    _raises_with(ns["check_causal_ctas"], 32, 0, words=("visits most",))


def test_the_open_questions_have_checks():
    """01's exercise 5 (no overlap against the roofline's max), 04's exercise 4 (P from S and L alone) and 07's exercise
    5 (FA1's recomputed D): each check takes the right answer and refuses the typical wrong ones with a message."""
    from analysis.roofline import roofline
    from counting import backward_forms as bf
    from counting import closed_forms
    from counting.gpus import get_gpu

    ns = _checks("01_why_io_matters")
    h200 = get_gpu("h200")
    br, bc = closed_forms.fa1_blocks(h200.sram_bytes, 64)
    c = closed_forms.counts("naive", 4, 32, 4096, 4096, 64, dtype="fp16", block_q=br, block_k=bc,
                            sram_bytes=h200.sram_bytes)
    rf = roofline(c, h200)
    ns["res"] = {("naive", 4096): (c, rf)}
    times = (rf.t_memory_s, rf.t_matmul_s, rf.t_nonmatmul_s)
    ns["check_no_overlap"](sum(times) / max(times))
    for wrong, words in ((max(times) / sum(times), "upside down"), (3.0, "three times equal"), (1.0, "divide")):
        with pytest.raises(AssertionError, match=words):
            ns["check_no_overlap"](wrong)

    ns = _checks("04_flashattention2")
    ns["check_p_from_lse"](lambda S, L: torch.exp(S - L[..., None]))
    with pytest.raises(AssertionError, match="overflows"):
        ns["check_p_from_lse"](lambda S, L: torch.exp(S) / torch.exp(L[..., None]))
    with pytest.raises(AssertionError, match="normaliser"):
        ns["check_p_from_lse"](lambda S, L: torch.exp(S - S.amax(-1, keepdim=True)))

    ns = _checks("07_backward_recomputation")
    fa1, fa2 = (bf.backward_counts(v, 1, 1, 4096, 4096, 64, dtype="fp16", block_q=64, block_k=64) for v in ("fa1", "fa2"))
    flops, o_bytes = fa1.flops["other"] - fa2.flops["other"], fa1.read_bytes["O"] - fa2.read_bytes["O"]
    ns["check_d_recompute"](flops, o_bytes)
    with pytest.raises(AssertionError, match="one visit"):
        ns["check_d_recompute"](flops, 4096 * 64 * 2)
    with pytest.raises(AssertionError, match="bytes"):
        ns["check_d_recompute"](flops, o_bytes // 2)
    with pytest.raises(AssertionError, match="multiply and an add"):
        ns["check_d_recompute"](flops // 2, o_bytes)


def test_09():
    """Notebook 9's checks: the LSE merge (large lse, all-empty rows), the split rule, a decode step's K/V bytes."""
    from counting import split_rule

    ns = _checks("09_decoding")

    def merge(o_parts, lse_parts):
        m = lse_parts.amax(0)
        m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        w = torch.exp(lse_parts - m_safe)
        total = w.sum(0)
        o = (w.unsqueeze(-1) * o_parts).sum(0) / torch.where(total == 0, torch.ones_like(total), total).unsqueeze(-1)
        return o, m_safe + torch.log(total)

    ns["check_merge"](merge)
    with pytest.raises(AssertionError, match="overflows"):  # the textbook formula without the max
        ns["check_merge"](lambda o, lse: ((lse.exp().unsqueeze(-1) * o).sum(0) / lse.exp().sum(0).unsqueeze(-1),
                                          torch.log(lse.exp().sum(0))))
    with pytest.raises(AssertionError, match="weight o_s"):
        ns["check_merge"](lambda o, lse: (o.mean(0), torch.logsumexp(lse, 0)))

    def no_guard(o_parts, lse_parts):  # right but for the all-empty row: NaN there
        m = lse_parts.amax(0)
        w = torch.exp(lse_parts - m)
        return (w.unsqueeze(-1) * o_parts).sum(0) / w.sum(0).unsqueeze(-1), m + torch.log(w.sum(0))

    with pytest.raises(AssertionError, match="every split is empty"):
        ns["check_merge"](no_guard)

    ns["check_splits"](lambda b, hk, tiles, n, bc: split_rule.num_splits(b, hk, tiles, n, bc))
    with pytest.raises(AssertionError):  # one wave, not two
        ns["check_splits"](lambda b, hk, tiles, n, bc: max(1, min(-(-132 // (b * hk * tiles)), -(-n // bc))))
    ns["check_kv_bytes"](2 * 4 * 8 * 32768 * 128 * 2)
    with pytest.raises(AssertionError, match="once per kv head"):
        ns["check_kv_bytes"](2 * 4 * 64 * 32768 * 128 * 2)
