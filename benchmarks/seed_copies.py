"""The copy-kernel table of docs/seeds.md: per set and rank, bucketing copies and direct copies, and how
long the direct copies run while an AllGather kernel runs on the same rank.

Thunder's FSDP seed saw `CatArrayBatchedCopy` / `direct_copy_kernel` beside its all-gathers with
bucketing; this counts them in each set of a folder (e.g. sample_traces/thunder-fsdp) through the
project's own loader, so the figures are those `analyze` sees.

usage: python benchmarks/seed_copies.py FOLDER_OF_SETS
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from analyzers.io.load import load_traces
from analyzers.timeline.intervals import intersection_length
from analyzers.timeline.model import RankTrace


def copy_row(rank: RankTrace) -> dict[str, float]:
    """CatArrayBatchedCopy count, direct copies (count, ms) and the direct copies' ms beside an AllGather."""
    k = rank.kernels
    names = rank.names_of(k["name_id"].to_numpy()).astype(str)
    cat = np.char.find(names, "CatArrayBatchedCopy") >= 0
    direct = np.char.find(names, "direct_copy_kernel") >= 0
    gather = np.char.find(names, "AllGather") >= 0
    s, e = k["start_ns"].to_numpy(), k["end_ns"].to_numpy()
    return {"cat": int(cat.sum()), "direct": int(direct.sum()), "direct_ms": float((e[direct] - s[direct]).sum()) / 1e6,
            "beside_gather_ms": intersection_length(s[direct], e[direct], s[gather], e[gather]) / 1e6}


def main(folder: str) -> None:
    print("| set | rank | CatArrayBatchedCopy | direct_copy_kernel | direct_copy ms | "
          "direct_copy beside an AllGather ms |")
    print("|---|---|---|---|---|---|")
    for set_dir in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        traces = load_traces([set_dir])
        for rank_id, rank in sorted(traces.ranks.items()):
            r = copy_row(rank)
            print(f"| {set_dir.name} | {rank_id} | {r['cat']} | {r['direct']} | {r['direct_ms']:.2f} | "
                  f"{r['beside_gather_ms']:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
