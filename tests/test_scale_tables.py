"""Table and Markdown output stay readable at many ranks: distributions and the top ranks, not a row each."""

from __future__ import annotations

from analyzers.report import analyze
from overlapscope.render import to_markdown

from .synth_multi import US, collective_run


def _report(n: int, late: int):
    arrivals = {r: [(300 * US if r == late else (r % 7) * 100)] * 6 for r in range(n)}
    ts, _ = collective_run(n, arrivals=arrivals, hostnames={r: f"node{r // 8}" for r in range(n)})
    return analyze(ts)


def test_many_ranks_give_distributions_and_top_ranks():
    rep = _report(60, late=37)
    md = to_markdown(rep.to_dict())
    lines = md.splitlines()
    assert len(lines) < 180  # sections of fixed size; one row per rank would add 60+ rows to each per-rank table
    assert "| median of 60 ranks |" in md and "| p90 of 60 ranks |" in md
    assert sum(1 for ln in lines if "(lowest overlap)" in ln) == 5
    st = lines.index(next(ln for ln in lines if ln.startswith("### Stragglers")))
    assert lines[st + 4].startswith("| rank 37 (outlier) | node4 | 6 / 6 | 300.0 µs")
    assert "Outliers (robust z &gt;= 3.5): 37." in md and "node4 300.0 µs" not in md  # host median, not the rank's
    assert "- ranks 0-59: no ProfilerStep / step ranges found" in md  # a note all ranks share, said once
    peer = lines.index("### Peer wait per rank")
    assert "10 of 60 ranks shown" in "\n".join(lines[peer:peer + 20])


def test_few_ranks_keep_one_row_each():
    # look-alike: 8 ranks are a handful, every rank keeps its row
    rep = _report(8, late=3)
    md = to_markdown(rep.to_dict())
    assert "median of" not in md and "(lowest overlap)" not in md
    assert all(f"\n| {r} |" in md for r in range(8))
    assert "| rank 3 (outlier) |" in md


def test_quantile_is_numpys_linear_quantile():
    import numpy as np

    from viz.scale_tables import quantile

    x = sorted(np.random.default_rng(5).normal(size=37).tolist())
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        assert quantile(x, q) == np.quantile(x, q)
    assert quantile([4.0], 0.9) == 4.0
