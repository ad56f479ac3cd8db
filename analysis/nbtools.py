"""Small display helpers shared by the notebooks (they lived in every notebook's setup cell)."""
from __future__ import annotations


def md_table(headers, rows) -> str:
    """A Markdown table; '|' inside a cell is escaped so it cannot split the cell."""
    def cell(c):
        return str(c).replace("|", "\\|")
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def show_table(headers, rows) -> None:
    """Display a short Markdown table in a notebook (renders on GitHub and in the built site)."""
    from IPython.display import Markdown, display
    display(Markdown(md_table(headers, rows)))


def human(n, binary=False) -> str:
    """1.5 GB, 12 MB, 640 B: decimal units as traffic and bandwidth are quoted; binary=True: KiB, MiB."""
    units = ((("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)) if binary else
             (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)))
    for unit, size in units:
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"
