"""The GPU model's plots (matplotlib, imported only when a plot is asked for)."""
from __future__ import annotations

from analysis.style import line_style  # one style per kernel, the same in every plot
from gpumodel.accuracy import family  # validate's label -> the kernel


def plot_validation(rows: list[dict], path: str, backward: list[dict] | None = None, heldout: dict | None = None) -> None:
    """Model against measured time, log-log, ±15% band shaded, one colour per kernel; held-out cells filled, training
    cells hollow. Panels: the forward on the H200 (every bench cell and ncu duration), the backward on each GPU its
    fitted runs came from (gpumodel.backward_model rows: the H200's grid, v4's H100 A/B), and each GPU the fit is carried over to (its held-out runs, forward and backward:
    every cell held out). The same model the report and predict print."""
    import matplotlib  # here, not at the top: matplotlib only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("GPU model vs H200 measurements, forward (hollow: fitted cells)",
               [dict(kernel=family(r["kernel"]), measured=r["measured"], model=r["model"], train=r["train"])
                for r in rows if "time" in r["quantity"]])]
    for gpu in sorted({r.get("gpu", "h200") for r in backward or ()}, reverse=True):  # each on the GPU it ran on
        panels.append((f"backward, {gpu.upper()} (hollow: fitted cells)",
                       [dict(kernel=r["kernel"], measured=r["time_s"], model=r["model_s"], train=r["train"])
                        for r in backward if r.get("gpu", "h200") == gpu]))
    for key, doc in (heldout or {}).items():
        if "cells" in doc:
            panels.append((f"{key.upper()} held out (the H200 fit carried over): forward ●, backward ▲",
                           [dict(kernel=r["kernel"], measured=r["measured_s"], model=r["model_s"], train=False,
                                 marker="^" if r["pass_name"] == "backward" else "o")
                            for r in doc["cells"] if r["model_s"]]))
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 6), squeeze=False)
    for ax, (title, times) in zip(axes[0], panels):
        _panel(ax, title, times)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _panel(ax, title: str, times: list[dict]) -> None:
    kernels = sorted({r["kernel"] for r in times})
    lo = min(min(r["model"], r["measured"]) for r in times) * 0.8
    hi = max(max(r["model"], r["measured"]) for r in times) * 1.25
    xs = [lo, hi]
    ax.fill_between(xs, [x / 1.15 for x in xs], [x * 1.15 for x in xs], color="0.9", label="±15%")
    ax.plot(xs, xs, color="0.5", lw=0.8)
    for k in kernels:
        for train in (False, True):
            sel = [r for r in times if r["kernel"] == k and r["train"] == train]
            if not sel:
                continue
            st = line_style(k)
            for marker in dict.fromkeys(r.get("marker", st["marker"]) for r in sel):
                pts = [r for r in sel if r.get("marker", st["marker"]) == marker]
                ax.scatter([r["measured"] for r in pts], [r["model"] for r in pts], s=14, marker=marker,
                           facecolors="none" if train else st["color"], edgecolors=st["color"],
                           label=f"{k}{' (fit)' if train else ''}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("GPU model time (s)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=1, loc="upper left")
