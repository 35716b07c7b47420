"""The grid table of benchmarks/RESULTS.md from two runs of runners.grid: a search run and a cached run.

usage: python benchmarks/grid_table.py SEARCH_GRID_JSON CACHED_GRID_JSON
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _ok(row: dict[str, Any]) -> str:
    return "yes" if row["pass"] else "**no**"


def _vs_gemm(row: dict[str, Any]) -> str:
    return f"{row['tuned_vs_gemm']:.3f}" + ("" if row["comm_below_gemm"] else " (comm ≥ GEMM)")


def _retimed(row: dict[str, Any]) -> str:
    """Where the cached run timed a close call again (runners/autotune.confirm): what it was close to, what won."""
    if not row.get("close_to"):
        return ""
    kept = row["schedule"] == row.get("cached_choice")
    return f"; close to {', '.join(row['close_to'])}, re-timed: " + ("kept" if kept else row["schedule"])


def main(search_path: str, cached_path: str) -> None:
    search, cached = (json.load(open(p)) for p in (search_path, cached_path))
    again = {(r["algo"], r["M"], r["K"], r["N"], r["steps"], r["dtype"]): r for r in cached["rows"]}
    print("| algo | M | K | N | steps | dtype | GEMM alone | comm alone | baseline | fused-ref | tuned | "
          "tuned / min(base, fused) | tuned / GEMM | schedule chosen | search s | ok | "
          "cached run: tuned / min, / GEMM, ok |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in search["rows"]:
        ms = " | ".join(f"{r[k + '_ms']:.3f} ±{r[k + '_spread_ms']:.3f}"
                        for k in ("gemm", "comm", "baseline", "fused-ref", "tuned"))
        c = again.get((r["algo"], r["M"], r["K"], r["N"], r["steps"], r["dtype"]))
        rerun = f"{c['tuned_vs_best_ref']:.3f}, {_vs_gemm(c)}, {_ok(c)}{_retimed(c)}" if c else "-"
        print(f"| {r['algo']} | {r['M']} | {r['K']} | {r['N']} | {r['steps']} | {r['dtype']} | {ms} | "
              f"{r['tuned_vs_best_ref']:.3f} | {_vs_gemm(r)} | {r['schedule']} | {r['search_s']} | {_ok(r)} | "
              f"{rerun} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
