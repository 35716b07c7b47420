"""The cross-rank report (analyzers.crossrank) as sections of text: title, header, rows, caption.

Each section is built once here and drawn by each front end: rich tables and Markdown in the
CLI (overlapscope/render_crossrank.py), HTML in the shareable report (viz/export_html.py), so
they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.crossrank import CrossRankReport, normalized_name

from .formats import UNDEFINED, pct

TOP_COLLECTIVES = 10  # collectives with the most waiting shown in tables (JSON carries all)
TOP_MISMATCHES = 10
MAX_RANK_ROWS = 16  # per-rank sections list every rank up to this many (viz/scale_tables.py)
TOP_RANK_ROWS = 5  # past it: this many ranks of interest per criterion
MAX_CELL = 400  # characters in one cell (lists of ranks are cut)
NAME_WIDTH = 48  # kernel names are cut to this many characters in tables


@dataclass
class Section:
    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str = ""


def dur(ns: float | int | None) -> str:
    """A duration with a unit that suits it: 850 ns, 42.0 µs, 3.21 ms, 1.204 s."""
    if ns is None or (isinstance(ns, float) and not np.isfinite(ns)):
        return UNDEFINED
    a = abs(ns)
    if a < 1_000:
        return f"{int(ns)} ns"
    if a < 1_000_000:
        return f"{ns / 1e3:,.1f} µs"
    if a < 1_000_000_000:
        return f"{ns / 1e6:,.2f} ms"
    return f"{ns / 1e9:,.3f} s"


def _short(name: str) -> str:
    """Kernel name cut in the middle: GEMM variants differ at the end (tile sizes), not the start."""
    n = normalized_name(str(name))
    if len(n) <= NAME_WIDTH:
        return n
    head = NAME_WIDTH // 2 - 1
    return n[:head] + "…" + n[-(NAME_WIDTH - head - 1):]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


def _plural(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _clock(rep: CrossRankReport) -> Section:
    c = rep.clock
    shown = rep.ranks
    if len(rep.ranks) > MAX_RANK_ROWS:  # the ranks with the largest offsets, the rest in the caption
        shown = sorted(rep.ranks, key=lambda r: -abs(c.estimated_offsets_ns[r]))[:TOP_RANK_ROWS]
    rows = [[f"rank {r}", dur(c.offsets_ns[r]), dur(c.estimated_offsets_ns[r])] for r in shown]
    shared = "shared clock" if c.shared_clock else "separate clocks"
    cap = (f"{shared}, method {c.method}: {c.reason}. Residual skew of matched collective ends "
           f"{dur(c.residual_skew_ns)} median, {dur(c.residual_skew_max_ns)} max "
           f"({c.n_collectives_used} collectives; {dur(c.unaligned_skew_ns)} median before alignment).")
    if len(shown) < len(rep.ranks):
        cap += f" {len(shown)} of {len(rep.ranks)} ranks shown: the largest estimated offsets."
    return Section("Clock alignment (aligned = own time + offset)", ["rank", "offset applied", "offset estimated"],
                   rows, cap)


def _peer_wait(rep: CrossRankReport) -> Section:
    rows = []
    shown = rep.ranks
    if len(rep.ranks) > MAX_RANK_ROWS:  # the ranks that waited most, then those most often last
        pw = rep.peer_wait
        shown = sorted(rep.ranks, key=lambda r: -pw.get(r, {}).get("wait_ns", 0))[:TOP_RANK_ROWS]
        shown += [r for r in sorted(rep.ranks, key=lambda r: -pw.get(r, {}).get("n_late", 0))
                  if r not in shown][:TOP_RANK_ROWS]
    for r in shown:
        p = rep.peer_wait.get(r, {})
        waited = ", ".join(f"rank {k}: {dur(v)}" for k, v in sorted(p.get("wait_for_rank_ns", {}).items())) or "-"
        rows.append([f"rank {r}", str(p.get("n_collectives", 0)), dur(p.get("kernel_ns")), dur(p.get("wait_ns")),
                     dur(p.get("transfer_ns")), pct(p.get("wait_fraction")), pct(p.get("overlap_ratio")),
                     pct(p.get("effective_overlap_ratio")), str(p.get("n_late", 0)), waited])
    rows = [[*row[:9], _cut(row[9])] for row in rows]
    lines = [f"rank {d['rank']} last at {_plural(d['n_collectives_last'], 'collective')} "
             f"({d['share_of_late_collectives']:.0%} of those with a late rank), others waited "
             f"{dur(d['wait_caused_ns'])}" for d in rep.late_ranks[:TOP_RANK_ROWS]]
    cap = ("wait = kernel time before the last rank arrived; effective overlap = overlap of the transfer part "
           "with compute. " + "; ".join(lines))
    if len(shown) < len(rep.ranks):
        cap += (f" {len(shown)} of {len(rep.ranks)} ranks shown: those that waited most and those most often last"
                " (all ranks: -f json or --tables).")
    return Section("Peer wait per rank", ["rank", "collectives", "kernel time", "wait", "transfer", "wait %",
                                          "overlap", "effective overlap", "last at", "waited for"], rows, cap)


def _collectives(rep: CrossRankReport) -> Section:
    c = rep.collectives
    rows: list[list[str]] = []
    if len(c):
        top = c[c["max_wait_ns"] > 0].sort_values("max_wait_ns", ascending=False, kind="stable").head(TOP_COLLECTIVES)
        for rec in top.to_dict(orient="records"):
            per = sorted(((r, int(rec[f"wait_ns_r{r}"])) for r in rep.ranks if pd.notna(rec.get(f"wait_ns_r{r}"))),
                         key=lambda x: -x[1] if len(rep.ranks) > MAX_RANK_ROWS else x[0])
            k = TOP_RANK_ROWS if len(rep.ranks) > MAX_RANK_ROWS else len(per)
            waits = _cut(", ".join(f"{r}: {dur(w)}" for r, w in per[:k]))
            if len(per) > k:
                waits += f" (largest {k} of {len(per)})"
            late = f"rank {int(rec['late_rank'])}" if rec["late_rank"] >= 0 else "together"
            rows.append([str(int(rec["coll_id"])), _short(rec["coll_name"]), str(rec["group"]), late,
                         dur(rec["skew_ns"]), dur(rec["max_wait_ns"]), waits])
    cap = (f"{rep.n_matched} collectives matched; {sum(u.get('count', 1) for u in rep.unmatched)} unmatched, "
           f"{sum(u.get('count', 1) for u in rep.inconsistent)} inconsistent (left out).")
    return Section(f"Collectives with the longest peer wait (top {TOP_COLLECTIVES})",
                   ["#", "collective", "group", "last to arrive", "arrival skew", "max wait", "wait per rank"],
                   rows, cap)


def _mismatches(rep: CrossRankReport) -> Section:
    m = rep.mismatches
    rows: list[list[str]] = []
    if len(m):
        top = m.sort_values("wait_caused_ns", ascending=False, kind="stable").head(TOP_MISMATCHES)
        for rec in top.to_dict(orient="records"):
            x = f"[{rec['stream_x']}] {_short(rec['kernel_x'])}"
            y = f"[{rec['stream_y']}] {_short(rec['kernel_y'])}"
            on_a = f"{x} → {y}" if rec["first_on_a"] == "x" else f"{y} → {x}"
            on_b = f"{x} → {y}" if rec["first_on_b"] == "x" else f"{y} → {x}"
            rows.append([f"{int(rec['rank_a'])} vs {int(rec['rank_b'])}", str(int(rec["step"])), on_a, on_b,
                         f"[{rec['dependency_stream']}] {_short(rec['coll_name'])}", dur(rec["wait_caused_ns"]),
                         "yes" if rec["explains_wait"] else "no", str(int(rec["n_swapped_pairs"]))])
    s = rep.mismatch_summary or {}
    cap = (f"{_plural(s.get('n_mismatches', 0), 'mismatch', 'mismatches')} before a cross-rank dependency "
           f"({s.get('n_explaining_wait', 0)} explaining {dur(s.get('wait_caused_ns', 0))} of wait), "
           f"{_plural(s.get('n_swaps_without_dependency', 0), 'order swap')} with no dependency after it "
           f"(harmless); {_plural(s.get('role_pairs', 0), 'stream-role pair')} compared.")
    for c in s.get("order_checks", [])[:TOP_MISMATCHES]:
        cap += (f" Ranks {c['rank_a']}/{c['rank_b']}, {c['stream_x']} vs {c['stream_y']}: "
                f"{c['kernels_x'] + c['kernels_y']} kernels, {c['near_ties']} too close to order, "
                f"{c['swapped']} swapped; the same stream started first in {c['steps_same_first_stream']} of "
                f"{c['steps']} steps.")
    cap += (" 'explains wait': the rank that ran the other stream's kernel first was the late one at the "
            "next collective.")
    return Section("Scheduling-order mismatches", ["ranks", "step", "order on first rank", "order on second rank",
                                                   "next collective", "wait there", "explains wait",
                                                   "swapped pairs"], rows, cap)


def sections(rep: CrossRankReport, stragglers: dict | None = None) -> list[Section]:
    """The cross-rank sections in display order (empty when fewer than two ranks); with the report's
    straggler view, its section after peer wait."""
    if rep.clock is None:
        return []
    from .scale_tables import straggler_section

    out = [_clock(rep), _peer_wait(rep), _collectives(rep), _mismatches(rep)]
    if (st := straggler_section(stragglers)) is not None:
        out.insert(2, st)
    notes = list(rep.notes) + [f"{u['group']}: {u['reason']}" for u in rep.inconsistent[:TOP_MISMATCHES]]
    if notes:
        out.append(Section("Cross-rank notes", ["note"], [[n] for n in notes]))
    return out
