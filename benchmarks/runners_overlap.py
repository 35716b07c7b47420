"""Stand-alone overlap check of runner traces (no analyzers import, so it runs on GPU hosts).

overlap_ratio = |busy(comm) ∩ busy(compute)| / |busy(comm)| per rank over the whole
profiled window, with kernels classified by analyzers/default_rules.toml (read as data),
so that the figures match DESIGN.md's definition. The proper tool is
`overlapscope analyze`; this exists to check sample traces where it is not installed.

usage: python benchmarks/runners_overlap.py DIR [DIR...]   (each DIR holds rank*.json.gz or rank*.sqlite)
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import sys
import tomllib
from pathlib import Path

import numpy as np

RULES = Path(__file__).resolve().parent.parent / "analyzers" / "default_rules.toml"
# nsys copyKind values (CUPTI_ACTIVITY_MEMCPY_KIND): the names Kineto gives the same copies
COPY_KIND = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}


def load_rules() -> list[tuple[re.Pattern[str], str]]:
    data = tomllib.loads(RULES.read_text())
    return [(re.compile(r["pattern"]), r["category"]) for r in data["rule"]]


def classify(name: str, rules: list[tuple[re.Pattern[str], str]]) -> str:
    for pat, cat in rules:
        if pat.search(name):
            return cat
    return "other"


def kineto_events(path: Path) -> list[tuple[str, int, int]]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        trace = json.load(f)
    out = []
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            start = round(float(e["ts"]) * 1000)
            out.append((e["name"], start, start + round(float(e["dur"]) * 1000)))
    return out


def nsys_events(path: Path) -> list[tuple[str, int, int]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    out: list[tuple[str, int, int]] = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        q = ("select s.value, k.start, k.end from CUPTI_ACTIVITY_KIND_KERNEL k "
             "join StringIds s on s.id = k.demangledName")
        out += [(n, int(a), int(b)) for n, a, b in con.execute(q)]
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for kind, a, b in con.execute("select copyKind, start, end from CUPTI_ACTIVITY_KIND_MEMCPY"):
            out.append((f"Memcpy {COPY_KIND.get(kind, str(kind))}", int(a), int(b)))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        out += [("Memset", int(a), int(b)) for a, b in con.execute("select start, end from CUPTI_ACTIVITY_KIND_MEMSET")]
    con.close()
    return out


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals: sort by start, a new run begins where start > running max of ends."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_max = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def intersect_len(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Total length of the intersection of two disjoint sorted interval sets."""
    (as_, ae), (bs, be) = a, b
    total, i, j = 0, 0, 0
    while i < as_.size and j < bs.size:
        lo, hi = max(as_[i], bs[j]), min(ae[i], be[j])
        if hi > lo:
            total += int(hi - lo)
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return total


def rank_overlap(events: list[tuple[str, int, int]], rules: list[tuple[re.Pattern[str], str]]) -> dict[str, float]:
    cats = np.array([classify(n, rules) for n, _, _ in events])
    starts = np.array([a for _, a, _ in events], dtype=np.int64)
    ends = np.array([b for _, _, b in events], dtype=np.int64)
    comm = union(starts[cats == "comm"], ends[cats == "comm"])
    comp = union(starts[cats == "compute"], ends[cats == "compute"])
    comm_ns = int((comm[1] - comm[0]).sum())
    comp_ns = int((comp[1] - comp[0]).sum())
    ov = intersect_len(comm, comp)
    return {"comm_ms": comm_ns / 1e6, "compute_ms": comp_ns / 1e6, "overlap_ms": ov / 1e6,
            "overlap_ratio": ov / comm_ns if comm_ns else float("nan"),
            "n_comm": int((cats == "comm").sum()), "n_compute": int((cats == "compute").sum())}


def check_dir(d: Path, rules: list[tuple[re.Pattern[str], str]]) -> dict[int, dict[str, float]]:
    res = {}
    for p in sorted(d.iterdir()):
        m = re.fullmatch(r"rank(\d+)\.(json|json\.gz|sqlite)", p.name)
        if not m:
            continue
        events = nsys_events(p) if p.suffix == ".sqlite" else kineto_events(p)
        res[int(m.group(1))] = rank_overlap(events, rules)
    return res


def main(argv: list[str]) -> int:
    rules = load_rules()
    print(f"{'trace set':48s} rank  comm_ms  compute_ms  overlap_ms  overlap_ratio")
    for arg in argv:
        for rank, r in check_dir(Path(arg), rules).items():
            print(f"{arg:48s} {rank:4d} {r['comm_ms']:8.3f} {r['compute_ms']:11.3f} {r['overlap_ms']:11.3f} "
                  f"{r['overlap_ratio']:14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
