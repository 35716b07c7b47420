"""Every number in words with one unit per quantity, every series visible, emphasis that agrees with the table.

Pages walked under AppTest on bundled runs (ag-gemm-nsys, an ag-gemm pair); figure rules on hand-made frames whose
answers are worked out here.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from analyzers.io.load import load_traces
from analyzers.report import analyze
from viz import labels
from viz.collectives_figure import bytes_ticks
from viz.figures import iteration_figure, skew_heatmap

from .conftest import HTA_TRACES
from .test_app import KINETO_PAIR
from .test_app_decision import _app, bundled  # noqa: F401 - fixture

RAW = [
    (re.compile(r"\b\d{4,} ns\b"), "a time in raw ns"),
    (re.compile(r"(?<![\d.,])0\.\d{5,}(?![\d])"), "a raw fraction"),
    (re.compile(r"\{['\"]"), "a {...} blob"),
    (re.compile(r"verified-by-|matched-collective-ends|same-host\b"), "a raw method id"),
    (re.compile(r"[+-]\d{4,}(\.\d)?%"), "a percentage past +999 %"),
]


def _texts(at) -> list[str]:
    out = [str(x.value) for kind in ("markdown", "caption", "info", "warning", "success", "error", "text")
           for x in getattr(at, kind)]
    out += [f"{m.label}: {m.value}" for m in at.metric]
    for df in at.dataframe:
        out += [str(v) for v in df.value.to_numpy().ravel()]
    return out


def test_no_raw_numbers_on_any_page(bundled) -> None:  # noqa: F811
    at = _app("ag-gemm-nsys/sync-in-loop,ag-gemm/host-sync")
    found = []
    for page in ("overview", "timeline", "crossrank", "stragglers", "syncs", "collectives", "diff", "run"):
        if page != "overview":
            at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        for text in _texts(at):
            found += [f"{page}: {why}: {text[:120]!r}" for rx, why in RAW if rx.search(text)]
        assert not at.json, f"{page}: a JSON blob shown"
    assert not found, found


def test_units_by_hand() -> None:
    assert labels.relative(314.329) == "×315"  # was +31432.9%
    assert labels.relative(0.25) == "+25.0%" and labels.relative(0) == "0.0%"
    assert labels.delta("time", 0) == "0.000 ms" and labels.delta("ratio", 0) == "0.0 pt"
    assert labels.metric("share_of_span").kind == "ratio"
    t = bytes_ticks(pd.DataFrame({"bytes": [3e3, 2e9]}))
    assert t["ticktext"] == ["1 kB", "10 kB", "100 kB", "1 MB", "10 MB", "100 MB", "1 GB", "10 GB"]
    assert t["tickvals"][0] == 1e3 and t["tickvals"][-1] == 1e10


def test_coinciding_iteration_lines_stay_apart() -> None:
    # three runs, two ranks each, every step at 0 % overlap: six identical lines
    ts = load_traces([HTA_TRACES / n for n in KINETO_PAIR], label="pair")
    rep = analyze(ts)
    same = [(f"run {i}", rep) for i in range(3)]
    fig = iteration_figure(same)
    assert len(fig.data) == 6
    xs = np.array([np.asarray(t.x, dtype=float) for t in fig.data])
    assert all(len(set(col)) == 6 for col in xs.T), "each line has its own x within a step"
    assert np.allclose(np.round(xs.mean(axis=0)), xs.mean(axis=0))  # centred on the step
    assert len({(t.line.dash, t.marker.symbol) for t in fig.data}) == 6


def test_heatmap_red_only_where_the_table_has_wait() -> None:
    # collective 1: rank 1 starts 5 ms late and rank 0 waited 5 ms; collective 2: rank 1 starts 7 ms late but
    # nobody waited (max wait 0): it must not be the darkest red column
    colls = pd.DataFrame({"coll_id": [1, 2], "coll_name": ["ar", "ar"], "first_start_ns": [0, 100_000_000],
                          "start_ns_r0": [0, 100_000_000], "start_ns_r1": [5_000_000, 107_000_000],
                          "skew_ns": [5_000_000, 7_000_000], "max_wait_ns": [5_000_000, 0]})
    fig = skew_heatmap(colls, [0, 1])
    red = next(t for t in fig.data if t.colorscale[0][1].startswith("rgb(255,245"))  # Reds
    grey = next(t for t in fig.data if t is not red)
    assert list(red.x) == ["#1 ar"] and list(grey.x) == ["#2 ar"]
    assert np.nanmax(np.asarray(red.z, dtype=float)) == 5.0 and np.nanmax(np.asarray(grey.z, dtype=float)) == 7.0
    assert grey.zmax > 2 * 7.0  # grey stays light


def test_heatmap_columns_follow_the_table_on_a_bundled_run(bundled) -> None:  # noqa: F811
    at = _app("ag-gemm/sync-in-loop")
    at.switch_page("views/crossrank.py").run()
    assert not at.exception
    rep = analyze(load_traces(sorted((bundled / "ag-gemm" / "sync-in-loop").glob("rank*.json.gz"))))
    colls = rep.cross_rank.collectives
    waited = {f"#{int(c)} {n}" for c, n, w in zip(colls["coll_id"], colls["coll_name"], colls["max_wait_ns"],
                                                  strict=True) if (w or 0) > 0}
    heat = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                if any(t.get("type") == "heatmap" for t in json.loads(c.proto.spec)["data"]))
    for t in heat["data"]:
        is_red = "late, peers waited" in t["colorbar"]["title"]["text"]
        assert all((x in waited) == is_red for x in t["x"])
