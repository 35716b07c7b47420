"""The collectives table (analyzers.crossrank.collective_table) as a section of text: title, header, rows,
caption, built once here and drawn by each front end (rich and Markdown in the CLI, HTML in the report).
"""

from __future__ import annotations

import numpy as np

from analyzers.crossrank.collective_table import CollectiveTable

from .crossrank_tables import Section, dur
from .formats import UNDEFINED, pct


def _gbps(v: float) -> str:
    return UNDEFINED if v is None or not np.isfinite(v) else f"{v:,.1f}"


def _frac(v: float) -> str:
    return UNDEFINED if v is None or not np.isfinite(v) else pct(float(v))


def collectives_section(table: CollectiveTable) -> Section | None:
    """Per (operation, size bucket), over all ranks: counts, medians and bandwidth against the link."""
    g = table.groups
    if g.empty:
        return None
    header = ["operation", "size", "n", "overlapped", "median size", "median time", "median wait",
              "algbw GB/s", "busbw GB/s", "busbw alone", "busbw overlapped", "of link"]
    rows = [[str(r.op), str(r.size_bucket), str(int(r.n)), str(int(r.n_overlapped)),
             UNDEFINED if not r.bytes_median > 0 else f"{r.bytes_median / 2**20:,.2f} MiB",
             dur(r.dur_median_ns), dur(r.wait_median_ns), _gbps(r.algbw_median_gbps), _gbps(r.busbw_median_gbps),
             _gbps(r.busbw_alone_median_gbps), _gbps(r.busbw_overlapped_median_gbps), _frac(r.link_fraction)]
            for r in g.itertuples(index=False)]
    link = (f"link peak {table.link_gbps:,.0f} GB/s per direction ({table.link_source})" if table.link_gbps
            else f"link peak unknown ({table.link_source})")
    caption = (f"{len(table.rows)} communication activities; medians per operation and size; bus bandwidth by "
               f"NCCL's formulas on the transfer time (peer wait excluded where matched); overlapped: compute ran "
               f"beside ≥ {table.params.overlapped_min_share:.0%} of the transfer; {link}")
    return Section("Collectives: size and bandwidth", header, rows, caption)
