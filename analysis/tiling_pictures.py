"""Stepwise pictures of FA1's and FA2's tiling (issue 41, item 3): one small panel per step.

`frames(tiling, order)` walks the loops of the references (variants/fa1.py, variants/fa2.py) on the geometry of
`counting.tiling.Tiling` and says, per step, which tile of S is computed, which blocks of Q, K, V, O, l, m are on
chip, and which blocks cross to HBM (read or written). tests/test_tiling_pictures.py holds the transfers, summed
over the frames, equal to what `counting.memory.Memory` counts when the references run the same problem.

`draw_frames(tiling, order)` draws them as small multiples (static images render everywhere; sliders don't on
GitHub); `plot_visit_order(ax, tiling, visits)` draws a visit-order heatmap whose skipped tiles are coloured apart
from step 0. Torch-free: matplotlib and the tiling geometry only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from counting.tiling import Tiling

ALL = -1  # a transfer of the whole tensor (FA1's initialisation of O, l, m)

# which blocks index a tensor: query blocks (rows of Q) or key blocks (rows of K, V)
ROW_TENSORS = ("Q", "O", "l", "m", "lse")
KEY_TENSORS = ("K", "V")


@dataclass
class Frame:
    """One step: the tile (i, j) of S computed (None: a step without a tile), what is on chip, what crosses."""

    tile: tuple[int, int] | None
    on_chip: dict[str, set[int]] = field(default_factory=dict)  # tensor -> block indices held on chip
    reads: list[tuple[str, int]] = field(default_factory=list)  # (tensor, block) read from HBM this step
    writes: list[tuple[str, int]] = field(default_factory=list)  # (tensor, block) written to HBM this step
    note: str = ""


def frames(t: Tiling, order: str) -> list[Frame]:
    """The steps of 'fa1' (outer j over K/V, inner i; O, l, m read and written back at every tile; lse at the end)
    or 'fa2' (outer i, inner j; Q_i, O_i, l_i, m_i stay on chip; O_i and lse_i written once), as the references
    run them."""
    out: list[Frame] = []
    if order == "fa1":
        out.append(Frame(None, writes=[("O", ALL), ("l", ALL), ("m", ALL)],
                         note="init: O = 0, l = 0, m = -inf in HBM"))
        for j in range(t.t_c):
            for n, i in enumerate(t.q_blocks(j)):
                reads = ([("K", j), ("V", j)] if n == 0 else []) + [(x, i) for x in ("Q", "O", "l", "m")]
                out.append(Frame((i, j), on_chip={"K": {j}, "V": {j}, "Q": {i}, "O": {i}, "l": {i}, "m": {i}},
                                 reads=reads, writes=[("O", i), ("l", i), ("m", i)]))
        out.append(Frame(None, reads=[(x, i) for i in range(t.t_r) for x in ("l", "m")],
                         writes=[("lse", i) for i in range(t.t_r)], note="epilogue: lse = m + log l"))
    elif order == "fa2":
        for i in range(t.t_r):
            ks = list(t.k_blocks(i))
            if not ks:  # a query block that sees no key: O_i = 0 and lse_i written, nothing read but Q_i
                out.append(Frame(None, on_chip={"Q": {i}, "O": {i}, "l": {i}, "m": {i}}, reads=[("Q", i)],
                                 writes=[("O", i), ("lse", i)], note=f"Q block {i} sees no key"))
            for n, j in enumerate(ks):
                reads = ([("Q", i)] if n == 0 else []) + [("K", j), ("V", j)]
                writes = [("O", i), ("lse", i)] if n == len(ks) - 1 else []
                out.append(Frame((i, j), on_chip={"Q": {i}, "K": {j}, "V": {j}, "O": {i}, "l": {i}, "m": {i}},
                                 reads=reads, writes=writes))
    else:
        raise ValueError(f"order must be 'fa1' or 'fa2', got {order!r}")
    return out


def transferred_elements(t: Tiling, fs: list[Frame], d: int) -> tuple[dict[str, int], dict[str, int]]:
    """(reads, writes): elements per tensor summed over the frames, for head dim d (B = H = 1), in the units of
    `Memory.counts.reads` / `.writes`."""
    def size(name, blk):
        if name in KEY_TENSORS:
            rows = t.n_k if blk == ALL else (lambda c: c[1] - c[0])(t.cols(blk))
        else:
            rows = t.n_q if blk == ALL else (lambda r: r[1] - r[0])(t.rows(blk))
        return rows * (d if name in ("Q", "K", "V", "O") else 1)

    totals = ({}, {})
    for f in fs:
        for tot, moves in zip(totals, (f.reads, f.writes)):
            for name, blk in moves:
                tot[name] = tot.get(name, 0) + size(name, blk)
    return totals


def visit_grid(t: Tiling, visits):
    """Tr x Tc float array: the step at which tile (i, j) is visited, NaN where it is skipped."""
    import numpy as np

    grid = np.full((t.t_r, t.t_c), np.nan)
    for step, (i, j) in enumerate(visits):
        grid[i, j] = step
    return grid


SKIPPED = "#d9d9d9"  # skipped tiles: grey, apart from every step's colour (step 0 included)


def plot_visit_order(ax, t: Tiling, visits, title="", xlabel="key/value block j", ylabel="query block i"):
    """A visit-order heatmap: steps 0.. in viridis, tiles the mask hides (never visited) in hatched grey, so step 0
    and 'skipped' never share a colour. Returns the image (for a colorbar)."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    grid = visit_grid(t, visits)
    cmap = plt.get_cmap("viridis").with_extremes(bad=SKIPPED)
    n = max(1, int(np.nanmax(grid)) if np.isfinite(grid).any() else 1)
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=n)
    for (i, j), s in np.ndenumerate(grid):
        if np.isnan(s):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="none", edgecolor="grey", hatch="//", lw=0))
            ax.text(j, i, "skip", ha="center", va="center", fontsize=7, color="dimgrey")
        else:
            ax.text(j, i, int(s), ha="center", va="center", color="white" if s < n / 2 else "black")
    ax.set_xticks(range(t.t_c))
    ax.set_yticks(range(t.t_r))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return im


