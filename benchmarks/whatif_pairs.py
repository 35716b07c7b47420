"""Checks what-if predictions against real fixes: runner variant pairs in sample_traces that differ by one fix.

For each pair, the fixed variant's step is predicted from the unfixed variant's trace alone (`whatif`,
median over steps of the slowest rank's step) and compared with the fixed variant's measured step
(the same definition, from its own trace). A pair whose fix the graph cannot express (it adds,
merges or moves kernels) is listed as such, with what the closest fix gives in parentheses where
there is one; the median error is over the predictable pairs only. The last column compares the
two runs' GPUs: the median duration of each rank's busiest compute kernel run alone (nothing of the
other class beside it; the unfixed run's busiest kernel in both), fixed run over unfixed run: what the
prediction cannot know. Prints the
Markdown table of docs/whatif.md.

usage: python benchmarks/whatif_pairs.py [--samples DIR] [--no-et] [--only TEXT]
       python benchmarks/whatif_pairs.py --recordings [--no-et]
  DIR: a tree laid out as sample_traces/ whose sets replace the repository's (sets it lacks come from
  sample_traces/), e.g. benchmarks/recordings/ag-gemm-second, a second recording of the ag-gemm pairs, or
  benchmarks/recordings/fsdp-dim2048, the FSDP pairs at dim 2048, where the host set the step.
  --recordings: every pair whose two sets one recording in benchmarks/recordings holds (nothing taken from
  sample_traces/), one row each, with the median and largest error over them.
  An unfixed set with Execution Traces beside its traces (rank{R}.et.json.gz, as the runners record them) is
  replayed with them, as `whatif --et` does; --no-et leaves them out (the op tree's module ranges alone).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzers.graph.analysis import whatif  # noqa: E402
from analyzers.graph.contention import F_ALONE, contended_replay, overlap_shares  # noqa: E402
from analyzers.graph.fixes import apply_fixes, baseline_inputs, parse_fix  # noqa: E402
from analyzers.graph.moves import MOVES, apply_moves  # noqa: E402
from analyzers.graph.rank_graph import CAT_CODES  # noqa: E402
from analyzers.graph.replay import loop_order  # noqa: E402
from analyzers.graph.steps import job_steps, median_ns, rank_steps  # noqa: E402
from analyzers.io.exec_trace import read_exec_traces  # noqa: E402
from analyzers.io.load import load_traces  # noqa: E402
from analyzers.report import analyze, graph_run  # noqa: E402

# (unfixed set, fix or None, fixed set, what differs, None when predictable else why not)
PAIRS = [
    ("ag-gemm/host-sync", "host-syncs", "ag-gemm/sync-before-loop", "a stream.synchronize() per step removed", None),
    ("ag-gemm/sync-in-loop", "serialized-streams", "ag-gemm/sync-before-loop", "fork waits hoisted out of the loop",
     None),
    ("ag-gemm-nsys/sync-in-loop", "serialized-streams", "ag-gemm-nsys/sync-before-loop",
     "fork waits hoisted out of the loop (nsys)", None),
    ("symm-mem/two-stream", "agreed-order", "symm-mem/two-stream-sleep", "a sleep kernel on the main stream first",
     None),
    ("ag-gemm-race/tuned-no-gate", "comm-first", "ag-gemm/tuned", "a gate kernel the local GEMM waits for", None),
    ("fsdp/front-loaded", "prefetch", "fsdp/zero2", "all-gathers issued one block ahead, not all up front", None),
    ("fsdp/zero2-no-prefetch", "prefetch", "fsdp/zero2", "all-gathers prefetched one block ahead", None),
    ("fsdp/zero3-no-prefetch", "prefetch", "fsdp/zero3", "all-gathers prefetched one block ahead", None),
    ("gemm-rs/ring-uncoalesced", "coalesce", "gemm-rs/ring", "send and receive coalesced (batch_isend_irecv)", None),
]


SAMPLES = ROOT / "sample_traces"
USE_ET = True


def _path(folder: str) -> Path:
    """The set from --samples where it has it, else the repository's sample_traces."""
    path = SAMPLES / folder
    return path if path.is_dir() else ROOT / "sample_traces" / folder


def _report(folder: str):
    return analyze(load_traces([_path(folder)]))


def _et_run(folder: str):
    """The set's graph with the Execution Traces beside its traces (None where it has none)."""
    ets = sorted(_path(folder).glob("rank*.et.json*"))
    if not ets or not USE_ET:
        return None
    return graph_run(load_traces([_path(folder)]), None, read_exec_traces(ets))


