"""Byte-identity of `analyze -f json` between two checkouts, on every set in sample_traces/ and the
multi-rank public sets (tests/data/public), plus any folders given.

A change meant to leave results as they are (memory, speed) is checked with it: the baseline
checkout's JSON and this checkout's JSON must be the same bytes, set by set.

Where a set's bytes differ, the JSON paths that differ are listed (values that only one side has, or that
differ; lists of another length are one path), up to --paths of them, so that an intended change of the
document (a section moved to the Parquet tables) is told from a changed figure.

usage: python benchmarks/json_identity.py BASELINE_CHECKOUT [--extra FOLDER ...] [--jobs 2] [--paths 12]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "tests" / "data" / "public"
# Multi-rank public sets: two Kineto ranks of one job, and Nsight exports of one process on two GPUs.
PUBLIC_SETS = [
    [PUBLIC / "hta" / "trace_filter_sampled_rank-0.json.gz", PUBLIC / "hta" / "trace_filter_sampled_rank-1.json.gz"],
    [PUBLIC / "nsys" / "h100_2gpu_1s.sqlite.gz"],
    [PUBLIC / "nsys" / "mfu_2gpu_before.sqlite.gz"],
    [PUBLIC / "nsys" / "mfu_2gpu_after.sqlite.gz"],
]


def sample_sets() -> list[list[Path]]:
    """Every leaf folder of sample_traces/ that holds trace files."""
    out = []
    for d in sorted((ROOT / "sample_traces").rglob("*")):
        if d.is_dir() and not any(p.is_dir() for p in d.iterdir()) and any(d.iterdir()):
            out.append([d])
    return out


def differences(a: object, b: object, path: str = "") -> list[str]:
    """The JSON paths at which decoded documents a and b differ (see the module docstring)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            if k not in b:
                out.append(f"{path}.{k}: baseline only")
            elif k not in a:
                out.append(f"{path}.{k}: this checkout only")
            else:
                out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} -> {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:60]} -> {str(b)[:60]}"]


def analyze_json(checkout: Path, paths: list[Path], jobs: int) -> tuple[int, bytes, str]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, "-m", "overlapscope", "analyze", *map(str, paths), "-f", "json", "--no-cache",
           "--jobs", str(jobs)]
    p = subprocess.run(cmd, capture_output=True, env=env, cwd=checkout)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace").strip()[-300:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path, help="the other checkout (e.g. a git worktree of main)")
    ap.add_argument("--extra", type=Path, nargs="*", default=[], help="more set folders")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--paths", type=int, default=12, help="differing JSON paths listed per set")
    a = ap.parse_args()
    sets = sample_sets() + PUBLIC_SETS + [[p] for p in a.extra]
    differ = 0
    for paths in sets:
        rc0, base, err0 = analyze_json(a.baseline.resolve(), paths, a.jobs)
        rc1, mine, err1 = analyze_json(ROOT, paths, a.jobs)
        same = rc0 == rc1 and base == mine
        differ += not same
        name = " ".join(str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in paths)
        print(f"{'same' if same else 'DIFFERENT'}  rc {rc0}/{rc1}  {len(mine):>9} bytes  "
              f"{hashlib.sha256(mine).hexdigest()[:12]}  {name}" + ("" if same else f"  [{err0} | {err1}]"),
              flush=True)
        if not same and rc0 == rc1 == 0:
            found = differences(json.loads(base), json.loads(mine))
            for d in found[:a.paths]:
                print(f"    {d}")
            if len(found) > a.paths:
                print(f"    ... {len(found) - a.paths} more")
    print(f"{len(sets) - differ} of {len(sets)} sets byte-identical")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
