"""One fixed plot style per kernel, used by every plot (notebooks and analysis/plots*.py).

A kernel keeps its colour, marker and line style in every figure, and no two kernels share both
colour and marker (tests/test_style.py holds the table to that). Colour follows the algorithm
(naive grey, FA1 orange, FA2 blue, v_once red/purple, SDPA green/brown), the marker and line style
the tier, so a reader can tell `fa2` from `fa2_tc` without the legend.
"""
from __future__ import annotations

# kernel (or variant) name -> matplotlib keyword arguments
STYLES: dict[str, dict] = {
    # teaching tier (and the PyTorch references of the same name): circles / triangles, solid lines
    "naive": dict(color="tab:gray", marker="o", linestyle="-"),
    "fa1": dict(color="tab:orange", marker="o", linestyle="-"),
    "fa2": dict(color="tab:blue", marker="o", linestyle="-"),
    "fa2_swapped": dict(color="tab:blue", marker=">", linestyle="--"),  # the references' swapped blocks
    "v_once": dict(color="tab:red", marker="o", linestyle="-"),
    "v_once_eager": dict(color="tab:purple", marker="o", linestyle="-"),
    "v_once_auto_lazy": dict(color="tab:red", marker="v", linestyle="-"),
    "v_once_auto_eager": dict(color="tab:purple", marker="v", linestyle="-"),
    "v_once_sram_lazy": dict(color="tab:red", marker="P", linestyle=":"),
    "v_once_sram_eager": dict(color="tab:purple", marker="P", linestyle=":"),
    "v_once_hbm_lazy": dict(color="tab:red", marker="X", linestyle="-."),
    "v_once_hbm_eager": dict(color="tab:purple", marker="X", linestyle="-."),
    "split_kv": dict(color="tab:pink", marker="*", linestyle="-"),  # decoding (issue 44)
    # tensor-core tier: squares / diamonds, thicker lines
    "fa2_tc": dict(color="tab:blue", marker="s", linestyle="-", linewidth=2.2),
    "fa2_wgmma": dict(color="navy", marker="D", linestyle="-", linewidth=2.2),
    "v_once_tc": dict(color="tab:red", marker="p", linestyle="-"),  # bench_kernels: its default build
    "v_once_tc[sram,lazy]": dict(color="tab:red", marker="s", linestyle="-"),
    "v_once_tc[sram,eager]": dict(color="tab:purple", marker="s", linestyle="-"),
    "v_once_tc[hbm,lazy]": dict(color="tab:red", marker="d", linestyle=":"),
    "v_once_tc[hbm,eager]": dict(color="tab:purple", marker="d", linestyle=":"),
    "split_kv_fast": dict(color="tab:pink", marker="h", linestyle="-", linewidth=2.2),
    # PyTorch SDPA backends: triangles, dashed
    "sdpa_math": dict(color="tab:brown", marker="^", linestyle="--"),
    "sdpa_efficient": dict(color="tab:olive", marker="^", linestyle="--"),
    "sdpa_flash": dict(color="tab:green", marker="^", linestyle="--"),
    "sdpa_cudnn": dict(color="tab:cyan", marker="^", linestyle="--"),
}

# kernels not in the table (a new variant, a tuning candidate) take the first unused pair from here
_SPARE = [dict(color=c, marker=m, linestyle="-.") for m in ("P", "*", "h") for c in
          ("tab:pink", "black", "gold", "teal", "magenta")]
_assigned: dict[str, dict] = {}


def line_style(kernel: str, markersize: float = 4) -> dict:
    """plot() keyword arguments for `kernel`: the table's entry, else a spare one fixed for the session."""
    base = kernel.split("{")[0]
    style = STYLES.get(kernel) or STYLES.get(base)
    if style is None:
        if base not in _assigned:
            _assigned[base] = _SPARE[len(_assigned) % len(_SPARE)]
        style = _assigned[base]
    return dict(style, markersize=markersize)


def colour(kernel: str) -> str:
    """The kernel's colour alone (bar charts)."""
    return line_style(kernel)["color"]


def tier(kernel: str) -> str:
    """'teaching', 'tensor-core' or 'library' (SDPA): the tiers plots keep in separate panels."""
    if kernel.startswith("sdpa"):
        return "library"
    return "tensor-core" if ("_tc" in kernel or "wgmma" in kernel) else "teaching"


def legend_outside(ax, **kwargs) -> None:
    """A legend to the right of the axes, off the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=7, **kwargs)


def variant_styles() -> dict[str, tuple[str, str, str]]:
    """(colour, marker, line style) per name: the shape analysis/plots.py draws with."""
    return {k: (v["color"], v["marker"], v["linestyle"]) for k, v in STYLES.items()}
