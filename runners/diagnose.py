"""Naming the rank that failed or hung, from the files the ranks left and torchrun's log.

The earliest real error wins; a rank that only reports a peer's failure (PeerError) is never
blamed; a rank killed by a signal (no error file of its own) is named before the broken-pipe
errors it caused; on a timeout the rank with the least progress is named as hung.
"""

from __future__ import annotations

from pathlib import Path

from runners.results import read_json


def diagnose(out: Path, rc: int | None, timeout_s: float, log: Path) -> tuple[str, int | None]:
    """Name the rank that failed (earliest error file) or hung (least progress)."""
    errors = [e for p in sorted(out.glob("rank*.error.json")) if (e := read_json(p))]
    statuses = [s for p in sorted(out.glob("rank*.status.json")) if (s := read_json(p))]
    if rc is None:
        if errors:
            first = min(errors, key=lambda e: e["time"])
            return (f"run timed out after {timeout_s:.0f} s; rank {first['rank']} had failed in phase "
                    f"{first['phase']!r}: {first['type']}: {first['message']}", int(first["rank"]))
        if not statuses:
            return f"run timed out after {timeout_s:.0f} s before any rank started (see {log})", None
        least = min(s["progress"] for s in statuses)
        laggards = [s for s in statuses if s["progress"] == least]
        others = [s for s in statuses if s["progress"] != least]
        names = ", ".join(f"rank {s['rank']} (phase {s['phase']!r}{', ' + s['variant'] if s['variant'] else ''})"
                          for s in laggards)
        detail = "; ".join(f"rank {s['rank']} waiting in {s['phase']!r}" for s in others)
        rank = int(laggards[0]["rank"]) if len(laggards) == 1 else None
        return (f"run timed out after {timeout_s:.0f} s: {names} hung" + (f" ({detail})" if detail else ""),
                rank)
    text = log.read_text(errors="replace") if log.exists() else ""
    killed = killed_rank(text)
    if killed is not None and not any(int(e["rank"]) == killed[0] for e in errors):
        # a rank killed by a signal (OOM killer, node failure) leaves no error file; the others then fail
        # on broken connections, so their error files name a symptom, not the cause
        krank, signame = killed
        last = next((s for s in statuses if int(s["rank"]) == krank), None)
        where = f" after phase {last['phase']!r}" if last else ""
        msg = f"rank {krank} was killed by {signame}{where} (no error of its own: out of memory, or killed?)"
        if errors:
            msg += "; then " + ", ".join(f"rank {e['rank']} ({e['type']})" for e in errors)
        return msg, krank
    if errors:
        # a rank that only reports another rank's failure (PeerError) is never the culprit
        primary = [e for e in errors if e.get("type") != "PeerError"] or errors
        first = min(primary, key=lambda e: e["time"])
        later = [e for e in errors if e is not first]
        msg = (f"rank {first['rank']} failed in phase {first['phase']!r}"
               + (f" (variant {first['variant']})" if first.get("variant") else "")
               + f": {first['type']}: {first['message']}")
        if later:
            msg += "; then " + ", ".join(f"rank {e['rank']} ({e['type']})" for e in later)
        return msg, int(first["rank"])
    # no error file: a crash or a failure before the runner started
    rank = rank_from_torchrun_log(text)
    tail = "\n".join(text.strip().splitlines()[-15:])
    who = f"rank {rank}" if rank is not None else "a rank"
    return f"{who} exited with an error (torchrun exit code {rc}); last lines of {log}:\n{tail}", rank


def teardown_crash(out: Path, variants: list[str], nproc: int, log: Path) -> str | None:
    """A warning when the run failed only in process-group teardown, else None.

    That is: every rank reported phase 'finished' or 'exit' (its outputs written and every rank past
    the final barrier), no rank wrote an error file, and every variant's manifest is there. The
    measurements are complete; the crash (gloo throwing on a peer's closed socket) is named, not
    hidden: it goes into each manifest as launch_warning.
    """
    statuses = [s for p in sorted(out.glob("rank*.status.json")) if (s := read_json(p))]
    if (len(statuses) != nproc or any(s.get("phase") not in ("finished", "exit") for s in statuses)
            or any(out.glob("rank*.error.json"))):
        return None
    if not all(((out if len(variants) == 1 else out / v) / "manifest.json").is_file() for v in variants):
        return None
    killed = killed_rank(log.read_text(errors="replace") if log.exists() else "")
    who = f"rank {killed[0]} ended with {killed[1]}" if killed else "a rank exited with an error"
    return (f"{who} in process-group teardown, after every rank had finished and written its outputs; "
            "the measurements are complete")


def killed_rank(text: str) -> tuple[int, str] | None:
    """(rank, signal name) when torchrun's root cause is a rank that died of a signal (negative exit code)."""
    root = text.rfind("Root Cause")
    if root < 0:
        return None
    rank = rank_from_torchrun_log(text[root:])
    for line in text[root:].splitlines():
        stripped = line.strip()
        if stripped.startswith("exitcode") and ":" in stripped:
            value = stripped.split(":", 1)[1].split()[0]
            if rank is not None and value.lstrip("-").isdigit() and int(value) < 0:
                name = stripped[stripped.rfind("(") + 1:stripped.rfind(")")] if stripped.endswith(")") else ""
                return rank, name if name.startswith("SIG") else f"signal {-int(value)}"
            return None
    return None


def rank_from_torchrun_log(text: str) -> int | None:
    """torchrun's failure summary names the root-cause rank as 'rank : N (local_rank: M)'."""
    root = text.rfind("Root Cause")
    text = text[root:] if root >= 0 else text
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("rank") and "(local_rank:" in stripped and ":" in stripped:
            try:
                return int(stripped.split(":", 1)[1].split("(")[0].strip())
            except ValueError:
                continue
    return None
