"""What the graph answers: replay fidelity, the critical path of each step, what a fix would buy.

``whatif`` replays the set with fixes and compares steps; ``critical_path_section`` is the
``critical_path`` section of `analyze` (fidelity, per-step critical paths and their attribution,
per-rank attribution); ``finding_savings`` prices each finding by replaying its fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from analyzers.graph.attribution import charge, release_removals, removals_needed
from analyzers.graph.contention import contended_replay, estimate
from analyzers.graph.critical import ATTRIBUTION, drop_lists, mean_parts, walk
from analyzers.graph.fixes import FIX_OF_FINDING, Fix, ReplayInputs, apply_fixes
from analyzers.graph.moves import MOVES, moved_replay
from analyzers.graph.replay import Replay, loop_order
from analyzers.graph.residency import residency
from analyzers.graph.set_graph import SetGraph
from analyzers.graph.steps import job_steps, median_ns, rank_steps, step_records

FIDELITY_TARGET = 0.03  # median over steps of |replayed - measured| / measured
MAX_STEPS_LISTED = 50  # steps the JSON lists (the slowest; every step: analyze --tables critical_steps.parquet)


class GraphRun:
    """One set graph with its measured steps and its unmodified replay, reused by every question."""

    def __init__(self, sg: SetGraph) -> None:
        self.sg = sg
        self.order = loop_order(sg)
        self.unfixed = apply_fixes(sg, [])  # the inputs before contention moved any duration
        base = contended_replay(sg, self.unfixed, self.order)
        self.inputs, self.base = base.inputs, base.replay
        self.unsettled = not base.converged  # a contended replay stopped at its round limit
        self.measured = rank_steps(sg, sg.start, sg.end)
        self.replayed = rank_steps(sg, self.base.start, self.base.end)
        self.jobs = (_job(self.measured), _job(self.replayed))

    def run(self, fixes: list[Fix]) -> tuple[ReplayInputs, Replay]:
        if any(f.name in MOVES for f in fixes):  # a new graph: prefetch, coalesce (graph.moves)
            return moved_replay(self, fixes)
        kept = self.__dict__.get("_replays")  # while pricing: the replays made so far, by their fixes
        key = tuple(fixes)
        if kept is not None and key in kept:
            inp, rp, unsettled = kept[key]
            self.unsettled = self.unsettled or unsettled
            return inp, rp
        inp = apply_fixes(self.sg, fixes)
        if _same_inputs(inp, self.unfixed):  # the fix changes nothing in this graph: the replay is the base
            return self.inputs, self.base
        res = contended_replay(self.sg, inp, self.order)
        if not res.converged:
            self.unsettled = True
        if kept is not None:
            kept[key] = (res.inputs, res.replay, not res.converged)
        return res.inputs, res.replay

    def keep_replays(self, made: dict[tuple[Fix, ...], tuple[ReplayInputs, Replay, bool]] | None) -> None:
        """Start (a dict: replays made elsewhere, by their fixes) or stop (None) keeping each fix's replay, so
        that a fix that both prices a finding and removes a cause of the critical path is replayed once."""
        if made is None:
            self.__dict__.pop("_replays", None)
        else:
            self.__dict__.setdefault("_replays", {}).update(made)

    def notes(self) -> list[str]:
        out = list(self.sg.notes) + estimate(self.sg).notes + residency(self.sg).notes
        out += self.__dict__.get("move_notes", [])
        if self.unsettled:
            out.append("contention: a replay stopped at its round limit with durations still moving; its step "
                       "figures are those of the last round")
        if not any(g.has_steps for g in self.sg.graphs.values()):
            out.append("no step ranges (ProfilerStep#N or NVTX): each rank's whole recorded window is one step")
        if self.base.order_violations:
            out.append(f"{self.base.order_violations} collective ends were read before every rank had arrived "
                       "(clocks that disagree with the matched collectives); those used the rank's own start")
        return out


def _same_inputs(a: ReplayInputs, b: ReplayInputs) -> bool:
    return a.join == b.join and a.contention == b.contention and all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in (
            "dur", "off", "latency", "dep", "dep2", "sync_off", "sync_blocks", "sync_cost"))


def _job(df: pd.DataFrame) -> pd.DataFrame:
    return job_steps(df)


def _steps_table(run: GraphRun, predicted: pd.DataFrame | None) -> pd.DataFrame:
    """Per step: the job's measured, replayed (and predicted) step with its slowest rank."""
    named = [("measured", run.jobs[0]), ("replayed", run.jobs[1])]
    if predicted is not None:
        named.append(("predicted", _job(predicted)))
    if all(np.array_equal(j["step"].to_numpy(), named[0][1]["step"].to_numpy()) for _, j in named):
        # the same steps in the same order (they come from the graph, not from the times): side by side
        cols = {"step": named[0][1]["step"].to_numpy()}
        for name, j in named:
            cols[f"{name}_rank"], cols[f"{name}_ns"] = j["rank"].to_numpy(), j["dur_ns"].to_numpy()
        return pd.DataFrame(cols)
    t = named[0][1].rename(columns={"rank": "measured_rank", "dur_ns": "measured_ns"})
    for name, j in named[1:]:
        t = t.merge(j.rename(columns={"rank": f"{name}_rank", "dur_ns": f"{name}_ns"}), on="step", how="inner")
    return t


