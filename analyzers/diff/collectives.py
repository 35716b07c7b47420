"""Collective bandwidth of two runs side by side: per (operation, size bucket), A vs B."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.crossrank.collective_table import CollectiveTable, bucket_floor

COLUMNS = ["op", "size_bucket", "n_a", "n_b", "bytes_median_a", "bytes_median_b", "transfer_median_ns_a",
           "transfer_median_ns_b", "busbw_median_gbps_a", "busbw_median_gbps_b", "busbw_delta_gbps", "busbw_rel",
           "algbw_median_gbps_a", "algbw_median_gbps_b", "link_fraction_a", "link_fraction_b",
           "n_overlapped_a", "n_overlapped_b"]
_KEYS = ["op", "size_bucket"]
_TAKEN = {"n": "n", "bytes_median": "bytes_median", "transfer_median_ns": "transfer_median_ns",
          "busbw_median_gbps": "busbw_median_gbps", "algbw_median_gbps": "algbw_median_gbps",
          "link_fraction": "link_fraction", "n_overlapped": "n_overlapped"}


def collective_deltas(a: CollectiveTable | None, b: CollectiveTable | None) -> pd.DataFrame:
    """Per (operation, size bucket) present on either side: counts and medians of A and B, and the bus
    bandwidth change (B - A, GB/s, and relative to A). A group missing on one side has NaN there."""
    ga = a.groups if a is not None else pd.DataFrame(columns=[*_KEYS, *_TAKEN])
    gb = b.groups if b is not None else pd.DataFrame(columns=[*_KEYS, *_TAKEN])
    if ga.empty and gb.empty:
        return pd.DataFrame({c: [] for c in COLUMNS})
    side_a = ga[[*_KEYS, *_TAKEN]].rename(columns={k: f"{v}_a" for k, v in _TAKEN.items()})
    side_b = gb[[*_KEYS, *_TAKEN]].rename(columns={k: f"{v}_b" for k, v in _TAKEN.items()})
    out = side_a.merge(side_b, on=_KEYS, how="outer")
    for c in ("n_a", "n_b", "n_overlapped_a", "n_overlapped_b"):
        out[c] = out[c].fillna(0).astype(np.int64)
    a_bw = out["busbw_median_gbps_a"].astype(float)
    b_bw = out["busbw_median_gbps_b"].astype(float)
    out["busbw_delta_gbps"] = b_bw - a_bw
    with np.errstate(divide="ignore", invalid="ignore"):
        out["busbw_rel"] = np.where(a_bw > 0, (b_bw - a_bw) / a_bw, np.nan)
    out["_floor"] = out["size_bucket"].map(bucket_floor)
    out = out.sort_values(["op", "_floor"], kind="stable").reset_index(drop=True)
    return out[COLUMNS]