def _busiest_alone(rep, names: dict[int, str] | None = None) -> dict[int, tuple[str, float]]:
    """Per rank: its busiest compute kernel (or the one named in `names`) and the median duration of its
    instances run alone."""
    sg = rep.graph_run.sg
    dur = baseline_inputs(sg).dur
    f = overlap_shares(sg, sg.start, sg.end, dur)
    out = {}
    for r in sg.ranks:
        g, b = sg.graphs[r], sg.base[r]
        rows = np.flatnonzero(g.cat == CAT_CODES["compute"])
        if not len(rows):
            continue
        kernel_names = np.asarray(g.names, dtype=object)[g.name_id[rows]]
        total: dict[str, int] = {}
        for nm, d in zip(kernel_names.tolist(), dur[rows + b].tolist(), strict=True):
            total[nm] = total.get(nm, 0) + d
        top = names.get(r) if names is not None else max(total, key=total.__getitem__)
        pick = rows[(kernel_names == top) & (f[rows + b] < F_ALONE)] + b
        if top is not None and len(pick):
            out[r] = (top, float(np.median(dur[pick])))
    return out


def _speeds(a, b) -> dict[int, float]:
    """Per rank: the unfixed run's busiest compute kernel alone, its duration in the fixed run over the
    unfixed run's (the same kernel name in both)."""
    da = _busiest_alone(a)
    db = _busiest_alone(b, {r: name for r, (name, _) in da.items()})
    return {r: db[r][1] / da[r][1] for r in sorted(set(da) & set(db)) if da[r][1] > 0}


def _host_span(rep) -> dict[int, float]:
    """Per rank: the median over steps of the host's time from a step's first launch to its last (the CPU's own
    speed in that run, which the replay keeps as measured)."""
    sg = rep.graph_run.sg
    out = {}
    for r in sg.ranks:
        m = (sg.rank_of == r) & (sg.seg >= 0) & (sg.step >= 0)
        t, st = sg.seg_base[sg.seg[m]] + sg.off[m], sg.step[m]
        spans = [float(t[st == s].max() - t[st == s].min()) for s in np.unique(st).tolist()]
        if spans:
            out[r] = float(np.median(spans))
    return out


def _host_drift(a, b) -> str:
    ha, hb = _host_span(a), _host_span(b)
    return ", ".join(f"r{r} {100 * (hb[r] / ha[r] - 1):+.1f} %" for r in sorted(set(ha) & set(hb)) if ha[r]) or "—"


def _unprofiled(a: str, b: str, replayed: int, predicted: int | None) -> str:
    """The runner's own timing of both variants (CUDA events, median of many steps, no profiler: manifest.json),
    fixed over unfixed, beside the prediction over the replay: what the fix bought without the profiler's host
    overhead, which differs between variants (a diagnostic; the prediction never reads it)."""
    try:
        ta, tb = (json.loads((_path(x) / "manifest.json").read_text())["timings_ms"]["variant_ms"] for x in (a, b))
    except (OSError, KeyError, ValueError):
        return "—"
    pred = f"{100 * (predicted / replayed - 1):+.1f} %" if predicted and replayed else "—"
    return f"{100 * (tb / ta - 1):+.1f} % vs {pred}"


def _drift(speeds: dict[int, float]) -> str:
    return ", ".join(f"r{r} {100 * (v - 1):+.1f} %" for r, v in speeds.items()) or "—"


def _at_fixed_speed(run, fix: str, speeds: dict[int, float]) -> int | None:
    """The prediction with each rank's compute durations scaled to the fixed run's GPU speed (a diagnostic:
    the ratio comes from the fixed run, which a prediction cannot see)."""
    sg = run.sg
    fixes = [parse_fix(fix)]
    moved = apply_moves(sg, fixes) if any(f.name in MOVES for f in fixes) else None
    inp = moved.inputs if moved else apply_fixes(sg, fixes)
    graph = moved.sg if moved else sg  # a move may add or reorder activities: its rows, not the trace's
    compute = graph.cat == CAT_CODES["compute"]
    for r, v in speeds.items():
        sel = compute & (graph.rank_of == r)
        inp.dur[sel] = np.round(inp.dur[sel] * v).astype(np.int64)
    order = run.order if graph.order_key is sg.order_key else loop_order(graph)  # as moves.moved_replay
    rp = contended_replay(graph, inp, order).replay
    return median_ns(job_steps(rank_steps(sg, rp.start, rp.end))["dur_ns"])


RECORDINGS = ROOT / "benchmarks" / "recordings"


def _recording_trees() -> list[Path]:
    """Every tree under benchmarks/recordings laid out as sample_traces/ (the recording's folder, or one level
    below it) that holds both sets of at least one pair."""
    trees = []
    for top in sorted(p for p in RECORDINGS.iterdir() if p.is_dir()):
        for tree in [top, *sorted(p for p in top.iterdir() if p.is_dir())]:
            if any((tree / a).is_dir() and (tree / b).is_dir() for a, _, b, _, _ in PAIRS):
                trees.append(tree)
    return trees


