"""The critical-path section of `analyze` (table and Markdown): the replay's fidelity, each step's
critical path with its time attributed, and each rank's attribution."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from viz.critical import FIDELITY_HEADER, PART_LABELS, STEP_HEADER, fidelity_line, step_rows
from viz.formats import ms, pct


def _rank_rows(cp: dict[str, Any]) -> list[list[str]]:
    return [[r, ms(d["mean_step_ns"]), *(pct(d["shares"][k]) for k in PART_LABELS)]
            for r, d in sorted(cp.get("per_rank", {}).items(), key=lambda kv: int(kv[0]))]


RANK_HEADER = ["rank", "mean step ms", *PART_LABELS.values()]


def critical_tables(cp: dict[str, Any]) -> list[Table]:
    steps = Table(title="critical path per step (the slowest rank's, in ms)", title_justify="left",
                  header_style="bold", caption=fidelity_line(cp))
    for h in STEP_HEADER:
        steps.add_column(h, justify="left" if h.startswith("late") else "right")
    for row in step_rows(cp):
        steps.add_row(*row)
    ranks = Table(title="critical path per rank (share of the mean step)", title_justify="left", header_style="bold")
    for h in RANK_HEADER:
        ranks.add_column(h, justify="right")
    for row in _rank_rows(cp):
        ranks.add_row(*row)
    return [steps, ranks]


def critical_markdown(cp: dict[str, Any]) -> str:
    def table(header: list[str], rows: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *("| " + " | ".join(r) + " |" for r in rows)]

    lines = ["### critical path", "", fidelity_line(cp), ""]
    lines += table(STEP_HEADER, step_rows(cp)) + [""] + table(RANK_HEADER, _rank_rows(cp))
    lines += ["", "<details><summary>replay fidelity per step</summary>", ""]
    from viz.critical import fidelity_rows

    lines += table(FIDELITY_HEADER, fidelity_rows(cp)) + ["", "</details>"]
    lines += [f"- {n}" for n in cp.get("notes", [])]
    return "\n".join(lines) + "\n"