def fidelity(run: GraphRun) -> dict[str, Any]:
    t = _steps_table(run, None)
    err = (t["replayed_ns"] - t["measured_ns"]) / t["measured_ns"].where(t["measured_ns"] > 0)
    med = float(np.nanmedian(np.abs(err))) if len(err) and err.notna().any() else None
    return {"measured_step_ns": median_ns(t["measured_ns"]), "replayed_step_ns": median_ns(t["replayed_ns"]),
            "median_abs_error": med, "within_target": med is not None and med <= FIDELITY_TARGET,
            "target": FIDELITY_TARGET,
            "steps": [{"step": int(s), "measured_ns": int(m), "replayed_ns": int(r),
                       "error": float(e) if e == e else None}
                      for s, m, r, e in zip(t["step"], t["measured_ns"], t["replayed_ns"], err, strict=True)]}


def _predicted(run: GraphRun, fixes: list[Fix]) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Per rank and step, the steps table, and how many comm kernels SM residency held back."""
    inp, rp = run.run(fixes)
    pred = rank_steps(run.sg, rp.start, rp.end)
    return pred, _steps_table(run, pred), _held(inp)


def _held(inp: ReplayInputs) -> int:
    return int((inp.gate >= 0).sum()) if inp.gate is not None else 0


def _saving(t: pd.DataFrame) -> tuple[int | None, float | None]:
    replayed = median_ns(t["replayed_ns"])
    saving = median_ns(t["replayed_ns"] - t["predicted_ns"]) if len(t) else None
    return saving, (saving / replayed if saving is not None and replayed else None)


def whatif(run: GraphRun, fixes: list[Fix]) -> dict[str, Any]:
    """Measured, replayed and predicted step (medians over steps of the slowest rank), per step and rank."""
    pred, t, held = _predicted(run, fixes)
    notes = run.notes()
    if held > _held(run.inputs):
        notes.append(f"SM residency: {held} communication kernels wait for a compute kernel that holds every SM of "
                     "their GPU to retire (one of their blocks does not fit beside its blocks); without that they "
                     "would run under it")
    medians = [_rank_medians(df) for df in (run.measured, run.replayed, pred)]  # one pass each, not one a rank
    per_rank = [{"rank": r, "measured_step_ns": medians[0].get(r), "replayed_step_ns": medians[1].get(r),
                 "predicted_step_ns": medians[2].get(r)} for r in run.sg.ranks]
    saving, fraction = _saving(t)
    return {
        "fixes": [f.label for f in fixes],
        "measured_step_ns": median_ns(t["measured_ns"]), "replayed_step_ns": median_ns(t["replayed_ns"]),
        "predicted_step_ns": median_ns(t["predicted_ns"]), "saving_ns": saving, "saving_fraction": fraction,
        "fidelity": fidelity(run),
        "per_step": [{k: (int(v) if k != "step" else int(v)) for k, v in row.items()}
                     for row in t.to_dict("records")],
        "per_rank": per_rank,
        "notes": notes,
    }


def _rank_medians(steps: pd.DataFrame) -> dict[int, int]:
    """Per rank: median_ns of its steps' durations."""
    if steps.empty:
        return {}
    med = steps.groupby("rank")["dur_ns"].median()
    return {int(r): int(round(float(v))) for r, v in zip(med.index, med.to_numpy(np.float64), strict=True)}


