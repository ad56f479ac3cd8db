"""Plots of fa-traffic records (matplotlib, Agg backend; imported only when a plot is asked for).

plot_sweep: FA1 Theorem 2 - HBM traffic against SRAM size M on log-log axes, one line per variant,
            the Θ(N²d²/M) line anchored at FA1's first point, where v_once's f row starts to fit,
            and the per-block SRAM of the known GPUs.
plot_report: HBM traffic and roofline-predicted TFLOP/s against sequence length.
"""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

from counting.gpus import GPUS  # noqa: E402

from analysis.style import variant_styles  # noqa: E402

STYLE = variant_styles()  # variant key -> (colour, marker, line style): the one table, analysis/style.py
LABELS = {
    "naive": "naive (S, P through HBM)",
    "fa1": "fa1 (Bc = ⌈M/4d⌉, Br = min(Bc, d))",
    "fa2": "fa2, same blocks (Br capped at d)",
    "fa2_swapped": "fa2, blocks swapped (Br = ⌈M/4d⌉, Bc = min(Br, d))",
    "v_once_auto_eager": "v_once auto, eager (◇ f spilled, ◆ f on chip)",
    "v_once_auto_lazy": "v_once auto, lazy (◇ f spilled, ◆ f on chip)",
}
KIB, MIB, GIB = 1024, 1024 ** 2, 1024 ** 3


def _key(r):
    if r.get("block_rule") == "swapped":
        return f"{r['variant']}_swapped"
    return r["variant"] if r["variant"] != "v_once" else f"v_once_{r['placement']}_{r['rescale']}"


def _bytes_fmt(x, _pos=None):
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if x >= size:
            v = x / size
            return f"{v:g} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return f"{x:g} B"


def _groups(recs, keys):
    out = {}
    for r in recs:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def _title(r):
    n = f"N={r['seq_q']}" if r["seq_q"] == r["seq_k"] else f"Nq={r['seq_q']}, Nk={r['seq_k']}"
    return (f"{n}, d={r['head_dim']}, {r['dtype']}{', causal' if r['causal'] else ''}, "
            f"B·H={r['batch'] * r['heads']}")


