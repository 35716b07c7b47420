"""Tables as people read them: every app table goes through ``readable`` (and ``show``).

Columns are named by the data's keys (``gpu_idle_ns``, ``overlap_ratio``); the metric registry
(viz/labels.py, shared with the CLI and the HTML report) gives each its header ("GPU idle caused (ms)")
and how its values read: ratios in percent, times in ms, n/a where a figure is undefined, — where
there is none (no step, an id of -1). The frames shown are text, so no cell reads None or nan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import streamlit as st

from viz import labels
from viz.safe_text import csv_cell


def cell(key: str, v: Any) -> str:
    """One value of metric key as its column shows it (the header carries a time's unit); a name that a
    spreadsheet would run as a formula starts with ' (the table's CSV download writes cells as shown)."""
    return csv_cell(labels.number(labels.metric(key).kind, v))


def readable(frame: pd.DataFrame | Iterable[Mapping[str, Any]], columns: Iterable[str] | None = None,
             headers: Mapping[str, str] | None = None) -> pd.DataFrame:
    """frame's columns (all, or these keys in this order) as text under their registry headers.

    headers overrides a header (e.g. a run's name for its side of a diff); a key the frame lacks
    shows as — in every row.
    """
    df = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(list(frame))
    keys = list(columns) if columns is not None else [str(c) for c in df.columns]
    out: dict[str, list[str]] = {}
    helps: dict[str, str] = {}
    for key in keys:
        title = (headers or {}).get(key) or labels.header(key)
        while title in out:  # two keys with one label (a registry gap) must not merge columns
            title += " "
        out[title] = ([cell(key, v) for v in df[key].tolist()] if key in df.columns
                      else [labels.ABSENT] * len(df))
        if help_text := labels.metric(key).help:
            helps[title] = help_text
    table = pd.DataFrame(out, index=range(len(df)))
    table.attrs["help"] = helps
    return table


def show(table: pd.DataFrame, **kwargs: Any) -> Any:
    """st.dataframe of a readable() table, each column's registry help as its header's tooltip."""
    config = {c: st.column_config.Column(help=h) for c, h in table.attrs.get("help", {}).items()}
    return st.dataframe(table, hide_index=True, column_config=config, **kwargs)


def show_evidence(evidence: dict[str, Any], key: str) -> None:
    """A finding's evidence: scalars in one table (times in ms), lists of records as tables."""
    scalars = {k: v for k, v in evidence.items() if not isinstance(v, (list, tuple, dict))}
    if scalars:
        st.dataframe(pd.DataFrame({"evidence": [labels.label(k) for k in scalars],
                                   "value": [csv_cell(labels.show(k, v)) for k, v in scalars.items()]}),
                     hide_index=True, key=f"{key}-scalars")
    for k, v in evidence.items():
        if isinstance(v, dict):  # a table of its entries in words, never a {...} blob
            st.caption(labels.label(k))
            st.dataframe(pd.DataFrame([[a, csv_cell(b)] for a, b in entries(v)], columns=["item", "value"]),
                         hide_index=True, key=f"{key}-{k}")
        elif isinstance(v, (list, tuple)) and v:
            st.caption(labels.label(k))
            if all(isinstance(x, dict) for x in v):
                show(readable(list(v)), key=f"{key}-{k}")
            else:
                st.text(", ".join(map(str, v[:50])) + (f", … ({len(v)} in all)" if len(v) > 50 else ""))


def entries(d: dict[str, Any], prefix: str = "") -> list[list[str]]:
    """A nested dict as (item, value) rows: keys in words ("rank 3" for a rank's number), values as the
    registry writes them (times in ms, ratios in percent), nested dicts one row per inner entry."""
    rows: list[list[str]] = []
    for k, v in d.items():
        name = f"rank {k}" if str(k).isdigit() else labels.label(str(k))
        name = f"{prefix} · {name}" if prefix else name
        if isinstance(v, dict):
            rows += entries(v, name)
        elif isinstance(v, (list, tuple)):
            rows.append([name, ", ".join(str(x) for x in v[:20]) + (f", … ({len(v)} in all)" if len(v) > 20 else "")])
        elif v == -1 and not isinstance(v, bool):  # the runners' "none" (fail_rank -1: no rank fails)
            rows.append([name, labels.ABSENT])
        else:
            rows.append([name, labels.show(str(k), v) if not str(k).isdigit() else str(v)])
    return rows

