"""What keying the caches by a file's bytes costs (analyzers/io/content_key.py), beside the parse.

Builds a ~56 MB Kineto rank by tiling a sample (benchmarks/make_large_trace.py), then times, each
repeated: the SHA-256 of its bytes (no remembered digest: the first run after a change), the
remembered digest (every later run: a stat and an 80-byte read), and the parse of the same file
(load_file, no cache). Prints the load average beside the figures.

usage: python benchmarks/bench_content_key.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from analyzers.io import content_key
from analyzers.io.load import load_file
from benchmarks.make_large_trace import tile

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "benchmarks" / "recordings" / "fsdp-dim2048" / "fsdp" / "zero3" / "rank0.json.gz"


def _times(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mb", type=float, default=56.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OVERLAPSCOPE_CACHE_DIR"] = str(Path(tmp) / "cache")
        big = Path(tmp) / "rank0.json"
        copies = 1
        while True:
            tile(SRC, big, copies)
            if big.stat().st_size >= args.mb * 1e6:
                break
            copies = max(copies + 1, int(copies * args.mb * 1e6 / big.stat().st_size) + 1)
        content_key.RACY_NS = 0  # remember at once (a real file is older than 2 s)
        hashed = _times(lambda: content_key._hash_file(big), args.repeat)
        content_key.file_digest(big)
        remembered = _times(lambda: content_key.file_digest(big), args.repeat)
        parsed = _times(lambda: load_file(big), max(2, args.repeat // 2))
        print(f"file: {big.stat().st_size / 1e6:.1f} MB ({copies} copies of {SRC.relative_to(ROOT)}); "
              f"load average {os.getloadavg()[0]:.2f}")
        for label, xs in (("sha256 of the bytes", hashed), ("remembered digest", remembered), ("parse", parsed)):
            print(f"{label:22s} median {statistics.median(xs) * 1e3:9.2f} ms  range {min(xs) * 1e3:.2f}-"
                  f"{max(xs) * 1e3:.2f} ms")
        print(f"hash / parse: {statistics.median(hashed) / statistics.median(parsed):.1%}")


if __name__ == "__main__":
    main()
