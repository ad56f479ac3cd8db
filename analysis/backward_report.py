"""`fa-traffic report --pass backward|train`: what recomputation costs and what it buys.

    fa-traffic report --pass backward               # the backward alone
    fa-traffic report --pass train --plot fp.png    # forward + backward; footprint against N

Same rows, blocks, SRAM and roofline as the forward report (`analysis.report_common`), from
`counting.backward_forms`, plus two columns:
    saved      memory saved for the backward: bytes the forward keeps beyond q, k, v and o
               (naive: P, Nq·Nk·B·H in the input dtype; fa1: ℓ, m; fa2, v_once: lse, Nq·B·H floats)
    recompute  FLOPs the backward spends rebuilding S = τ Q Kᵀ and P = exp(S - L) (0 for naive),
               with their share of the pass's FLOPs
× min compares with Q, K, V, O, dO, lse read once (Q, O, dO, lse: rows that see a key) and dQ, dK, dV written once (train: plus the
forward's minimum). TFLOP/s: the work each variant's pass executes, 2·d per visible (query, key) pair per product
(backward_forms.pass_work_flops, read off the counted matmul FLOPs): fa1, fa2 and v_once's backward five products
(10·d: S again, dP, dV, dQ, dK), naive's four (8·d: it reads P and recomputes nothing); train adds the forward's
two (4·d). A rate built on it never passes the matmul roof (the executed FLOPs cover every visible pair).
JSON fields as the forward report's, with attention_flops that work (not the forward's times a constant),
paper_flops the papers' convention (the forward's 4·Nq·Nk·d, halved causal, times 2.5 backward / 3.5 train,
whatever the variant), roofline.predicted_tflops = attention_flops / roofline time; plus pass, saved_bytes and
recompute_flops.
"""
from __future__ import annotations

from functools import lru_cache

from analysis import report_common as rc
from analysis.report_gpu import full_gpu_problem
from analysis.format import human_bytes, human_flops, human_time, render_table, say
from analysis.style import line_style
from counting import backward_forms as bf
from counting import closed_forms as cf
from counting.gpus import GPUS, get_gpu
from counting.headline import min_hbm_bytes

COLUMNS = ("variant", "N", "d", "Br×Bc", "HBM read", "HBM write", "× min", "SRAM", "saved", "matmul",
           "exp", "other", "recompute", "t mem", "t matmul", "t non-mm", rc.PAPERS_BOUND, rc.PAPERS_TFLOPS)
# the GPU model's columns (issue 43): the kernel that runs each variant's backward, priced by gpumodel.backward_model
MODEL_COLUMNS = ("kernel", "model time", "bound", "TFLOP/s")
PAPERS_VERDICT = (rc.PAPERS_BOUND, rc.PAPERS_TFLOPS)  # left out of a table that has the model's columns
PAPERS_LEFT_OUT = ("the papers' no-cache bound and TFLOP/s are left out where the GPU model prices the kernels (they "
                   "charge every request to HBM and call FA2 memory-bound, which the measured backward is not; "
                   "--format json keeps them as roofline); t mem, t matmul, t non-mm: the counts at the datasheet's rates.")
BWD_KERNEL_OF = {"fa2": "fa2_wgmma", "v_once": "fa2_wgmma"}  # v_once's backward is fa2's (counting.backward_forms)
GROUPS = (("Br×Bc", "d", "HBM read", "HBM write", "× min", "SRAM", "saved"),
          ("matmul", "exp", "other", "recompute"),
          ("t mem", "t matmul", "t non-mm", rc.PAPERS_BOUND, rc.PAPERS_TFLOPS),
          MODEL_COLUMNS)


def model_fields(pass_name: str, variant: str, batch, heads, n_q, n_k, d, dtype, causal, gpu_key) -> dict:
    """The backward model's verdict for the kernel that runs variant's backward (gpumodel.backward_model), or
    {"why": ...} where there is none: GPU not covered, no modelled kernel, a head dim or dtype it was not fitted at."""
    from gpumodel import backward_model as bm

    if gpu_key not in bm.COVERED_GPUS:
        return {"why": f"the GPU model covers the {', '.join(g.upper() for g in bm.COVERED_GPUS)} only"}
    kernel = BWD_KERNEL_OF.get(variant)
    if kernel is None:
        return {"why": f"no modelled backward kernel runs {variant} (fa2_wgmma runs fa2's and v_once's)"}
    return dict(_kernel_model(pass_name, kernel, batch, heads, n_q, n_k, d, dtype, causal, gpu_key))