def recordings_table() -> None:
    """One row per pair per recording: only pairs whose two sets the recording holds (none from sample_traces)."""
    global SAMPLES
    print("| recording | pair (fix) | predicted | fixed measured | error | busiest GEMM alone, fixed vs unfixed | "
          "error at the fixed run's GPU speed |")
    print("|---|---|---|---|---|---|---|")
    errs = []
    for tree in _recording_trees():
        SAMPLES = tree
        for a, fix, b, _, _ in PAIRS:
            if not ((tree / a).is_dir() and (tree / b).is_dir()):
                continue
            ra, rb = _report(a), _report(b)
            fixed = rb.critical_path["fidelity"]["measured_step_ns"]
            run = _et_run(a) or ra.graph_run
            pred = whatif(run, [parse_fix(fix)])["predicted_step_ns"]
            speeds = _speeds(ra, rb)
            same = _at_fixed_speed(run, fix, speeds) if speeds else None
            same_s = f"{100 * (same - fixed) / fixed:+.1f} %" if same else "—"
            errs.append(abs(pred - fixed) / fixed)
            print(f"| {tree.relative_to(RECORDINGS)} | {a} → {b} ({fix}) | {pred / 1e6:.3f} ms | "
                  f"{fixed / 1e6:.3f} ms | {100 * (pred - fixed) / fixed:+.1f} % | {_drift(speeds)} | {same_s} |")
    print(f"\n{len(errs)} pairs over {len(_recording_trees())} recordings: median |error| "
          f"{100 * float(np.median(errs)):.1f} %, max {100 * max(errs):.1f} %, "
          f"{sum(e > 0.10 for e in errs)} beyond 10 %")


def main() -> None:
    global SAMPLES, USE_ET
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=Path, default=SAMPLES,
                    help="a tree laid out as sample_traces/ (e.g. a second recording of some of its sets)")
    ap.add_argument("--no-et", action="store_true", help="replay without the sets' Execution Traces")
    ap.add_argument("--only", default="", help="only the pairs whose unfixed set contains this text (e.g. fsdp/)")
    ap.add_argument("--recordings", action="store_true",
                    help="every pair of every recording in benchmarks/recordings, one row each")
    args = ap.parse_args()
    SAMPLES, USE_ET = args.samples, not args.no_et
    if args.recordings:
        recordings_table()
        return
    rows = []
    for a, fix, b, what, why_not in PAIRS:
        if args.only not in a:
            continue
        ra, rb = _report(a), _report(b)
        fixed = rb.critical_path["fidelity"]["measured_step_ns"]
        run = _et_run(a) or ra.graph_run
        res = whatif(run, [parse_fix(fix)] if fix else [])
        pred = res["predicted_step_ns"] if fix else None
        err = (pred - fixed) / fixed if pred is not None else None
        speeds = _speeds(ra, rb)
        same = _at_fixed_speed(run, fix, speeds) if fix and not why_not and speeds else None
        same_s = f"{100 * (same - fixed) / fixed:+.1f} %" if same else "—"
        rows.append((a, fix or "—", b, what, why_not, res["measured_step_ns"], res["replayed_step_ns"], pred, fixed,
                     err, f"{_drift(speeds)} | {same_s} | {_host_drift(ra, rb)} | "
                          f"{_unprofiled(a, b, res['replayed_step_ns'], pred)}"))
    print("| unfixed set | fix | fixed set | what differs | unfixed measured | replayed | predicted | "
          "fixed measured | error | busiest GEMM alone, fixed run vs unfixed | error at the fixed run's GPU speed | "
          "host time per step, fixed run vs unfixed | "
          "unprofiled step, fixed vs unfixed (runner) vs predicted vs replayed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for a, fix, b, what, why_not, m, r, p, f, e, drift in rows:
        ps = f"{p / 1e6:.3f} ms" if p is not None else "—"
        es = f"{100 * e:+.1f} %" if e is not None else "—"
        if why_not:
            what = f"{what}; **{why_not}**"
            ps, es = (f"({ps})", f"({es})") if p is not None else (ps, es)
        print(f"| {a} | {fix} | {b} | {what} | {m / 1e6:.3f} ms | {r / 1e6:.3f} ms | {ps} | {f / 1e6:.3f} ms | {es} | "
              f"{drift} |")
    errs = [abs(r[9]) for r in rows if r[4] is None]
    med, worst = float(np.median(errs)), max(errs)
    met = med <= 0.05 and worst <= 0.10
    print(f"\n{len(errs)} predictable pairs of {len(rows)}: median |error| {100 * med:.1f} %, max {100 * worst:.1f} % "
          f"(target: each within 10 %, median within 5 %: {'met' if met else 'not met'})")


if __name__ == "__main__":
    main()
