"""The critical-path section of `analyze` (table and Markdown): the replay's fidelity, each step's
critical path with its time attributed, and each rank's attribution."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from viz.critical import (
    FIDELITY_HEADER,
    PART_LABELS,
    STEP_HEADER,
    bound_rows,
    fidelity_caption,
    fidelity_line,
    step_rows,
    steps_caption,
)
from viz.formats import ms, pct
from viz.safe_text import markdown_row, markdown_text, terminal_text
from viz.scale_tables import MAX_RANK_ROWS, TOP_RANKS


def _shown_ranks(cp: dict[str, Any]) -> list[str]:
    """Every rank up to MAX_RANK_ROWS; past it the TOP_RANKS with the longest mean step (they set the job's step)."""
    per = cp.get("per_rank", {})
    ranks = list(per)
    if len(ranks) > MAX_RANK_ROWS:
        ranks = sorted(ranks, key=lambda r: -per[r]["mean_step_ns"])[:TOP_RANKS]
    return sorted(ranks, key=int)


def _rank_rows(cp: dict[str, Any]) -> list[list[str]]:
    per = cp.get("per_rank", {})
    return [[r, ms(per[r]["mean_step_ns"]), *(pct(per[r]["shares"][k]) for k in PART_LABELS)]
            for r in _shown_ranks(cp)]


def _notes(cp: dict[str, Any]) -> list[str]:
    """The section's notes, a note that several ranks share ('rank 3: ...') said once with its ranks."""
    import re

    from analyzers.io.rank_select import format_ranks

    by_text: dict[str, list[int]] = {}
    for note in cp.get("notes", []):
        m = re.match(r"rank (\d+): (.*)", note, re.S)
        by_text.setdefault(m.group(2) if m else note, []).extend([int(m.group(1))] if m else [])
    return [f"rank{'s' if len(rs) > 1 else ''} {format_ranks(rs, 8)}: {t}" if rs else t for t, rs in by_text.items()]


def _rank_caption(cp: dict[str, Any]) -> str:
    n, shown = len(cp.get("per_rank", {})), len(_shown_ranks(cp))
    return "" if shown == n else f"{shown} of {n} ranks shown (the longest mean step); -f json lists every rank"


RANK_HEADER = ["rank", "mean step ms", *PART_LABELS.values()]


def critical_tables(cp: dict[str, Any]) -> list[Table]:
    steps = Table(title="critical path per step (the slowest rank's, in ms)", title_justify="left",
                  header_style="bold",
                  caption=terminal_text("\n".join(filter(None, [fidelity_line(cp), steps_caption(cp)]))))
    for h in STEP_HEADER:
        steps.add_column(h, justify="left" if h.startswith("late") else "right")
    for row in step_rows(cp):
        steps.add_row(*(terminal_text(c) for c in row))
    ranks = Table(title="critical path per rank (share of the mean step)", title_justify="left", header_style="bold",
                  caption=_rank_caption(cp) or None, caption_justify="left")
    for h in RANK_HEADER:
        ranks.add_column(h, justify="right")
    for row in _rank_rows(cp):
        ranks.add_row(*(terminal_text(c) for c in row))
    bounds = bound_rows(cp)
    if bounds:
        why = Table(title=BOUNDS_TITLE, title_justify="left", show_header=False)
        why.add_column("", justify="left")
        for line in bounds:
            why.add_row(terminal_text(line))
        return [steps, why, ranks]
    return [steps, ranks]


BOUNDS_TITLE = ("what removing each cause would save (a part is charged only that much; the rest of the time the "
                "path spent there goes where the path moves without it)")


def critical_markdown(cp: dict[str, Any]) -> str:
    def table(header: list[str], rows: list[list[str]]) -> list[str]:
        return [markdown_row(header), "|" + "---|" * len(header), *(markdown_row(r) for r in rows)]

    lines = ["### critical path", "", markdown_text(fidelity_line(cp)), ""]
    lines += table(STEP_HEADER, step_rows(cp)) + [""]
    if steps_caption(cp):
        lines += [markdown_text(steps_caption(cp)), ""]
    if bound_rows(cp):
        lines += [f"{markdown_text(BOUNDS_TITLE)}:", "", *(f"- {markdown_text(line)}" for line in bound_rows(cp)), ""]
    lines += table(RANK_HEADER, _rank_rows(cp))
    if _rank_caption(cp):
        lines += ["", markdown_text(_rank_caption(cp))]
    lines += ["", "<details><summary>replay fidelity per step</summary>", ""]
    from viz.critical import fidelity_rows

    lines += table(FIDELITY_HEADER, fidelity_rows(cp))
    if fidelity_caption(cp):
        lines += ["", markdown_text(fidelity_caption(cp))]
    lines += ["", "</details>"]
    lines += [f"- {markdown_text(n)}" for n in _notes(cp)]
    return "\n".join(lines) + "\n"