def _walk(run: GraphRun, row: dict[str, Any]) -> dict[str, Any]:
    return walk(run.sg, run.base, run.inputs, int(row["rank"]), int(row["t0"]), int(row["t1"]),
                int(row["last_node"]), bool(row["ends_at_end"]))


def critical_path_section(run: GraphRun, before_charge: Callable[[set[str]], None] | None = None
                          ) -> dict[str, Any]:
    """The `critical_path` section of analyze: every step's critical path (``steps``; the JSON document keeps the
    slowest MAX_STEPS_LISTED of them, critical_path_document) and each rank's mean over its steps. Every step is
    walked first, then charged; before_charge(parts) is told which cause parts the charge will replay removed."""
    rep = run.replayed
    job = run.jobs[1]
    steps, per_rank, nodes = [], {}, {}
    walked: dict[tuple[int, int], dict[str, Any]] = {}
    rows = step_records(rep[["rank", "step", "t0", "t1", "dur_ns", "last_node", "ends_at_end"]])
    as_walked = {(row["rank"], row["step"]): _walk(run, row) for row in rows}
    if before_charge is not None:
        before_charge(removals_needed([(row, as_walked[(row["rank"], row["step"])]) for row in rows]))
    by_rank: dict[int, list[dict[str, Any]]] = {r: [] for r in run.sg.ranks}
    for row in rows:
        by_rank[row["rank"]].append(row)
    for r in run.sg.ranks:
        mine = by_rank[r]
        parts, crit = [], []
        for row in mine:
            res = charge(run, r, row, as_walked[(r, row["step"])])  # each cause charged as far as its removal saves
            walked[(r, row["step"])] = res
            parts.append(res["parts"])
            crit.append(res["nodes"])
        total = mean_parts(parts)
        step_ns = int(round(float(np.mean([row["dur_ns"] for row in mine])))) if mine else 0
        per_rank[str(r)] = {"mean_step_ns": step_ns, "parts": total,
                            "shares": {k: (v / step_ns if step_ns else None) for k, v in total.items()}}
        c = np.concatenate(crit) if crit else np.zeros(0, dtype=np.int64)
        nodes[str(r)] = np.unique(c[run.sg.rank_of[c] == r] - run.sg.base[r]) if len(c) else c
    release_removals(run)  # the attribution's replays are not kept past the walk
    drop_lists(run.sg, run.base, run.inputs)
    for row in step_records(job[["rank", "step", "dur_ns"]]):
        r, s = int(row["rank"]), int(row["step"])
        res = walked[(r, s)]
        steps.append({"step": s, "rank": r, "replayed_ns": int(row["dur_ns"]), "parts": res["parts"],
                      "peer_wait": res["peer_wait"], "n_activities": len(res["nodes"]),
                      "walked": res["walked"], "bounds": res["bounds"]})
    return {"fidelity": fidelity(run), "attribution": list(ATTRIBUTION), "steps": steps, "per_rank": per_rank,
            "critical_rows": nodes, "notes": run.notes()}


