"""What the caller of `analyze` holds per rank, and where: bench_many_ranks.py's caller growth taken apart.

usage: python benchmarks/caller_memory.py N [--source RANK.json] [--data DIR] [--top 12]

Builds bench_many_ranks.py's set of N hard links of one rank (each file named rank{r}.json, its rank from the
name) under DIR (default benchmarks/data), loads it as `overlapscope analyze -f json` does (pool workers, the
host tables kept there) and analyzes it in this process under tracemalloc. Prints, per rank (divided by N):
- the pickled size of each RankResults field and of the shipped trace (what travels from the workers);
- what this process holds after the load, after the set graph is built and at the end of the pricing, by
  file:line (tracemalloc, the largest lines), and tracemalloc's peak over the whole analyze;
- the nbytes of the rank graphs', the set graph's and the unmodified replay's numpy arrays.
tracemalloc slows the caller: the times are not figures, the bytes are.
"""

from __future__ import annotations

import argparse
import pickle
import resource
import sys
import tracemalloc
from dataclasses import fields
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_many_ranks  # noqa: E402

SNAPS: dict[str, tracemalloc.Snapshot] = {}
ARRAYS: dict[str, dict[str, int]] = {}


def _arrays_nbytes(obj: object) -> dict[str, int]:
    """nbytes of each numpy array attribute of obj (dataclass or plain object)."""
    out = {}
    for k, v in vars(obj).items():
        if isinstance(v, np.ndarray):
            out[k] = v.nbytes
    return out


PEAKS: dict[str, int] = {}


def _snap(name: str) -> None:
    """The snapshot at this point, and tracemalloc's peak since the previous one."""
    PEAKS[name] = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    SNAPS[name] = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")])


def _hook() -> None:
    """Snapshots and array sizes at the set graph's build and at the end of the pricing."""
    import analyzers.graph.pricing as pricing
    import analyzers.report as report

    build = report.build_set_graph

    def built(graphs, *a, **k):
        sg = build(graphs, *a, **k)
        ARRAYS["rank graphs (all)"] = {}
        for g in graphs.values():
            for name, nb in _arrays_nbytes(g).items():
                ARRAYS["rank graphs (all)"][name] = ARRAYS["rank graphs (all)"].get(name, 0) + nb
        ARRAYS["set graph"] = _arrays_nbytes(sg)
        _snap("set graph built")
        return sg

    report.build_set_graph = built
    import analyzers.graph.analysis as analysis

    release = analysis.release_removals

    def released(run):
        kept = run.__dict__.get("_replays") or {}
        ARRAYS[f"kept fix replays ({len(kept)})"] = {
            f"{k}.{name}": nb for k, (inp, rp, _) in kept.items() for o in (inp, rp)
            for name, nb in _arrays_nbytes(o).items()}
        _snap("walked, before the removals are released")
        return release(run)

    analysis.release_removals = released
    savings = pricing.finding_savings

    def priced(run, ids):
        out = savings(run, ids)
        ARRAYS["replay inputs (unmodified)"] = _arrays_nbytes(run.inputs)
        ARRAYS["replay (unmodified)"] = _arrays_nbytes(run.base)
        _snap("priced")
        return out

    pricing.finding_savings = priced


def _where(tb: tracemalloc.Traceback) -> str:
    """The innermost frame of ours (analyzers/, overlapscope/): numpy's and pickle's allocations named by our caller."""
    ours = [fr for fr in tb if "/analyzers/" in fr.filename or "/overlapscope/" in fr.filename]
    fr = ours[-1] if ours else tb[-1]
    return f"{Path(fr.filename).parent.name}/{Path(fr.filename).name}:{fr.lineno}"


def _ours(snap: tracemalloc.Snapshot, prev: tracemalloc.Snapshot) -> list[tuple[str, tuple[int, int]]]:
    """(growth, held) by our innermost line, largest growth first."""
    out: dict[str, list[int]] = {}
    for sign, s in ((1, snap), (-1, prev)):
        for st in s.statistics("traceback"):
            w = out.setdefault(_where(st.traceback), [0, 0])
            w[0] += sign * st.size
            if sign > 0:
                w[1] += st.size
    return sorted(((k, (d, h)) for k, (d, h) in out.items()), key=lambda kv: -kv[1][0])


def _mb(b: float) -> str:
    return f"{b / 1e6:8.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int)
    ap.add_argument("--source", type=Path, default=bench_many_ranks.SOURCE)
    ap.add_argument("--data", type=Path, default=bench_many_ranks.DATA)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    bench_many_ranks.DATA = a.data
    folder = bench_many_ranks.build_set(a.n, a.source)
    import analyzers.report as report
    from analyzers.io.parallel import PER_RANK_KEY
    from overlapscope.common import load_set, options_from

    _hook()
    options = options_from(None, False, r"^ProfilerStep#(\d+)$")
    tracemalloc.start(4)
    _snap("start")
    traces = load_set([str(folder)], cache=False, options=options, host_tables=False)
    _snap("loaded")
    n = len(traces.ranks)
    res = traces.meta[PER_RANK_KEY][min(traces.ranks)]
    print(f"{n} ranks of {a.source}; per rank, MB:")
    print("pickled RankResults fields (rank 0):")
    for f in fields(res):
        print(f"  {f.name:14s} {_mb(len(pickle.dumps(getattr(res, f.name), protocol=5)))}")
    print(f"  {'(whole)':14s} {_mb(len(pickle.dumps(res, protocol=5)))}")
    print(f"  {'shipped trace':14s} {_mb(len(pickle.dumps(traces.ranks[min(traces.ranks)], protocol=5)))}")
    tracemalloc.reset_peak()
    report.analyze(traces, options)
    peak = max([tracemalloc.get_traced_memory()[1], *(v for k, v in PEAKS.items() if k not in ("start", "loaded"))])
    print(f"tracemalloc peak during analyze, per rank: {_mb(peak / n)}; total {_mb(peak)}")
    print(f"ru_maxrss of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB")
    for what, arrays in ARRAYS.items():
        total = sum(arrays.values())
        big = sorted(arrays.items(), key=lambda kv: -kv[1])[:8]
        print(f"{what}: {_mb(total / n)} per rank; " + ", ".join(f"{k} {v / n / 1e6:.3f}" for k, v in big))
    prev = SNAPS["start"]
    for name in ("loaded", "set graph built", "walked, before the removals are released", "priced"):
        snap = SNAPS.get(name)
        if snap is None:
            continue
        total = sum(s.size for s in snap.statistics("filename"))
        print(f"\n== {name}: held {_mb(total / n)} per rank (total {_mb(total)}), peak since previous "
              f"{_mb(PEAKS[name] / n)}; growth since previous, by line:")
        for where, (diff, size) in _ours(snap, prev)[:a.top]:
            print(f"  {_mb(diff / n)} {_mb(size / n)}  {where}")
        prev = snap


if __name__ == "__main__":
    main()
