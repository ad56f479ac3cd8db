"""The GPU model's plots (matplotlib, imported only when a plot is asked for)."""
from __future__ import annotations

from analysis.style import line_style  # one style per kernel, the same in every plot
from gpumodel.accuracy import family  # validate's label -> the kernel


def plot_validation(rows: list[dict], path: str) -> None:
    """Model against measured time (every bench cell and ncu duration), log-log, ±15% band shaded;
    held-out cells filled, training cells hollow; one colour per kernel."""
    import matplotlib  # here, not at the top: matplotlib only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [r for r in rows if "time" in r["quantity"]]
    kernels = sorted({family(r["kernel"]) for r in times})
    fig, ax = plt.subplots(figsize=(7, 6))
    lo = min(min(r["model"], r["measured"]) for r in times) * 0.8
    hi = max(max(r["model"], r["measured"]) for r in times) * 1.25
    xs = [lo, hi]
    ax.fill_between(xs, [x / 1.15 for x in xs], [x * 1.15 for x in xs], color="0.9", label="±15%")
    ax.plot(xs, xs, color="0.5", lw=0.8)
    for k in kernels:
        for train in (False, True):
            sel = [r for r in times if family(r["kernel"]) == k and r["train"] == train]
            if not sel:
                continue
            st = line_style(k)
            ax.scatter([r["measured"] * 1e3 / 1e3 for r in sel], [r["model"] for r in sel], s=14, marker=st["marker"],
                       facecolors="none" if train else st["color"], edgecolors=st["color"],
                       label=f"{k}{' (fit)' if train else ''}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time (s): bench medians, ncu durations")
    ax.set_ylabel("GPU model time (s)")
    ax.set_title("GPU model vs H200 measurements (hollow: fitted cells)")
    ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the data
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