@lru_cache(maxsize=256)  # fa2 and v_once run one kernel: priced once per shape
def _kernel_model(pass_name, kernel, batch, heads, n_q, n_k, d, dtype, causal, gpu_key) -> dict:
    from gpumodel import backward_model as bm

    try:
        if pass_name == "train":
            t = bm.predict_train(kernel, batch, heads, n_q, n_k, d, dtype, causal, gpu=gpu_key)
            return dict(kernel=kernel, time_s=t["time_s"], tflops=t["tflops"], bound=t["bound"],
                        forward_s=t["forward_s"], backward_s=t["backward_s"])
        p = bm.predict(kernel, batch, heads, n_q, n_k, d, dtype, causal, gpu=gpu_key)
    except ValueError as e:
        return {"why": str(e).splitlines()[0]}
    return dict(kernel=kernel, time_s=p.time_s, tflops=p.tflops, bound=p.bound, terms=dict(p.terms),
                levels=dict(p.levels), block_q=p.br, block_k=p.bc)


def min_bytes(pass_name, batch, heads, n_q, n_k, d, itemsize, causal=False) -> int:
    bwd = bf.min_backward_hbm_bytes(batch, heads, n_q, n_k, d, itemsize, causal)
    if pass_name == "backward":
        return bwd
    return bwd + min_hbm_bytes(batch, heads, n_q, n_k, d, itemsize, causal)


