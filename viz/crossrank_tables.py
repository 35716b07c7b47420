"""The cross-rank part of the analysis document as sections of text: title, header, rows, caption.

Each section is built once here from the document's ``cross_rank`` object (what `analyze -f json`
prints there) and drawn by each front end: rich tables and Markdown in the CLI
(overlapscope/render_crossrank.py), HTML in the shareable report (viz/export_html.py), so they cannot
disagree. Plain Python, no pandas: the CLI draws a cached document without the analysis stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from analyzers.timeline.short_names import normalized_name

from .formats import dur, pct

TOP_COLLECTIVES = 10  # collectives with the most waiting shown in tables (JSON carries all)
TOP_MISMATCHES = 10
MAX_RANK_ROWS = 16  # per-rank sections list every rank up to this many (viz/scale_tables.py)
TOP_RANK_ROWS = 5  # past it: this many ranks of interest per criterion
MAX_CELL = 400  # characters in one cell (lists of ranks are cut)
NAME_WIDTH = 48  # kernel names are cut to this many characters in tables

Doc = dict[str, Any]


@dataclass
class Section:
    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str = ""


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


def _top(rows: list[Doc], key: str, n: int) -> list[Doc]:
    """The n rows with the largest key, ties in their order (a stable sort, descending; undefined last)."""
    return sorted(rows, key=lambda r: -math.inf if r[key] is None else r[key], reverse=True)[:n]


def _clock(rep: Doc) -> Section:
    c = rep["clock"]
    shown = rep["ranks"]
    if len(shown) > MAX_RANK_ROWS:  # the ranks with the largest offsets, the rest counted in the caption
        shown = sorted(shown, key=lambda r: -abs(c["estimated_offsets_ns"][str(r)]))[:TOP_RANK_ROWS]
    rows = [[f"rank {r}", dur(c["offsets_ns"][str(r)]), dur(c["estimated_offsets_ns"][str(r)])] for r in shown]
    shared = "shared clock" if c["shared_clock"] else "separate clocks"
    cap = (f"{shared}, method {c['method']}: {c['reason']}. Residual skew of matched collective ends "
           f"{dur(c['residual_skew_ns'])} median, {dur(c['residual_skew_max_ns'])} max "
           f"({c['n_collectives_used']} collectives; {dur(c['unaligned_skew_ns'])} median before alignment).")
    if len(shown) < len(rep["ranks"]):
        cap += f" {len(shown)} of {len(rep['ranks'])} ranks shown: the largest estimated offsets."
    return Section("Clock alignment (aligned = own time + offset)", ["rank", "offset applied", "offset estimated"],
                   rows, cap)


def _peer_wait(rep: Doc) -> Section:
    rows = []
    shown = rep["ranks"]
    pw = rep["peer_wait"]
    if len(shown) > MAX_RANK_ROWS:  # the ranks that waited most, then those most often last
        shown = sorted(rep["ranks"], key=lambda r: -(pw.get(str(r), {}).get("wait_ns") or 0))[:TOP_RANK_ROWS]
        shown += [r for r in sorted(rep["ranks"], key=lambda r: -(pw.get(str(r), {}).get("n_late") or 0))
                  if r not in shown][:TOP_RANK_ROWS]
    for r in shown:
        p = pw.get(str(r), {})
        waited = ", ".join(f"rank {k}: {dur(v)}" for k, v in
                           sorted(p.get("wait_for_rank_ns", {}).items(), key=lambda kv: int(kv[0]))) or "-"
        rows.append([f"rank {r}", str(p.get("n_collectives", 0)), dur(p.get("kernel_ns")), dur(p.get("wait_ns")),
                     dur(p.get("transfer_ns")), pct(p.get("wait_fraction")), pct(p.get("overlap_ratio")),
                     pct(p.get("effective_overlap_ratio")), str(p.get("n_late", 0)), _cut(waited)])
    lines = [f"rank {d['rank']} last at {_plural(d['n_collectives_last'], 'collective')} "
             f"({d['share_of_late_collectives']:.0%} of those with a late rank), others waited "
             f"{dur(d['wait_caused_ns'])}" for d in rep["late_ranks"][:TOP_RANK_ROWS]]
    cap = ("wait = kernel time before the last rank arrived; effective overlap = overlap of the transfer part "
           "with compute. " + "; ".join(lines))
    if len(shown) < len(rep["ranks"]):
        cap += (f" {len(shown)} of {len(rep['ranks'])} ranks shown: those that waited most and those most often "
                "last (all ranks: -f json or --tables).")
    return Section("Peer wait per rank", ["rank", "collectives", "kernel time", "wait", "transfer", "wait %",
                                          "overlap", "effective overlap", "last at", "waited for"], rows, cap)


def _collectives(rep: Doc) -> Section:
    rows: list[list[str]] = []
    waiting = [c for c in rep["collectives"] if c["max_wait_ns"] is not None and c["max_wait_ns"] > 0]
    for rec in _top(waiting, "max_wait_ns", TOP_COLLECTIVES):
        late = f"rank {int(rec['late_rank'])}" if rec["late_rank"] >= 0 else "together"
        rows.append([str(int(rec["coll_id"])), _short(rec["coll_name"]), str(rec["group"]), late,
                     dur(rec["skew_ns"]), dur(rec["max_wait_ns"]), dur(rec["total_wait_ns"])])
    cap = (f"{rep['n_matched']} collectives matched; {rep['n_unmatched']} unmatched, "
           f"{rep['n_inconsistent']} inconsistent (left out). Each rank's wait at each collective: "
           "analyze --tables DIR (collective_ranks.parquet).")
    return Section(f"Collectives with the longest peer wait (top {TOP_COLLECTIVES})",
                   ["#", "collective", "group", "last to arrive", "arrival skew", "max wait", "total wait"],
                   rows, cap)


def _mismatches(rep: Doc) -> Section:
    rows: list[list[str]] = []
    listed = rep["mismatches"]
    for rec in _top(listed, "wait_caused_ns", TOP_MISMATCHES):
        x = f"[{rec['stream_x']}] {_short(rec['kernel_x'])}"
        y = f"[{rec['stream_y']}] {_short(rec['kernel_y'])}"
        on_a = f"{x} → {y}" if rec["first_on_a"] == "x" else f"{y} → {x}"
        on_b = f"{x} → {y}" if rec["first_on_b"] == "x" else f"{y} → {x}"
        rows.append([f"{int(rec['rank_a'])} vs {int(rec['rank_b'])}", str(int(rec["step"])), on_a, on_b,
                     f"[{rec['dependency_stream']}] {_short(rec['coll_name'])}", dur(rec["wait_caused_ns"]),
                     "yes" if rec["explains_wait"] else "no", str(int(rec["n_swapped_pairs"]))])
    s = rep["mismatch_summary"] or {}
    cap = (f"{_plural(s.get('n_mismatches', 0), 'mismatch', 'mismatches')} before a cross-rank dependency "
           f"({s.get('n_explaining_wait', 0)} explaining {dur(s.get('wait_caused_ns', 0))} of wait), "
           f"{_plural(s.get('n_swaps_without_dependency', 0), 'order swap')} with no dependency after it "
           f"(harmless); {_plural(s.get('role_pairs', 0), 'stream-role pair')} compared.")
    if rep["n_mismatches"] > len(listed):
        cap += f" Rows: the longest waits of the first {len(listed)} listed in the JSON document."
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


def sections(rep: Doc) -> list[Section]:
    """The cross-rank sections in display order (empty when fewer than two ranks)."""
    if rep["clock"] is None:
        return []
    out = [_clock(rep), _peer_wait(rep), _collectives(rep), _mismatches(rep)]
    notes = list(rep["notes"]) + [f"{u['group']}: {u['reason']}" for u in rep["inconsistent"][:TOP_MISMATCHES]]
    if notes:
        out.append(Section("Cross-rank notes", ["note"], [[n] for n in notes]))
    return out
