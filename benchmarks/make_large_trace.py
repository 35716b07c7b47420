"""Build a large Kineto trace by tiling a real one in time (for speed/memory benchmarks).

Each copy is shifted past the previous one; correlation / External ids and ProfilerStep
numbers are offset so the copies stay distinct. Output is plain JSON (what torch.profiler
writes), so both overlapscope and HolisticTraceAnalysis read the same bytes.

usage: python benchmarks/make_large_trace.py SRC.json.gz OUT.json --copies N [--drop-steps]
  --drop-steps: leave out the ProfilerStep#N ranges (each rank's whole window is then one step)
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def tile(src: Path, out: Path, copies: int, drop_steps: bool = False) -> int:
    raw = src.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc.pop("traceEvents")
    if drop_steps:
        events = [e for e in events if not STEP.match(str(e.get("name", "")))]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    span = (t1 - t0) + 1000
    max_id = 1 + max(max(int(e.get("args", {}).get(k, 0) or 0) for k in ("correlation", "External id"))
                     for e in events if isinstance(e.get("args"), dict))
    steps = [int(m.group(1)) for e in events if (m := STEP.match(str(e.get("name", ""))))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        head = json.dumps(doc)[:-1]
        fh.write(head + (', ' if doc else '') + '"traceEvents": [\n')
        first = True
        for k in range(copies):
            for e in events:
                if k and e.get("ph") == "M":
                    continue
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + k * span
                if k and "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] = e2["id"] + k * max_id
                args = e2.get("args")
                if k and isinstance(args, dict):
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int) and args[key] > 0:
                            args[key] += k * max_id
                    e2["args"] = args
                m = STEP.match(str(e2.get("name", "")))
                if k and m:
                    e2["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_span}"
                fh.write(("" if first else ",\n") + json.dumps(e2, separators=(",", ":")))
                first = False
        fh.write("\n]}\n")
    return out.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--drop-steps", action="store_true", help="leave out the ProfilerStep#N ranges")
    a = ap.parse_args()
    size = tile(a.src, a.out, a.copies, a.drop_steps)
    print(f"{a.out}: {size / 1e6:.0f} MB from {a.copies} copies of {a.src.name}")


if __name__ == "__main__":
    main()
