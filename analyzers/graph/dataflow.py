"""Data dependencies from the CPU op tree: which module's all-gather feeds which compute.

Recorded stream waits say which activity waited for which (deps.py), not which compute reads a
collective's output: in a front-loaded FSDP step every all-gather is waited for by a copy-out at the
front, and the blocks' compute follows those on the compute stream. PyTorch's FSDP2 names its work in
``record_function`` ranges that carry the module: ``FSDP::all_gather (blocks.3)`` launches the copy-in and
the all-gather of blocks.3, ``FSDP::all_gather_copy_out (blocks.3)`` its copy-out, and the module's own
compute is launched between the end of ``FSDP::pre_forward (blocks.3)`` and the start of
``FSDP::post_forward (blocks.3)`` (backward: from ``FSDP::pre_backward (M)`` to M's first
``FSDP::post_backward_*``). Each GPU activity gets the module and role of the range its launching call
sits in (same thread); the first compute of a module after its all-gather is that all-gather's consumer.
The root module's ranges name no module (``FSDP::all_gather``): its all-gather and copy-out get the module
``(root)``; its forward and backward windows, which hold every block's, give no role.

The ranges come from the host ops table: in a Kineto trace the profiler's ``record_function`` ranges, in an
Nsight Systems export its NVTX ranges (NVTX_EVENTS: the same names where the program pushes them, as
``torch.autograd.profiler.emit_nvtx`` does for every ``record_function``). Traces without these ranges (no
FSDP, an nsys export without NVTX) get no roles, and the moves fall back to the recorded waits; the note
says which source the roles came from (roles_note). An Execution Trace, where given, replaces these roles
for the all-gathers it ties to a consumer (graph.et_roles). Everything is vectorized over ranges and
activities; loops run over range kinds and modules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analyzers.timeline.constants import NO_TIME

NONE, GATHER, COPY_OUT, FORWARD, BACKWARD = 0, 1, 2, 3, 4
# an NVTX range of the same name may carry emit_nvtx's suffix (", seq = 3, op_id = 7")
_HOOK = re.compile(r"^FSDP::(all_gather|all_gather_copy_out|pre_forward|post_forward|pre_backward|"
                   r"post_backward_\w+)(?: \(([^()]+)\))?(?:, .*)?$")
ROOT = "(root)"  # FSDP2 names no module in the root module's ranges


def _hooks(ops: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """The FSDP hook ranges that name a module: columns hook, module, start, end, tid."""
    ids = ops["name_id"].to_numpy(np.int64)
    uniq = np.unique(ids)
    parsed = {i: _HOOK.match(str(names[i])) for i in uniq.tolist()}
    hit = {i: m for i, m in parsed.items() if m}
    if not hit:
        return pd.DataFrame({"hook": [], "module": [], "start": [], "end": [], "tid": []})
    sel = np.isin(ids, np.fromiter(hit, dtype=np.int64))
    rows = ops[sel]
    mids = rows["name_id"].to_numpy(np.int64).tolist()
    return pd.DataFrame({"hook": [hit[i].group(1) for i in mids], "module": [hit[i].group(2) or ROOT for i in mids],
                         "start": rows["start_ns"].to_numpy(np.int64), "end": rows["end_ns"].to_numpy(np.int64),
                         "tid": rows["tid"].to_numpy(np.int64)})


def _windows(h: pd.DataFrame, opens: str, closes: str, from_end: bool) -> pd.DataFrame:
    """Per module and thread: [open's end (or start), the first close after it's start)."""
    a = h[h["hook"] == opens]
    b = h[h["hook"].str.match(closes)]
    out = []
    for (mod, tid), g in a.groupby(["module", "tid"], sort=False):
        c = np.sort(b[(b["module"] == mod) & (b["tid"] == tid)]["start"].to_numpy(np.int64))
        lo = (g["end"] if from_end else g["start"]).to_numpy(np.int64)
        k = np.searchsorted(c, lo)
        ok = k < len(c)
        out.append(pd.DataFrame({"module": mod, "tid": tid, "start": lo[ok], "end": c[k[ok]]}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame({"module": [], "tid": [], "start": [], "end": []})


def _assign(role: np.ndarray, module: np.ndarray, code: int, win: pd.DataFrame, mods: dict[str, int],
            launch: np.ndarray, ltid: np.ndarray) -> None:
    """Rows whose launch sits in a window (and have no role yet) take its role and module."""
    for tid, g in win.groupby("tid", sort=False):
        g = g.sort_values("start")
        s, e = g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64)
        m = np.asarray([mods.setdefault(x, len(mods)) for x in g["module"]], dtype=np.int64)
        rows = np.flatnonzero((ltid == tid) & (launch != NO_TIME) & (role == NONE))
        k = np.searchsorted(s, launch[rows], side="right") - 1
        ok = (k >= 0) & (launch[rows] < e[np.maximum(k, 0)])
        role[rows[ok]] = code
        module[rows[ok]] = m[k[ok]]


def module_roles(ops: pd.DataFrame, names: Sequence[str], launch: np.ndarray,
                 ltid: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per GPU row: its role (NONE, GATHER, COPY_OUT, FORWARD, BACKWARD), its module (-1) and the module names.

    ops: the host_ops table; names: its name table as a list; launch / ltid: each row's launching call's start
    and thread (-1 unknown)."""
    n = len(launch)
    role, module = np.zeros(n, dtype=np.int8), np.full(n, -1, dtype=np.int64)
    if not len(ops) or not n:
        return role, module, []
    h = _hooks(ops, names)
    if h.empty:
        return role, module, []
    mods: dict[str, int] = {}
    for hook, code in (("all_gather_copy_out", COPY_OUT), ("all_gather", GATHER)):
        w = h[h["hook"] == hook][["module", "tid", "start", "end"]]
        _assign(role, module, code, w, mods, launch, ltid)
    # the root's forward and backward windows hold every block's: only its all-gather and copy-out are its own
    h = h[h["module"] != ROOT]
    _assign(role, module, FORWARD, _windows(h, "pre_forward", "post_forward$", True), mods, launch, ltid)
    _assign(role, module, BACKWARD, _windows(h, "pre_backward", "post_backward_", True), mods, launch, ltid)
    return role, module, list(mods)


def roles_note(rank: int, fmt: str, n_host_ops: int, modules: list[str]) -> str | None:
    """Which source the module roles came from, or why there are none where the format could have them."""
    if modules:
        src = "NVTX ranges (Nsight Systems)" if fmt == "nsys" else "record_function ranges (CPU op tree)"
        return f"rank {rank}: data dependencies: FSDP module roles of {len(modules)} modules from {src}"
    if fmt == "nsys" and not n_host_ops:
        return (f"rank {rank}: data dependencies: the export has no NVTX ranges, so no module roles; the moves "
                "read recorded stream waits only")
    return None