# colours of the frames
ON_CHIP, READ, WRITE, BOTH, HBM = "#ffd54f", "tab:blue", "tab:red", "tab:purple", "white"


def _strip(ax, name, cells, horizontal, on_chip, reads, writes, label_at):
    """One tensor as a strip of blocks; cells: list of (x, y, w, h) per block."""
    from matplotlib.patches import Rectangle

    for b, (x, y, w, h) in enumerate(cells):
        fill = ON_CHIP if b in on_chip else HBM
        edge, lw = "grey", 0.6
        rd = (name, b) in reads or (name, ALL) in reads
        wr = (name, b) in writes or (name, ALL) in writes
        if rd or wr:
            edge, lw = (BOTH if rd and wr else WRITE if wr else READ), 2.2
        ax.add_patch(Rectangle((x, y), w, h, facecolor=fill, edgecolor=edge, lw=lw, zorder=3 if lw > 1 else 2))
    ax.text(*label_at, name, ha="center", va="center", fontsize=7)


def draw_frame(ax, t: Tiling, f: Frame, done: set, title: str = ""):
    """One step: S with the tile being computed (dark), the tiles already done (light) and skipped (hatched);
    Q to the left, K and V above, O, l, m to the right; on-chip blocks filled, read blocks edged blue, written
    blocks edged red."""
    from matplotlib.patches import Rectangle

    tr, tc = t.t_r, t.t_c
    visited = set(t.visited())
    for i in range(tr):
        for j in range(tc):
            if (i, j) == f.tile:
                fc, hatch = "tab:green", None
            elif (i, j) in done:
                fc, hatch = "#c7e9c0", None
            elif (i, j) not in visited:
                fc, hatch = SKIPPED, "//"
            else:
                fc, hatch = "white", None
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=fc, edgecolor="grey", lw=0.5, hatch=hatch))
    ax.text(tc / 2, tr + 0.45, "S", ha="center", va="center", fontsize=7)
    chip = f.on_chip
    _strip(ax, "Q", [(-1.2, i, 0.8, 1) for i in range(tr)], False, chip.get("Q", set()), f.reads, f.writes,
           (-0.8, tr + 0.45))
    _strip(ax, "K", [(j, -1.2, 1, 0.8) for j in range(tc)], True, chip.get("K", set()), f.reads, f.writes,
           (-0.6, -0.8))
    _strip(ax, "V", [(j, -2.2, 1, 0.8) for j in range(tc)], True, chip.get("V", set()), f.reads, f.writes,
           (-0.6, -1.8))
    for k, (name, w) in enumerate((("O", 0.8), ("ℓ", 0.4), ("m", 0.4), ("lse", 0.4))):
        x0 = tc + 0.3 + sum((0.8, 0.4, 0.4)[:k]) + 0.3 * k
        key = "l" if name == "ℓ" else name
        _strip(ax, key, [(x0, i, w, 1) for i in range(tr)], False, chip.get(key, set()), f.reads, f.writes,
               (x0 + w / 2, tr + 0.45))
        ax.texts[-1].set_text(name)
    ax.set_xlim(-1.4, tc + 3.6)
    ax.set_ylim(tr + 2.3, -2.4)
    ax.set_aspect("equal")
    ax.axis("off")

    def names(moves):
        return " ".join(f"{'ℓ' if n == 'l' else n}{b}" if b != ALL else f"{'ℓ' if n == 'l' else n}(all)"
                        for n, b in moves) or "—"
    ax.set_title(title, fontsize=8)
    ax.text(tc / 2 + 1.0, tr + 0.9, f"read: {names(f.reads)}\nwrite: {names(f.writes)}", ha="center", va="top",
            fontsize=6.5)