def blocks(args, sram: int, d: int) -> tuple[int, int, str]:
    """FA1's rule (the block rule of FA1 Alg. 1 line 1) applied to half the SRAM: the backward holds two score
    tiles (S/P and dP/dS) and two accumulators (dK_j, dV_j) where the forward holds one and one, so
    the printed rule's blocks overflow its float32 working set; --block-q/--block-k override."""
    if args.block_q or args.block_k:
        return rc._blocks(args, sram, d)
    br, bc = cf.fa1_blocks(sram // 2, d)
    return br, bc, "fa1_half_sram"


def build_records(args) -> list[dict]:
    gpu = get_gpu(args.gpu)
    configs = rc._configs(args, False)
    missing = sorted({name for name, _ in configs if not bf.has_backward(name)})
    if missing:  # a registered variant without a backward closed form (docs/design.md, how to add a variant)
        why = f"no backward closed form for {', '.join(missing)} (counting/backward_forms.py)"
        if rc._flatten(args.variant):
            raise rc.CliError(f"--pass {args.pass_name}: {why}")
        say(f"fa-traffic: --pass {args.pass_name} leaves out {', '.join(missing)}: {why}")
        configs = [(name, opts) for name, opts in configs if name not in missing]
    problems = rc._problems(args, rc.DEFAULT_SEQ)
    sram = args.sram or gpu.sram_bytes
    rc._check_sram_can_hold_something(configs, problems, sram, args.dtype)
    recs = []
    for n_q, n_k, d in problems:
        for name, opts in configs:
            br, bc, rule = blocks(args, sram, d)
            batch, heads = (full_gpu_problem(n_q, d) if getattr(args, "full_gpu", False)  # as the forward (issue 43)
                            else (args.batch, args.heads))
            tr = bf.pass_counts(args.pass_name, name, batch, heads, n_q, n_k, d,
                                causal=args.causal, dtype=args.dtype, block_q=br, block_k=bc,
                                sram_bytes=sram, **opts)
            rec = rc.record(tr, gpu, rule)
            rec["pass"] = args.pass_name
            rec["min_hbm_bytes"] = min_bytes(args.pass_name, batch, heads, n_q, n_k, d,
                                             cf.DTYPES[tr.dtype], args.causal)
            rec["saved_bytes"] = tr.saved_bytes
            rec["recompute_flops"] = dict(tr.recompute_flops)
            rec["gpu_model"] = model_fields(args.pass_name, name, batch, heads, n_q, n_k, d, args.dtype,
                                            args.causal, gpu.key)
            recs.append(rec)
    return _one_row_per_same_pass(recs) if args.pass_name == "backward" else recs


_COUNT_KEYS = ("read_bytes", "write_bytes", "flops", "sram_peak_bytes", "saved_bytes", "recompute_flops",
               "dsmem_bytes")


def _one_row_per_same_pass(recs: list[dict]) -> list[dict]:
    """One record where a variant's forward options leave its backward unchanged: v_once's backward is fa2's
    whatever its forward's placement and rescale (backward_forms), so its three configs gave three identical
    rows. The kept record is labelled by the variant alone, its forward options set to None."""
    out, seen = [], {}
    for r in recs:
        key = (r["variant"], r["seq_q"], r["seq_k"], r["head_dim"])
        first = seen.get(key)
        if first is None:
            seen[key] = r
            out.append(r)
            continue
        if any(first[k] != r[k] for k in _COUNT_KEYS):  # a backward that does depend on them: keep every row
            out.append(r)
            continue
        first.update(label=r["variant"], placement=None, placement_resolved=None, rescale=None)
    return out


def row(r: dict) -> list[str]:
    cells = rc._report_row(r)
    total, rec = sum(r["flops"].values()), sum(r["recompute_flops"].values())
    recompute = f"{human_flops(rec)} ({100 * rec / total:.0f}%)" if rec else "0"
    i = list(rc.REPORT_COLUMNS).index("SRAM") + 1
    cells.insert(i, human_bytes(r["saved_bytes"]))
    cells.insert(i + 4, recompute)
    g = r.get("gpu_model", {})
    if "time_s" in g:
        cells += [g["kernel"], human_time(g["time_s"]), g["bound"], f"{g['tflops']:.4g}"]
    else:
        cells += ["—", "—", "—", "—"]
    return cells


FORWARD_TFLOPS = "TFLOP/s = 4·d per visible (query, key) pair / roofline time."


def products_per_pair(r: dict) -> int:
    """The products a record's pass executes per visible (query, key) pair: attention_flops / (2·d·pairs)."""
    from counting.headline import visible_pairs

    pairs = r["batch"] * r["heads"] * visible_pairs(r["seq_q"], r["seq_k"], r["causal"])
    return r["attention_flops"] // (2 * r["head_dim"] * pairs)


def tflops_caption(recs) -> str:
    """The FLOP count the TFLOP/s column divides by, per variant, as the records hold it."""
    per = {}
    for r in recs:
        per.setdefault(products_per_pair(r), []).append(r["variant"])
    parts = "; ".join(f"{', '.join(dict.fromkeys(names))} {n} products, {2 * n}·d" for n, names in sorted(per.items()))
    naive = "; naive reads P and recomputes nothing" if any(r["variant"] == "naive" for r in recs) else ""
    return (f"TFLOP/s = the FLOPs each variant's pass executes, 2·d per visible (query, key) pair per product "
            f"({parts}{naive}) / roofline time.")


def cmd_report(args) -> int:
    recs = build_records(args)
    if args.plot:
        rc._plot(plot_footprint, recs, args.plot)
    header, rows = list(COLUMNS) + list(MODEL_COLUMNS), [row(r) for r in recs]
    modelled = [r for r in recs if "time_s" in r.get("gpu_model", {})]
    if not modelled:  # no row has the model: no model columns
        header = header[:len(COLUMNS)]
        rows = [x[:len(COLUMNS)] for x in rows]
    else:  # the model's verdict only (issue 43): beside it the papers' no-cache roofline called FA2 "memory"-bound and
        # put FA1 (no modelled kernel) ahead of it, which the measured backward contradicts; JSON keeps it (roofline)
        drop = [header.index(c) for c in PAPERS_VERDICT]
        header = [h for i, h in enumerate(header) if i not in drop]
        rows = [[c for i, c in enumerate(x) if i not in drop] for x in rows]
    if len({r["head_dim"] for r in recs}) == 1:
        i = header.index("d")
        header.pop(i)
        for r in rows:
            r.pop(i)
    title = (f"fa-traffic report --pass {args.pass_name}: HBM traffic, FLOPs, memory saved for the "
             f"backward, recomputation (whole problem)")
    if args.format != "table":
        # no plan: _emit reads one for a table's caption only (analysis.cli.cmd_report ran the forward's checks)
        rc._emit(args, None, lambda: iter(recs), table_rows=lambda _recs: (header, rows), title=title)
        return 0
    caption = rc._caption(args, {r["sram_bytes"] for r in recs}, sorted({r["head_dim"] for r in recs}),
                           get_gpu(args.gpu)).replace(
        "FA1 rule Bc=⌈M/4d⌉", "FA1 rule on half the SRAM (two score tiles) Bc=⌈M/8d⌉").replace(
        FORWARD_TFLOPS, tflops_caption(recs)).replace(rc._shape_text(args, ()), rc._shape_text(args, recs), 1)
    caption += ("\nsaved = bytes the forward keeps for the backward beyond q, k, v, o; recompute = FLOPs rebuilding S "
                "and P (share of the pass); × min here also counts dO read and dQ, dK, dV written once.")
    if modelled:
        caption = caption.replace(rc.papers_roofline_line(get_gpu(args.gpu), args.pass_name), PAPERS_LEFT_OUT).replace(
            ") / roofline time.", ") / the model's time.")
        caption += (f"\nkernel, model time, bound, TFLOP/s: the GPU model ({gpu_name(args)}) of the kernel that runs the "
                    f"{args.pass_name}"
                    + (" (gpu_model forward + gpumodel.backward_model)" if args.pass_name == "train" else
                       " (gpumodel.backward_model: per tile five products, the recomputed exponentials, dQ's fp32 "
                       "accumulation through the L2)")
                    + f"; {checked_on(args)}.")
    whys = sorted({r["gpu_model"]["why"] for r in recs if "why" in r.get("gpu_model", {})})
    if whys and modelled:
        caption += f"\nrows with no model columns: {'; '.join(whys)}."
    if any(r["variant"] == "v_once" and r["placement"] is None for r in recs):
        caption += "\nv_once: one row, its backward is fa2's whatever the forward's placement and rescale."
    groups = [[header.index(h) for h in g if h in header] for g in GROUPS]
    render_table(header, rows, title=title, caption=caption, groups=groups)
    return 0


BWD_KERNEL = "fa2_wgmma"  # what BWD_KERNEL_OF names: v4 since issue 42, its constants fitted on the H100


def gpu_name(args) -> str:
    """The GPU and where the constants of the backward model's fa2_wgmma (and, --pass train, the forward's) come
    from: each is fitted on one GPU's runs and carried over to the other (gpumodel.backward_model.footing)."""
    from gpumodel import backward_model as bm
    from gpumodel import coverage

    g = get_gpu(args.gpu)
    fit = bm.fit_gpu(BWD_KERNEL).upper()
    bwd = (f"{BWD_KERNEL}'s backward fitted on its {fit} runs" if bm.footing(BWD_KERNEL, g) == coverage.FITTED
           else f"{BWD_KERNEL}'s backward the {fit} fit carried over")
    if args.pass_name != "train":
        return f"{g.name}, {bwd}"
    fwd = ("the forward fitted on its runs" if coverage.footing(g) == coverage.FITTED
           else f"the forward the {coverage.FIT_GPU.upper()} fit carried over")
    return f"{g.name}, {bwd}, {fwd}"


def checked_on(args) -> str:
    from gpumodel import backward_model as bm
    from gpumodel import coverage

    from gpumodel import heldout

    g = get_gpu(args.gpu)
    held = bm.held_out_line(BWD_KERNEL, g)
    if held:
        where = ", ".join(f"results/{s}" for s in held["source"].split(", "))
        return f"fa-traffic validate checks {BWD_KERNEL}'s backward against its held-out {g.key.upper()} cells ({where})"
    if coverage.footing(g) == coverage.CARRIED and any(
            t["pass_name"] == "backward" and t["kernel"] == BWD_KERNEL for t in (heldout.load(g.key) or {}).get("track", [])):
        return f"checked on held-out {g.key.upper()} runs (results/gpu_model_{g.key}_heldout.json)"
    return (f"no {g.key.upper()} timing of {BWD_KERNEL}'s backward (v4) is committed: unvalidated on the "
            f"{g.key.upper()} (v3, fa2_wgmma_v3, is checked against results/bwd_kernels_vs_sdpa_grid)")


def plot_footprint(recs, path) -> None:
    """Memory saved for the backward against N (one line per variant, log-log), with the GPU's HBM;
    beside it the pass's HBM traffic at the report's points."""
    from analysis import plots  # here, not at the top: plots imports matplotlib

    plt = plots.plt
    r0 = recs[0]
    ns = sorted({r["seq_q"] for r in recs})
    lo, hi = max(64, ns[0] // 8), ns[-1] * 8
    grid = sorted({int(lo * (hi / lo) ** (i / 48)) for i in range(49)} | set(ns))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.6))
    for name in cf.VARIANT_NAMES:
        if not any(r["variant"] == name for r in recs):
            continue
        st = line_style(name if name != "v_once" else "v_once_auto_lazy")  # a new variant: a spare style
        colour, marker, ls = st["color"], st["marker"], st["linestyle"]
        ys = [bf.saved_bytes(name, r0["batch"], r0["heads"], n, n + r0["seq_k"] - r0["seq_q"],
                             r0["dtype"]) for n in grid]
        label = {"naive": "naive: P (Nq·Nk)", "fa1": "fa1: ℓ, m (2·Nq floats)",
                 "fa2": "fa2: lse (Nq floats)", "v_once": "v_once: lse (as fa2)"}.get(name, name)
        ax1.plot(grid, ys, ls if name != "v_once" else ":", color=colour, lw=1.5, label=label)
        pts = [(r["seq_q"], r["saved_bytes"]) for r in recs if r["variant"] == name]
        ax1.plot(*zip(*pts), marker, color=colour, ms=5)
    gpu = GPUS[r0["gpu"]]
    hbm = gpu.hbm_bytes.value
    ax1.axhline(hbm, color="black", lw=0.8, ls="--")
    ax1.text(grid[0], hbm * 1.3, f"{gpu.name}: all of HBM", fontsize=8)
    lines = {}
    for r in recs:
        lines.setdefault(plots._key(r), []).append(r)
    for key, rs in lines.items():
        rs.sort(key=lambda r: r["seq_q"])
        st = line_style(key)
        colour, marker, ls = st["color"], st["marker"], st["linestyle"]
        ax2.plot([r["seq_q"] for r in rs], [r["hbm_bytes"] for r in rs], ls, marker=marker,
                 color=colour, lw=1.5, ms=5, label=key)
    for ax, base in ((ax1, 32), (ax2, 4)):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length Nq (tokens)")
        ax.grid(True, which="major", alpha=0.3)
        ax.yaxis.set_major_locator(plots.LogLocator(base=base, numticks=20))
        ax.yaxis.set_minor_locator(plots.LogLocator(base=base, subs=(), numticks=20))
        ax.yaxis.set_major_formatter(plots.FuncFormatter(plots._bytes_fmt))
        ax.xaxis.set_major_formatter(plots.FuncFormatter(
            lambda x, _p: f"{x / 1024:g}k" if x >= 1024 else f"{x:g}"))
        ax.legend(fontsize=8)
    ax1.set_ylabel("bytes kept from forward to backward")
    ax1.set_title(f"memory saved for the backward (B·H={r0['batch'] * r0['heads']}, {r0['dtype']})",
                  fontsize=10)
    ax2.set_ylabel("HBM traffic, read + write (bytes)")
    ax2.set_title(f"HBM traffic of the {r0['pass']} pass", fontsize=10)
    fig.suptitle(f"fa-traffic report --pass {r0['pass']} — d={r0['head_dim']}"
                 f"{', causal' if r0['causal'] else ''}: recomputation trades Θ(N²) bytes for FLOPs",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
