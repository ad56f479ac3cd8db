"""Algorithm-line citations: every "FA2 Alg. 1 line 10" tag in the code, checked and mapped.

    python -m analysis.lines            # rewrite docs/lines.md
    python -m analysis.lines --check    # exit 1 (with the problems) when docs/lines.md is stale or a tag is bad

The references, the kernels and the closed forms cite the line of the paper's algorithm they carry
out. One tag syntax, everywhere (comments and docstrings of variants/, kernels/cuda/, analysis/):

    FA1 Alg. 1 line 8        FA2 Alg. 1 lines 12-15

FA1 is the FlashAttention paper (Dao et al. 2022, arXiv 2205.14135), FA2 the FlashAttention-2 paper
(Dao 2023, arXiv 2307.08691). A tag is bad when its algorithm or line does not exist (ALGORITHMS
holds each algorithm's lines), when a citation is written another way ("Algorithm 1 line 5", a bare
"line 8"), or when it dangles: a line one tier cites is not cited by another tier that implements
the same algorithm (IMPLEMENTED_BY), so a reader who follows line 9 from the reference into a kernel
finds nothing there.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "lines.md"

# (paper, algorithm) -> its numbered lines, as printed (paraphrased)
ALGORITHMS: dict[tuple[str, int], tuple[str, ...]] = {
    ("FA1", 0): (  # Standard Attention Implementation
        "load Q, K by blocks from HBM, compute S = QKᵀ, write S to HBM",
        "read S from HBM, compute P = softmax(S), write P to HBM",
        "load P and V by blocks from HBM, compute O = PV, write O to HBM",
        "return O",
    ),
    ("FA1", 1): (  # FlashAttention
        "set block sizes Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d)",
        "initialise O = 0, ℓ = 0, m = -∞ in HBM",
        "divide Q into Tr blocks Q_1..Q_Tr of Br rows; K, V into Tc blocks of Bc rows",
        "divide O into Tr blocks O_i, ℓ into Tr blocks ℓ_i, m into Tr blocks m_i",
        "for 1 ≤ j ≤ Tc do",
        "load K_j, V_j from HBM to on-chip SRAM",
        "for 1 ≤ i ≤ Tr do",
        "load Q_i, O_i, ℓ_i, m_i from HBM to on-chip SRAM",
        "on chip, compute S_ij = Q_i K_jᵀ",
        "on chip, compute m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij - m̃_ij), ℓ̃_ij = rowsum(P̃_ij)",
        "on chip, compute m_i^new = max(m_i, m̃_ij), ℓ_i^new = e^{m_i - m_i^new} ℓ_i + e^{m̃_ij - m_i^new} ℓ̃_ij",
        "write O_i ← diag(ℓ_i^new)⁻¹ (diag(ℓ_i) e^{m_i - m_i^new} O_i + e^{m̃_ij - m_i^new} P̃_ij V_j) to HBM",
        "write ℓ_i ← ℓ_i^new, m_i ← m_i^new to HBM",
        "end for",
        "end for",
        "return O",
    ),
    ("FA1", 2): (  # FlashAttention forward pass (with dropout and masking)
        "initialise the pseudo-random number generator state R and save it to HBM",
        "set block sizes Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d)",
        "initialise O = 0, ℓ = 0, m = -∞ in HBM",
        "divide Q into Tr blocks; K, V into Tc blocks",
        "divide O, ℓ, m into Tr blocks",
        "for 1 ≤ j ≤ Tc do",
        "load K_j, V_j from HBM to on-chip SRAM",
        "for 1 ≤ i ≤ Tr do",
        "load Q_i, O_i, ℓ_i, m_i from HBM to on-chip SRAM",
        "on chip, compute S_ij = τ Q_i K_jᵀ",
        "on chip, compute S_ij^masked = MASK(S_ij)",
        "on chip, compute m̃_ij, P̃_ij = exp(S_ij^masked - m̃_ij), ℓ̃_ij",
        "on chip, compute m_i^new, ℓ_i^new",
        "on chip, compute P̃_ij^dropped = dropout(P̃_ij, p_drop)",
        "write O_i ← diag(ℓ_i^new)⁻¹ (diag(ℓ_i) e^{m_i - m_i^new} O_i + e^{m̃_ij - m_i^new} P̃_ij^dropped V_j) to HBM",
        "write ℓ_i ← ℓ_i^new, m_i ← m_i^new to HBM",
        "end for",
        "end for",
        "return O, ℓ, m, R",
    ),
    ("FA1", 3): (  # Standard Attention Backward Pass
        "load P, dO by blocks from HBM, compute dV = Pᵀ dO, write dV to HBM",
        "load dO, V by blocks from HBM, compute dP = dO Vᵀ, write dP to HBM",
        "read P, dP from HBM, compute dS with dS_ij = P_ij (dP_ij - Σ_l P_il dP_il), write dS to HBM",
        "load dS and K by blocks from HBM, compute dQ = dS K, write dQ to HBM",
        "load dS and Q by blocks from HBM, compute dK = dSᵀ Q, write dK to HBM",
        "return dQ, dK, dV",
    ),
    ("FA1", 4): (  # FlashAttention backward pass
        "set the pseudo-random number generator state to R",
        "set block sizes Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d)",
        "divide Q into Tr blocks; K, V into Tc blocks",
        "divide O, dO, ℓ, m into Tr blocks",
        "initialise dQ = 0 in HBM (Tr blocks); dK, dV = 0 in HBM (Tc blocks)",
        "for 1 ≤ j ≤ Tc do",
        "load K_j, V_j from HBM to on-chip SRAM",
        "initialise dK̃_j = 0, dṼ_j = 0 on SRAM",
        "for 1 ≤ i ≤ Tr do",
        "load Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i from HBM to on-chip SRAM",
        "on chip, compute S_ij = τ Q_i K_jᵀ",
        "on chip, compute S_ij^masked = MASK(S_ij)",
        "on chip, compute P_ij = diag(ℓ_i)⁻¹ exp(S_ij^masked - m_i)",
        "on chip, compute the dropout mask Z_ij",
        "on chip, compute P_ij^dropped = P_ij ∘ Z_ij",
        "on chip, compute dṼ_j ← dṼ_j + (P_ij^dropped)ᵀ dO_i",
        "on chip, compute dP_ij^dropped = dO_i V_jᵀ",
        "on chip, compute dP_ij = dP_ij^dropped ∘ Z_ij",
        "on chip, compute D_i = rowsum(dO_i ∘ O_i)",
        "on chip, compute dS_ij = P_ij ∘ (dP_ij - D_i)",
        "write dQ_i ← dQ_i + τ dS_ij K_j to HBM",
        "on chip, compute dK̃_j ← dK̃_j + τ dS_ijᵀ Q_i",
        "end for",
        "write dK_j ← dK̃_j, dV_j ← dṼ_j to HBM",
        "end for",
        "return dQ, dK, dV",
    ),
    ("FA2", 1): (  # FlashAttention-2 forward pass
        "divide Q into Tr blocks of Br rows; K, V into Tc blocks of Bc rows",
        "divide O into Tr blocks O_i, the logsumexp L into Tr blocks L_i",
        "for 1 ≤ i ≤ Tr do",
        "load Q_i from HBM to on-chip SRAM",
        "on chip, initialise O_i^(0) = 0, ℓ_i^(0) = 0, m_i^(0) = -∞",
        "for 1 ≤ j ≤ Tc do",
        "load K_j, V_j from HBM to on-chip SRAM",
        "on chip, compute S_i^(j) = Q_i K_jᵀ",
        "on chip, compute m_i^(j) = max(m_i^(j-1), rowmax(S_i^(j))), P̃_i^(j) = exp(S_i^(j) - m_i^(j)), "
        "ℓ_i^(j) = e^{m_i^(j-1) - m_i^(j)} ℓ_i^(j-1) + rowsum(P̃_i^(j))",
        "on chip, compute O_i^(j) = diag(e^{m_i^(j-1) - m_i^(j)}) O_i^(j-1) + P̃_i^(j) V_j",
        "end for",
        "on chip, compute O_i = diag(ℓ_i^(Tc))⁻¹ O_i^(Tc)",
        "on chip, compute L_i = m_i^(Tc) + log(ℓ_i^(Tc))",
        "write O_i to HBM as the i-th block of O",
        "write L_i to HBM as the i-th block of L",
        "end for",
        "return the output O and the logsumexp L",
    ),
    ("FA2", 2): (  # FlashAttention-2 backward pass
        "divide Q into Tr blocks; K, V into Tc blocks",
        "divide O, dO into Tr blocks, L into Tr blocks",
        "initialise dQ = 0 in HBM (Tr blocks); divide dK, dV into Tc blocks",
        "compute D = rowsum(dO ∘ O), write D to HBM, divide it into Tr blocks",
        "for 1 ≤ j ≤ Tc do",
        "load K_j, V_j from HBM to on-chip SRAM",
        "initialise dK_j = 0, dV_j = 0 on SRAM",
        "for 1 ≤ i ≤ Tr do",
        "load Q_i, O_i, dO_i, dQ_i, L_i, D_i from HBM to on-chip SRAM",
        "on chip, compute S_i^(j) = Q_i K_jᵀ",
        "on chip, compute P_i^(j) = exp(S_ij - L_i)",
        "on chip, compute dV_j ← dV_j + (P_i^(j))ᵀ dO_i",
        "on chip, compute dP_i^(j) = dO_i V_jᵀ",
        "on chip, compute dS_i^(j) = P_i^(j) ∘ (dP_i^(j) - D_i)",
        "load dQ_i from HBM, update dQ_i ← dQ_i + dS_i^(j) K_j, write it back to HBM",
        "on chip, compute dK_j ← dK_j + dS_i^(j)ᵀ Q_i",
        "end for",
        "write dK_j, dV_j to HBM",
        "end for",
        "return dQ, dK, dV",
    ),
}
PAPERS = {"FA1": "FlashAttention (Dao et al. 2022, arXiv 2205.14135)",
          "FA2": "FlashAttention-2 (Dao 2023, arXiv 2307.08691)"}
TITLES = {("FA1", 0): "standard attention", ("FA1", 1): "FlashAttention forward",
          ("FA1", 2): "forward with dropout and masking", ("FA1", 3): "standard attention backward",
          ("FA1", 4): "backward",
          ("FA2", 1): "forward", ("FA2", 2): "backward"}

# The tiers that carry each algorithm out: a line cited anywhere must be cited in each of them.
# The closed forms (tier "closed form") count lines, they do not carry them out: their tags are
# checked to exist, and to be cited by every implementing tier.
TIERS = ("reference", "teaching", "tensor-core", "closed form")
IMPLEMENTED_BY: dict[tuple[str, int], tuple[str, ...]] = {
    ("FA1", 0): ("reference", "teaching"),
    ("FA1", 1): ("reference", "teaching"),
    ("FA2", 1): ("reference", "teaching", "tensor-core"),
    ("FA1", 3): ("reference",),
    ("FA1", 4): ("reference",),
    ("FA2", 2): ("reference", "teaching", "tensor-core"),
}
TEACHING_CUDA = {"naive.cu", "fa1.cu", "fa2.cu", "fa2_bwd.cu", "v_once.cu", "teaching.cuh", "split_kv.cu"}
SCANNED = ("variants/*.py", "kernels/cuda/*.cu", "kernels/cuda/*.cuh", "counting/*.py", "analysis/*.py")

TAG = re.compile(r"\b(FA[12]) Alg\. (\d+) (lines?) (\d+)(?:-(\d+))?")
# other ways of writing a citation, refused so that there is one syntax to search for
OTHER = (re.compile(r"\b(?:Algorithm|Alg\.?) ?\d+,? +lines? +\d+(?:-\d+)?"), re.compile(r"\blines? \d+(?:-\d+)?"))


@dataclass(frozen=True)
class Cite:
    paper: str
    alg: int
    first: int
    last: int
    path: str  # relative to the repository root
    lineno: int
    tier: str

    @property
    def key(self) -> tuple[str, int]:
        return self.paper, self.alg

    @property
    def lines(self) -> range:
        return range(self.first, self.last + 1)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}"


def tier_of(rel: str) -> str:
    if rel.startswith("variants/"):
        return "reference"
    if rel.startswith(("counting/", "analysis/")):
        return "closed form"
    return "teaching" if Path(rel).name in TEACHING_CUDA else "tensor-core"


def scanned_files(root: Path = ROOT) -> list[Path]:
    files = {p for pattern in SCANNED for p in root.glob(pattern)}
    return sorted(p for p in files if p.resolve() != Path(__file__).resolve())


def scan(root: Path = ROOT) -> tuple[list[Cite], list[str]]:
    """(every tag, every problem that is not a dangling line: unknown algorithm or line, other syntax)."""
    cites, problems = [], []
    for path in scanned_files(root):
        rel = path.relative_to(root).as_posix()
        for lineno, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{rel}:{lineno}"
            for m in TAG.finditer(text):
                paper, alg, word, first = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
                last = int(m.group(5)) if m.group(5) else first
                if (word == "lines") != (m.group(5) is not None):
                    problems.append(f"{where}: '{m.group(0)}' - write 'line L' or 'lines L1-L2'")
                n = len(ALGORITHMS.get((paper, alg), ()))
                if not n:
                    problems.append(f"{where}: '{m.group(0)}' cites {paper} Alg. {alg}, which is not in "
                                    f"analysis/lines.py ALGORITHMS ({_known()})")
                elif not 1 <= first <= last <= n:
                    problems.append(f"{where}: '{m.group(0)}' - {paper} Alg. {alg} has lines 1-{n}")
                else:
                    cites.append(Cite(paper, alg, first, last, rel, lineno, tier_of(rel)))
            rest = TAG.sub("", text)
            for pattern in OTHER:
                for m in pattern.finditer(rest):
                    problems.append(f"{where}: '{m.group(0)}' - cite as 'FA1 Alg. N line L' or "
                                    f"'FA2 Alg. N line L' (analysis/lines.py)")
                rest = pattern.sub("", rest)
    return cites, problems


def _known() -> str:
    return ", ".join(f"{p} Alg. {a}" for p, a in ALGORITHMS)


def dangling(cites: list[Cite]) -> list[str]:
    """A line cited in one tier but not in another tier that implements the algorithm."""
    out = []
    for key, tiers in IMPLEMENTED_BY.items():
        by_tier = {t: set() for t in TIERS}
        first_seen = {}
        for c in cites:
            if c.key == key:
                for line in c.lines:
                    by_tier[c.tier].add(line)
                    first_seen.setdefault((c.tier, line), c.where)
        for line in sorted(set().union(*by_tier.values())):
            cited_in = [t for t in TIERS if line in by_tier[t]]
            for t in tiers:
                if line not in by_tier[t]:
                    out.append(f"{key[0]} Alg. {key[1]} line {line} is cited in the {cited_in[0]} tier "
                               f"({first_seen[(cited_in[0], line)]}) but nowhere in the {t} tier, which "
                               f"implements {key[0]} Alg. {key[1]}")
    return out


def problems(root: Path = ROOT) -> list[str]:
    cites, bad = scan(root)
    return bad + dangling(cites)


def render(root: Path = ROOT) -> str:
    cites, _ = scan(root)
    out = ["# Algorithm lines in the code",
           "",
           "Generated by `python -m analysis.lines` from the tags in `variants/`, `kernels/cuda/` and",
           "`analysis/` (do not edit; `tests/test_lines.py` fails when this file is stale). A tag reads",
           "`FA2 Alg. 1 line 10` or `FA2 Alg. 1 lines 12-15`. Each row is one line of the algorithm as",
           "printed (paraphrased); each column lists the places that cite it in one tier: `reference`",
           "(`variants/`), `teaching` and `tensor-core` (`kernels/cuda/`), `closed form` (`analysis/`).",
           ""]
    for key, text in ALGORITHMS.items():
        paper, alg = key
        mine = [c for c in cites if c.key == key]
        implemented = IMPLEMENTED_BY.get(key, ())
        out.append(f"## {paper} Alg. {alg}: {TITLES[key]}")
        out.append("")
        out.append(f"{PAPERS[paper]}, Algorithm {alg}, {len(text)} lines. "
                   + (f"Implemented by the {', '.join(implemented)} tiers." if implemented
                      else "Not implemented here (yet); its tags are checked for existence only."))
        out.append("")
        if not mine:
            out.append("No tags cite it.")
            out.append("")
            continue
        tiers = [t for t in TIERS if t in implemented or any(c.tier == t for c in mine)]
        out.append("| line | what it does | " + " | ".join(tiers) + " |")
        out.append("|---|---|" + "---|" * len(tiers))
        for line, what in enumerate(text, 1):
            cells = []
            for t in tiers:
                places = sorted({c.where for c in mine if c.tier == t and line in c.lines},
                                key=_natural)
                cells.append("<br>".join(f"`{p}`" for p in places) or "-")
            out.append(f"| {line} | {what} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _natural(where: str):
    path, _, n = where.rpartition(":")
    return path, int(n)


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.lines", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when docs/lines.md is stale or a tag is bad")
    args = parser.parse_args(argv)
    bad = problems()
    for p in bad:
        print(p, file=sys.stderr)
    text = render()
    if args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.is_file() else ""
        if current != text:
            print(f"{_shown(DOC)} is stale: run python -m analysis.lines", file=sys.stderr)
            return 1
        return 1 if bad else 0
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {_shown(DOC)} ({len(scan()[0])} tags)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