def plot_sweep(recs, path) -> None:
    problems = _groups(recs, ("seq_q", "seq_k", "head_dim"))
    fig, axes = plt.subplots(1, len(problems), figsize=(9.5 * len(problems), 6.2), squeeze=False)
    for ax, ((n_q, n_k, d), rows) in zip(axes[0], problems.items()):
        lines = _groups(rows, ())[()]
        by_key, any_over = {}, False
        for r in lines:
            by_key.setdefault(_key(r), []).append(r)
        for key, rs in by_key.items():
            rs.sort(key=lambda r: r["sram_bytes"])
            colour, marker, ls = STYLE.get(key, ("black", ".", "-"))
            xs = [r["sram_bytes"] for r in rs]
            ys = [r["hbm_bytes"] for r in rs]
            label = LABELS.get(key, key)
            ax.plot(xs, ys, ls, color=colour, lw=1.6, label=label, zorder=3)
            if key.startswith("v_once_auto"):
                on = [(x, y) for x, y, r in zip(xs, ys, rs) if r["placement_resolved"] == "sram"]
                off = [(x, y) for x, y, r in zip(xs, ys, rs) if r["placement_resolved"] != "sram"]
                if off:
                    ax.plot(*zip(*off), marker, color=colour, mfc="white", ms=5, zorder=4)
                if on:
                    ax.plot(*zip(*on), marker, color=colour, ms=5, zorder=4)
            else:
                fit = [(x, y) for x, y, r in zip(xs, ys, rs) if r["fits"]]
                if fit:
                    ax.plot(*zip(*fit), marker, color=colour, ms=4, zorder=4,
                            mfc="white" if key.endswith("swapped") else colour)
            over = [(x, y) for x, y, r in zip(xs, ys, rs) if not r["fits"]]
            if over:
                any_over = True
                ax.plot(*zip(*over), "x", color="black", ms=7, mew=1.4, zorder=5)
        # Θ(N²d²/M), anchored at FA1's smallest M
        fa1 = sorted(by_key.get("fa1", []), key=lambda r: r["sram_bytes"])
        if fa1:
            m0, y0 = fa1[0]["sram_bytes"], fa1[0]["hbm_bytes"]
            xs = sorted({r["sram_bytes"] for r in lines})
            ax.plot(xs, [y0 * m0 / x for x in xs], color="black", lw=1, ls=(0, (4, 3)), alpha=0.6,
                    label="Θ(N²d²/M) (anchored at fa1's first point)", zorder=2)
        # where v_once's f row starts to fit
        auto = sorted(by_key.get("v_once_auto_eager", []) or by_key.get("v_once_auto_lazy", []),
                      key=lambda r: r["sram_bytes"])
        first_on = next((r for r in auto if r["placement_resolved"] == "sram"), None)
        if first_on is not None and first_on is not auto[0]:
            need = first_on["sram_peak_bytes"]
            ax.axvline(need, color="tab:red", lw=1, ls=":", alpha=0.8)
            ax.annotate(f"v_once f row fits\n(working set {_bytes_fmt(need)})", (need, 0.97),
                        xycoords=("data", "axes fraction"), ha="left", va="top", fontsize=8,
                        color="tab:red", xytext=(4, 0), textcoords="offset points")
        # the per-block SRAM of the GPUs we know
        lo, hi = min(r["sram_bytes"] for r in lines), max(r["sram_bytes"] for r in lines)
        marks = {}
        for g in GPUS.values():
            marks.setdefault(g.sram_bytes, []).append(g.key.upper())
        for x, names in marks.items():
            if lo <= x <= hi:
                ax.axvline(x, color="0.55", lw=0.8, ls="-.", alpha=0.7, zorder=1)
                ax.annotate("/".join(names) + " max/block", (x, 0.03), xycoords=("data", "axes fraction"),
                            rotation=90, ha="right", va="bottom", fontsize=7.5, color="0.35",
                            xytext=(-2, 0), textcoords="offset points")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(_bytes_fmt))
        ax.yaxis.set_major_formatter(FuncFormatter(_bytes_fmt))
        ax.yaxis.set_major_locator(LogLocator(base=2, numticks=30))
        ax.yaxis.set_minor_locator(LogLocator(base=2, subs=(), numticks=30))
        ax.set_xlabel("SRAM per thread block M (bytes; blocks by FA1's rule Bc=⌈M/4d⌉, Br=min(Bc,d))")
        ax.set_ylabel("HBM traffic, read + write (bytes)")
        ax.set_title(f"HBM traffic vs SRAM size — {_title(lines[0])}", fontsize=11)
        ax.grid(True, which="major", alpha=0.3)
        if any_over:
            ax.plot([], [], "x", color="black", ms=7, mew=1.4, label="working set over M (does not fit)")
        ax.legend(fontsize=8, loc="lower left", framealpha=0.92)
    fig.suptitle("FA1 Theorem 2 from the exact counts: naive stays Θ(N²) whatever M; FA1 falls as "
                 "Θ(N²d²/M);\nFA2 falls only while Br = min(Bc, d) grows; v_once spills its f row "
                 "until it fits", fontsize=11.5)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_report(recs, path) -> None:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.6))
    model = any("tflops" in r.get("gpu_model", {}) for r in recs)  # issue 11: the default report's GPU model
    lines = {}
    for r in recs:
        key = _key(r)
        extra = []
        if len({x["head_dim"] for x in recs}) > 1:
            extra.append(f"d={r['head_dim']}")
        if len({x["seq_k"] - x["seq_q"] for x in recs}) > 1 and r["seq_k"] != r["seq_q"]:
            extra.append(f"Nk={r['seq_k']}")
        lines.setdefault((key, *extra), []).append(r)
    for (key, *extra), rs in lines.items():
        rs.sort(key=lambda r: r["seq_q"])
        colour, marker, ls = STYLE.get(key, ("black", ".", "-"))
        label = " ".join([key, *extra])
        xs = [r["seq_q"] for r in rs]
        for ax, ys in ((ax1, [r["hbm_bytes"] for r in rs]),
                       (ax2, [r.get("gpu_model", {}).get("tflops", math.nan if model else r["roofline"]["predicted_tflops"])
                             for r in rs])):  # a row no kernel runs: no GPU-model point
            ax.plot(xs, ys, ls, color=colour, lw=1.5, label=label)
            fit = [(x, y) for x, y, r in zip(xs, ys, rs) if r["fits"]]
            over = [(x, y) for x, y, r in zip(xs, ys, rs) if not r["fits"]]
            if fit:
                ax.plot(*zip(*fit), marker, color=colour, ms=5)
            if over:
                ax.plot(*zip(*over), marker, color=colour, mfc="white", ms=6)
    r0 = recs[0]
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length Nq (tokens)")
        ax.grid(True, which="major", alpha=0.3)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{x / 1024:g}k" if x >= 1024 else f"{x:g}"))
    ax1.set_yscale("log")
    ax1.yaxis.set_major_locator(LogLocator(base=2, numticks=12))
    ax1.yaxis.set_minor_locator(LogLocator(base=2, subs=(), numticks=12))
    ax1.yaxis.set_major_formatter(FuncFormatter(_bytes_fmt))
    ax1.set_ylabel("HBM traffic, read + write (bytes)" if not model else "global-memory requests (papers' count)")
    ax1.set_title(("the papers' count at each kernel's blocks" if model else "HBM traffic")
                  + " (hollow marker: working set over the SRAM)", fontsize=10)
    ax2.set_ylabel("predicted TFLOP/s (4·d·visible pairs / " + ("GPU-model time)" if model else "roofline time)"))
    ax2.set_yscale("log")
    ax2.set_title(f"GPU model of each variant's kernel on the {r0['gpu'].upper()}" if model else
                  f"roofline prediction on {r0['gpu'].upper()} (datasheet)", fontsize=10)
    ax1.legend(fontsize=8)
    fig.suptitle(f"fa-traffic report — d={r0['head_dim']}, {r0['dtype']}"
                 f"{', causal' if r0['causal'] else ''}, SRAM {_bytes_fmt(r0['sram_bytes'])} per block",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
