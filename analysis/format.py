"""How the fa-traffic commands write what they computed: human units (bytes, FLOPs, seconds), tables (rich on a
terminal, split to its width; plain fixed-width text otherwise), markdown, CSV and JSON (streamed). Knows nothing of
what a row means: analysis/cli.py, analysis/gpu_cli.py and analysis/backward_report.py use it (cli re-exports the
names, as they were defined there before).
"""
from __future__ import annotations

import csv
import io
import json
import sys

from rich.console import Console
from rich.table import Table


def human_bytes(n) -> str:
    n = float(n)
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.4g} {unit}" if n / size < 1000 else f"{n / size:,.0f} {unit}"
    return f"{n:.0f} B"


def human_flops(n) -> str:
    n = float(n)
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} FLOP"


def human_time(s) -> str:
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= size:
            return f"{s / size:.4g} {unit}"
    return f"{s / 1e-9:.3g} ns"


MIN_TABLE_WIDTH = 40  # narrower terminals (COLUMNS=0, 1, ...) get tables this wide and wrap their lines


def table_width(width, header, rows) -> int:
    """The width to lay a terminal's tables out in: the terminal's, but at least MIN_TABLE_WIDTH and the first column
    beside the widest other, so that no cell is cut (rich would cut v_once_auto(hbm)_eager and _lazy to one text)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    return max(width or 0, MIN_TABLE_WIDTH, widths[0] + max(widths[1:], default=0) + 7)


def _rich_tables(header, rows, width, title, caption, groups=None, keep=2):
    """One rich table, or several when one would not fit `width` characters: each repeats the first
    `keep` columns (fewer, down to the first alone, when a narrow terminal leaves no room) and packs
    the column `groups` greedily (a group too wide for any table is split into single columns). The
    first column is never wrapped or shortened: it names the row."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def need(cols):
        return sum(widths[i] + 3 for i in cols) + 1

    def table(cols, title_, caption_):
        t = Table(title=title_, caption=caption_, header_style="bold", caption_justify="left")
        for i in cols:
            t.add_column(header[i], justify="left" if i == 0 else "right", no_wrap=i == 0,
                         min_width=widths[i])
        for row in rows:
            t.add_row(*(row[i] for i in cols))
        return t

    everything = list(range(len(header)))
    if need(everything) <= width:
        return [table(everything, title, caption)]
    lead = list(range(min(keep, len(header))))
    rest = [i for i in everything if i not in lead]
    while len(lead) > 1 and rest and need(lead + [max(rest, key=lambda i: widths[i])]) > width:
        rest.insert(0, lead.pop())
    units, grouped = [], {i for g in (groups or []) for i in g}
    units += [[i] for i in rest if i not in grouped]  # leading columns dropped from `lead` come first
    for group in groups or []:
        group = [i for i in group if i not in lead]
        if need(lead + group) <= width:
            units.append(group)
        else:
            units += [[i] for i in group]
    packs = [[]]
    for unit in units:
        if packs[-1] and need(lead + packs[-1] + unit) > width:
            packs.append([])
        packs[-1] += unit
    return [table(lead + cols, title if n == 0 else None, caption if n == len(packs) - 1 else None)
            for n, cols in enumerate(packs)]


def render_table(header, rows, *, title=None, caption=None, file=None, groups=None, keep=2) -> None:
    """rich tables on a terminal (split to fit its width), else plain fixed-width text."""
    file = file or sys.stdout
    if file.isatty():
        width = table_width(Console(file=file).width, header, rows)  # COLUMNS=0 or 1: no room, not no output
        console = Console(file=file, width=width)
        for t in _rich_tables(header, rows, width, title, caption, groups=groups, keep=keep):
            console.print(t)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    if title:
        print(title, file=file)
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(header), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in rows:
        print(line(r), file=file)
    if caption:
        print(caption, file=file)


def render_markdown(header, rows, file=None) -> None:
    file = file or sys.stdout
    print("| " + " | ".join(header) + " |", file=file)
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|", file=file)
    for r in rows:
        print("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |", file=file)


def flat_record(r: dict, prefix: str = "") -> dict:
    """A CSV row: nested objects flattened, at every depth, to reads_Q, flops_matmul, gpu_model_terms_tensor, ...;
    a list is written as JSON (a cell never holds a Python repr)."""
    out = {}
    for k, v in r.items():
        if isinstance(v, dict):
            out.update(flat_record(v, f"{prefix}{k}_"))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, (list, tuple)) else v
    return out


def render_csv(recs, file=None) -> None:
    file = file or sys.stdout
    flat = [flat_record(r) for r in recs]
    fields = []
    for f in flat:
        for k in f:
            if k not in fields:
                fields.append(k)
    buf = io.StringIO()
    # a field a row does not have (no GPU model, no known gap) stays empty: a 0 there reads as a value
    w = csv.DictWriter(buf, fieldnames=fields, restval="", lineterminator="\n")
    w.writeheader()
    for f in flat:
        w.writerow({k: ("" if v is None else v) for k, v in f.items()})
    file.write(buf.getvalue())


def write_json(recs, file=None) -> None:
    """json.dump(list(recs), indent=1), written one record at a time."""
    file = file or sys.stdout
    sep = "[\n"
    for rec in recs:
        file.write(sep + " " + json.dumps(rec, indent=1).replace("\n", "\n "))
        sep = ",\n"
    file.write("[]\n" if sep == "[\n" else "\n]\n")


def write_csv(records, file=None) -> None:
    """CSV of every record, streamed: `records()` is called twice (the header is the union of the
    flattened keys, in order of first appearance), so nothing is held but the header."""
    file = file or sys.stdout
    fields = {}
    for r in records():
        fields.update(dict.fromkeys(flat_record(r)))
    w = csv.DictWriter(file, fieldnames=list(fields), restval="", lineterminator="\n")  # absent: empty, not 0
    w.writeheader()
    for r in records():
        w.writerow({k: ("" if v is None else v) for k, v in flat_record(r).items()})


def say(line: str) -> None:
    """One line on stderr, or nowhere when stderr is closed (`2>&-`: the exit status still tells). Never stdout:
    print(file=sys.stderr) with sys.stderr None writes to stdout, where it would read as output."""
    err = sys.stderr
    if err is None or getattr(err, "closed", False):
        return
    try:
        print(line, file=err)
        err.flush()
    except (OSError, ValueError):
        pass


def is_tty(stream) -> bool:
    """Whether `stream` is an open terminal (False for a closed or absent one: `2>&-` makes sys.stderr None)."""
    try:
        return stream is not None and not getattr(stream, "closed", False) and stream.isatty()
    except (OSError, ValueError):
        return False