def draw_frames(t: Tiling, order: str, cols: int = 4, panel: float = 2.5):
    """The figure: one panel per step of `order` ('fa1' or 'fa2') on tiling t, with a legend. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fs = frames(t, order)
    rows = -(-len(fs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * panel, rows * panel * 1.15 + 0.6), squeeze=False)
    done: set = set()
    for k, (ax, f) in enumerate(zip(axes.flat, fs)):
        head = f"step {k}: tile (i={f.tile[0]}, j={f.tile[1]})" if f.tile else f"step {k}: {f.note}"
        draw_frame(ax, t, f, done, head)
        if f.tile:
            done.add(f.tile)
    for ax in list(axes.flat)[len(fs):]:
        ax.axis("off")
    fig.legend(handles=[Patch(facecolor=ON_CHIP, edgecolor="grey", label="on chip (SRAM/registers)"),
                        Patch(facecolor="white", edgecolor=READ, lw=2, label="read from HBM this step"),
                        Patch(facecolor="white", edgecolor=WRITE, lw=2, label="written to HBM this step"),
                        Patch(facecolor="white", edgecolor=BOTH, lw=2, label="read and written back"),
                        Patch(facecolor="tab:green", label="tile of S computed now"),
                        Patch(facecolor="#c7e9c0", label="tiles done"),
                        Patch(facecolor=SKIPPED, hatch="//", label="skipped (causal mask)")],
               loc="lower center", ncol=4, fontsize=7, frameon=False)
    loops = {"fa1": "FA1: outer loop j over K/V blocks, inner loop i over Q blocks",
             "fa2": "FA2: outer loop i over Q blocks, inner loop j over K/V blocks"}[order]
    fig.suptitle(f"{loops} (Tr = {t.t_r}, Tc = {t.t_c}{', causal' if t.causal else ''})", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    return fig


# FA2 Algorithm 2, one visited tile (j outer, i inner): (line, what, operands, result, matmul?) in program order
BACKWARD_STEPS = [
    (10, "S = τ Q_i K_jᵀ  (recomputed)", ("Q_i", "K_j"), "S", True),
    (11, "P = exp(S − L_i)  (recomputed)", ("S", "L_i"), "P", False),
    (12, "dV_j += Pᵀ dO_i", ("P", "dO_i", "dV_j"), "dV_j", True),
    (13, "dP = dO_i V_jᵀ", ("dO_i", "V_j"), "dP", True),
    (14, "dS = P ∘ (dP − D_i)", ("P", "dP", "D_i"), "dS", False),
    (15, "dQ_i += dS K_j  (HBM round trip)", ("dS", "K_j", "dQ_i"), "dQ_i", True),
    (16, "dK_j += dSᵀ Q_i", ("dS", "Q_i", "dK_j"), "dK_j", True),
]
# where each operand lives during the tile
BACKWARD_HOME = {
    "K_j": "on chip for the whole inner loop", "V_j": "on chip for the whole inner loop",
    "dK_j": "on chip for the whole inner loop", "dV_j": "on chip for the whole inner loop",
    "Q_i": "read from HBM at every tile", "dO_i": "read from HBM at every tile",
    "L_i": "read from HBM at every tile", "D_i": "read from HBM at every tile",
    "dQ_i": "read and written back at every tile",
    "S": "on chip, this tile only", "P": "on chip, this tile only", "dP": "on chip, this tile only",
    "dS": "on chip, this tile only",
}
_HOME_COLOUR = {"on chip for the whole inner loop": ON_CHIP, "read from HBM at every tile": "#9ecae1",
                "read and written back at every tile": "#c994c7", "on chip, this tile only": "#c7e9c0"}


def draw_backward_products(br: int = 64, bc: int = 64, d: int = 64):
    """FA2 Algorithm 2's work on one tile (i, j) as a table: a row per step (the five matmul products in bold, with
    their FLOPs for Br x Bc tiles and head dim d), a column per operand, coloured by where it lives; 'in' marks an
    operand, 'out' the result. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    cols = ["Q_i", "dO_i", "L_i", "D_i", "K_j", "V_j", "S", "P", "dP", "dS", "dV_j", "dK_j", "dQ_i"]
    fig, ax = plt.subplots(figsize=(12.5, 4.4))
    x0 = 6.0  # the labels' width, in cell units
    for c, name in enumerate(cols):
        ax.add_patch(Rectangle((x0 + c, -1), 1, 1, facecolor=_HOME_COLOUR[BACKWARD_HOME[name]], edgecolor="grey"))
        ax.text(x0 + c + 0.5, -0.5, name, ha="center", va="center", fontsize=9)
    shapes = {"S": (br, bc, d), "dV_j": (bc, d, br), "dP": (br, bc, d), "dQ_i": (br, d, bc), "dK_j": (bc, d, br)}
    for r, (line, what, ins, out, mm) in enumerate(BACKWARD_STEPS):
        label = f"line {line}: {what}"
        if mm:
            m, n, k = shapes[out]
            label += f"\n  product {sum(s[4] for s in BACKWARD_STEPS[:r + 1])} of 5: ({m}×{k})·({k}×{n}), {2 * m * n * k:,} FLOPs"
        ax.text(0.1, r + 0.5, label, ha="left", va="center", fontsize=8.5, fontweight="bold" if mm else "normal")
        for c, name in enumerate(cols):
            fc = "white"
            mark = "out" if name == out else "in" if name in ins else ""
            if mark:
                fc = _HOME_COLOUR[BACKWARD_HOME[name]]
            ax.add_patch(Rectangle((x0 + c, r), 1, 1, facecolor=fc, edgecolor="lightgrey"))
            if mark:
                ax.text(x0 + c + 0.5, r + 0.5, mark, ha="center", va="center", fontsize=8,
                        fontweight="bold" if mark == "out" else "normal")
    ax.set_xlim(0, x0 + len(cols))
    ax.set_ylim(len(BACKWARD_STEPS), -1)
    ax.axis("off")
    ax.legend(handles=[Patch(facecolor=v, edgecolor="grey", label=k) for k, v in _HOME_COLOUR.items()],
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=4, fontsize=8, frameon=False)
    ax.set_title("FA2's backward (Algorithm 2) on one tile (i, j): five matmul products, which operands, where they "
                 f"live (Br = {br}, Bc = {bc}, d = {d})", fontsize=10)
    fig.tight_layout()
    return fig
