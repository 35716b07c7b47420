"""What a finished run hands back: its manifest, traces and timings (median ± spread per kind).

Read from the files the ranks wrote (manifest.json); the exceptions a launch raises live
here too, so that every module of the launcher can raise them without importing the launcher.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class OutputExists(FileExistsError):
    """The output folder already holds a run: a new one would overwrite or mix with it."""

    def __init__(self, out: Path, found: list[Path]) -> None:
        self.out = out
        self.found = found
        shown = ", ".join(p.relative_to(out).as_posix() for p in found[:3]) + (", ..." if len(found) > 3 else "")
        super().__init__(f"{out} already holds a run ({shown}); choose another folder or pass --overwrite")


class RunFailed(RuntimeError):
    """A run did not complete; the message names the failing (or hanging) rank. Outputs are kept."""

    def __init__(self, message: str, *, rank: int | None, out_dir: Path, log: Path | None) -> None:
        super().__init__(message)
        self.rank = rank
        self.out_dir = out_dir
        self.log = log


@dataclass
class Timings:
    """Medians in ms; each is the slowest rank's median (a step waits for the slowest rank).

    The *_spread_ms fields say how far that median moved within the run: half the range of
    the medians of its timing chunks (the harness times each kind in chunks of a few
    iterations, alternating with the other kinds, so each chunk is a repeat taken at
    another moment and temperature). NaN where the manifest holds no samples.
    """

    variant_ms: float
    compute_ms: float
    comm_ms: float
    baseline_ms: float
    variant_spread_ms: float = float("nan")
    compute_spread_ms: float = float("nan")
    comm_spread_ms: float = float("nan")
    baseline_spread_ms: float = float("nan")


DEFAULT_TIMING_CHUNK = 5  # runners/timing.py TIMING_CHUNK, for manifests that do not record it


def chunk_spread_ms(samples: Sequence[float], chunk: int) -> float:
    """Half the range of the medians of consecutive chunks of `chunk` samples (NaN if < 2 chunks)."""
    medians = [statistics.median(samples[i:i + chunk]) for i in range(0, len(samples), chunk)
               if len(samples[i:i + chunk]) == chunk]
    return (max(medians) - min(medians)) / 2 if len(medians) >= 2 else float("nan")


def spread(manifest: dict[str, Any], kind: str) -> float:
    """Spread of the reported median of `kind`: that of the slowest rank, the one reported."""
    ranks = [r for r in manifest.get("ranks", []) if kind in r.get("timings_ms", {})]
    if not ranks:
        return float("nan")
    slowest = max(ranks, key=lambda r: r["timings_ms"][kind]["median"])
    samples = slowest["timings_ms"][kind].get("samples") or []
    return chunk_spread_ms(samples, int(manifest.get("timing_chunk", DEFAULT_TIMING_CHUNK)))


@dataclass
class RunResult:
    """One variant's finished run: its folder, manifest, traces per rank and timings."""

    algo: str
    variant: str
    out_dir: Path
    manifest: dict[str, Any]
    traces: dict[int, Path]
    timings: Timings
    log: Path | None = None
    wall_s: float = 0.0
    command: list[str] = field(default_factory=list)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_result(algo: str, variant: str, out_dir: Path, log: Path | None, wall: float,
            cmd: list[str], extra: dict[str, Any]) -> RunResult:
    manifest_path = out_dir / "manifest.json"
    manifest = read_json(manifest_path)
    if manifest is None:
        raise RunFailed(f"{algo} {variant}: run ended without {manifest_path}", rank=0, out_dir=out_dir, log=log)
    manifest.setdefault("launch", {}).update({"command": cmd, "wall_s": round(wall, 2), **extra})
    traces: dict[int, Path] = {}
    for rank, name in manifest.get("traces", {}).items():
        traces[int(rank)] = out_dir / name
    manifest_path.write_text(json.dumps(manifest, indent=1, default=str))
    t = manifest["timings_ms"]
    timings = Timings(variant_ms=t["variant_ms"], compute_ms=t["compute_alone_ms"], comm_ms=t["comm_alone_ms"],
                      baseline_ms=t["baseline_ms"], variant_spread_ms=spread(manifest, "variant"),
                      compute_spread_ms=spread(manifest, "compute_alone"),
                      comm_spread_ms=spread(manifest, "comm_alone"), baseline_spread_ms=spread(manifest, "baseline"))
    return RunResult(algo=algo, variant=variant, out_dir=out_dir, manifest=manifest, traces=traces,
                     timings=timings, log=log, wall_s=wall, command=cmd)


def format_table(results: dict[str, RunResult]) -> str:
    """The plain-text table `python -m runners.launch` prints (no rich on GPU hosts)."""
    rows = [("variant", "time_ms", "±", "baseline_ms", "compute_ms", "±", "comm_ms", "max_rel_err")]
    for v, r in results.items():
        err = max(x["rel_error"] for x in r.manifest["ranks"])
        t = r.timings
        rows.append((v, f"{t.variant_ms:.3f}", f"{t.variant_spread_ms:.3f}", f"{t.baseline_ms:.3f}",
                     f"{t.compute_ms:.3f}", f"{t.compute_spread_ms:.3f}", f"{t.comm_ms:.3f}", f"{err:.2g}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


def grid_markdown(rows: list[dict[str, Any]], gpu: str) -> str:
    """The table benchmarks/RESULTS.md shows (times in ms, median ± spread of the slowest rank)."""
    head = ("| algo | M | K | N | steps | dtype | GEMM alone | comm alone | baseline | fused-ref | tuned | "
            "tuned / min(base, fused) | tuned / GEMM | schedule chosen | search s | ok |")
    lines = [f"GPUs: {gpu}", "", head, "|" + "---|" * 16]
    for r in rows:
        def pm(k: str, row: dict[str, Any] = r) -> str:
            return f"{row[k + '_ms']:.3f} ±{row[k + '_spread_ms']:.3f}"
        lines.append(f"| {r['algo']} | {r['M']} | {r['K']} | {r['N']} | {r['steps']} | {r['dtype']} | {pm('gemm')} | "
                     f"{pm('comm')} | {pm('baseline')} | {pm('fused-ref')} | {pm('tuned')} | "
                     f"{r['tuned_vs_best_ref']:.3f} | {r['tuned_vs_gemm']:.3f}"
                     f"{'' if r['comm_below_gemm'] else ' (comm ≥ GEMM)'} | "
                     f"{r['schedule']} | {r['search_s'] if r['search_s'] is not None else 'cache'} | "
                     f"{'yes' if r['pass'] else 'NO'} |")
    return "\n".join(lines) + "\n"