def critical_path_document(section: dict[str, Any] | None) -> dict[str, Any] | None:
    """The section as the JSON document keeps it, of a size that does not grow with ranks or steps: each rank's
    critical activities (GPU rows, an array each: thousands a rank) counted in `critical_rows_n`; of the steps,
    the MAX_STEPS_LISTED slowest (by replayed duration) and of the fidelity's steps the MAX_STEPS_LISTED worst
    (by |error|), each list in step order with its full count in `n_steps`. Every row and every step is in
    `analyze --tables` (critical_rows.parquet, critical_steps.parquet)."""
    if section is None:
        return None
    out = {k: v for k, v in section.items() if k != "critical_rows"}
    out["critical_rows_n"] = {r: len(v) for r, v in section.get("critical_rows", {}).items()}
    steps = section.get("steps", [])
    out["steps"] = _worst(steps, [-s["replayed_ns"] for s in steps])
    out["n_steps"] = len(steps)
    fid = section["fidelity"]
    err = [-abs(s["error"]) if s["error"] is not None else 0.0 for s in fid["steps"]]
    out["fidelity"] = {**fid, "steps": _worst(fid["steps"], err), "n_steps": len(fid["steps"])}
    return out


def _worst(items: list[dict[str, Any]], order_key: list[float]) -> list[dict[str, Any]]:
    """The MAX_STEPS_LISTED items lowest by order_key (the earlier step at ties), in their own order."""
    if len(items) <= MAX_STEPS_LISTED:
        return items
    keep = np.sort(np.argsort(np.asarray(order_key, dtype=np.float64), kind="stable")[:MAX_STEPS_LISTED])
    return [items[i] for i in keep.tolist()]


def critical_steps_table(section: dict[str, Any]) -> pd.DataFrame:
    """One row per step (its slowest rank): the replayed and measured step, the error of the replay, each part
    as charged (<part>_ns) and as walked (walked_<part>_ns), the activities on the path, the ns waited for
    late peers and how many parts the attribution recharged: what the JSON keeps of its slowest steps only."""
    steps = section.get("steps", [])
    measured = {s["step"]: s for s in section["fidelity"]["steps"]}
    cols: dict[str, list[Any]] = {
        "step": [s["step"] for s in steps], "rank": [s["rank"] for s in steps],
        "replayed_ns": [s["replayed_ns"] for s in steps],
        "measured_ns": [measured[s["step"]]["measured_ns"] if s["step"] in measured else None for s in steps],
        "error": [measured[s["step"]]["error"] if s["step"] in measured else None for s in steps]}
    for k in ATTRIBUTION:
        cols[f"{k}_ns"] = [s["parts"][k] for s in steps]
    for k in ATTRIBUTION:
        cols[f"walked_{k}_ns"] = [s["walked"][k] for s in steps]
    cols["n_activities"] = [s["n_activities"] for s in steps]
    cols["late_peer_ns"] = [sum(p["ns"] for p in s["peer_wait"]) for s in steps]
    cols["n_bounds"] = [len(s["bounds"]) for s in steps]
    return pd.DataFrame(cols).astype({"measured_ns": "Int64", "error": "float64"})


def finding_savings(run: GraphRun, finding_ids: list[str]) -> dict[str, dict[str, Any]]:
    """fix name -> whatif figures, for the fixes of these findings (each replayed once)."""
    out: dict[str, dict[str, Any]] = {}
    for fid in finding_ids:
        fix = FIX_OF_FINDING.get(fid)
        if fix and fix not in out:
            _, t, _ = _predicted(run, [Fix(fix)])
            saving, fraction = _saving(t)
            out[fix] = {"fix": fix, "saving_ns": saving, "saving_fraction": fraction,
                        "predicted_step_ns": median_ns(t["predicted_ns"])}
    return out
