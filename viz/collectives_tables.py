"""The collectives section of the analysis document (`collectives`, analyzers.crossrank.collective_table)
as text: title, header, rows, caption, built once here and drawn by each front end (rich and Markdown in
the CLI, HTML in the report). Plain Python over the decoded document: undefined figures arrive as None.
"""

from __future__ import annotations

from typing import Any

from .crossrank_tables import Section
from .formats import UNDEFINED, dur, pct

Doc = dict[str, Any]


def _gbps(v: float | None) -> str:
    return UNDEFINED if v is None else f"{v:,.1f}"


def _frac(v: float | None) -> str:
    return UNDEFINED if v is None else pct(float(v))


def collectives_section(coll: Doc) -> Section | None:
    """Per (operation, size bucket), over all ranks: counts, medians and bandwidth against the link;
    None when no communication was recognised."""
    groups = coll.get("groups") or []
    if not groups:
        return None
    header = ["operation", "size", "n", "overlapped", "median size", "median time", "median wait",
              "algbw GB/s", "busbw GB/s", "busbw alone", "busbw overlapped", "of link"]
    rows = [[str(g["op"]), str(g["size_bucket"]), str(g["n"]), str(g["n_overlapped"]),
             UNDEFINED if not g["bytes_median"] else f"{g['bytes_median'] / 2**20:,.2f} MiB",
             dur(g["dur_median_ns"]), dur(g["wait_median_ns"]), _gbps(g["algbw_median_gbps"]),
             _gbps(g["busbw_median_gbps"]), _gbps(g["busbw_alone_median_gbps"]),
             _gbps(g["busbw_overlapped_median_gbps"]), _frac(g["link_fraction"])] for g in groups]
    link = (f"link peak {coll['link_gbps']:,.0f} GB/s per direction ({coll['link_source']})" if coll["link_gbps"]
            else f"link peak unknown ({coll['link_source']})")
    caption = (f"{coll['n_rows']} communication activities; medians per operation and size; bus bandwidth by "
               "NCCL's formulas on the transfer time (peer wait excluded where matched); overlapped: compute ran "
               f"beside ≥ {coll['params']['overlapped_min_share']:.0%} of the transfer; {link}")
    return Section("Collectives: size and bandwidth", header, rows, caption)
