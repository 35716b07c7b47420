"""File-level facts of an export (versions, processes, devices, environment) and which process is which rank."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyzers.io.nsys_schema import (
    GPU_INFO_TABLES,
    META_EXPORT_TABLES,
    PID_SQL,
    SYSTEM_ENV_TABLE,
    T_CAPTURE,
    T_PROCESSES,
    _Export,
    quote,
)
from analyzers.timeline.sm_resources import device_limits

# Process environment variables that carry the global rank / world size, most specific first.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PALS_RANKID", "LOCAL_RANK")
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
ENV_ASSIGNMENT = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"?(.*?)"?\s*$')
# --------------------------------------------------------------------------------------------
# File-level facts: versions, processes, devices, environment, NCCL payloads
# --------------------------------------------------------------------------------------------

def _key_values(ex: _Export, table: str, where: str = "") -> list[tuple[str, str]]:
    cols = ex.columns(table)
    if "name" not in cols or "value" not in cols:
        return []
    df = ex.query(f"SELECT name, value FROM {quote(table)}{where}")
    return [(str(n), "" if v is None else str(v)) for n, v in zip(df["name"], df["value"], strict=True)]


def _export_meta(ex: _Export) -> dict[str, Any]:
    table = next((t for t in META_EXPORT_TABLES if ex.has(t)), None)
    kv = dict(_key_values(ex, table)) if table else {}
    meta: dict[str, Any] = {
        "nsys_version": kv.get("EXPORT_PRODUCT_VERSION"),
        "export_schema_version": kv.get("EXPORT_SCHEMA_VERSION"),
    }
    if ex.has("TARGET_INFO_SESSION_START_TIME") and "utcEpochNs" in ex.columns("TARGET_INFO_SESSION_START_TIME"):
        df = ex.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        if len(df) and pd.notna(df.iloc[0, 0]):
            meta["session_start_utc_ns"] = int(df.iloc[0, 0])
    return meta


def _hostname(ex: _Export) -> str:
    if not ex.has(SYSTEM_ENV_TABLE):
        return ""
    kv = _key_values(ex, SYSTEM_ENV_TABLE, " WHERE name = 'Hostname'")
    return kv[0][1] if kv else ""


def _process_names(ex: _Export) -> dict[int, str]:
    if not ex.has(T_PROCESSES) or "globalPid" not in ex.columns(T_PROCESSES):
        return {}
    name = "name" if "name" in ex.columns(T_PROCESSES) else "''"
    df = ex.query(f"SELECT {PID_SQL.format(col='globalPid')} AS pid, {name} AS name FROM {quote(T_PROCESSES)}")
    return {int(p): str(n or "") for p, n in zip(df["pid"], df["name"], strict=True)}


def _devices(ex: _Export) -> dict[int, str]:
    for table in GPU_INFO_TABLES:
        if not ex.has(table):
            continue
        id_col = ex.first_column(table, "cuDevice", "cudaId", "id", "deviceId")
        if id_col is None or "name" not in ex.columns(table):
            continue
        df = ex.query(f'SELECT {quote(id_col)} AS id, name FROM {quote(table)}')
        return {int(i): str(n) for i, n in zip(df["id"], df["name"], strict=True) if pd.notna(i)}
    return {}


def sm_limits(ex: _Export) -> dict[str, dict[str, int]]:
    """device id (as a string: meta travels as JSON) -> per-SM limits (timeline.sm_resources), where
    the export's GPU table has them."""
    table = GPU_INFO_TABLES[0]
    cols = ("smCount", "maxRegistersPerSm", "maxShmemPerSm", "maxWarpsPerSm", "threadsPerWarp", "maxBlocksPerSm")
    if not ex.has(table) or not set(cols) <= set(ex.columns(table)):
        return {}
    id_col = ex.first_column(table, "cuDevice", "cudaId", "id", "deviceId")
    if id_col is None:
        return {}
    df = ex.query(f"SELECT {quote(id_col)} AS id, {', '.join(quote(c) for c in cols)} FROM {quote(table)}")
    out = {}
    for row in df.itertuples(index=False):
        threads = row.maxWarpsPerSm * row.threadsPerWarp if pd.notna(row.maxWarpsPerSm) and pd.notna(
            row.threadsPerWarp) else None
        lim = device_limits(row.smCount, row.maxRegistersPerSm, row.maxShmemPerSm, threads, row.maxBlocksPerSm)
        if lim and pd.notna(row.id):
            out[str(int(row.id))] = lim
    return out


def _parse_env(assignments: list[str]) -> dict[str, str]:
    """Only the rank / world-size variables: the rest of the environment is private."""
    wanted = set(RANK_VARS) | set(WORLD_VARS)
    out: dict[str, str] = {}
    for a in assignments:
        m = ENV_ASSIGNMENT.match(a)
        if m and m.group(1) in wanted:
            out[m.group(1)] = m.group(2)
    return out


def _launch_env(ex: _Export) -> dict[str, str] | None:
    """Rank variables of the process nsys launched (META_DATA_CAPTURE), None if they disagree."""
    if not ex.has(T_CAPTURE):
        return {}
    rows = _key_values(ex, T_CAPTURE, " WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'")
    per_process: dict[str, list[str]] = {}
    for name, value in rows:
        per_process.setdefault(name.split(":", 1)[0], []).append(value)
    envs = [_parse_env(v) for v in per_process.values()]
    envs = [e for e in envs if e]
    if not envs:
        return {}
    return envs[0] if all(e == envs[0] for e in envs) else None


def _process_env_tables(ex: _Export) -> dict[int, dict[str, str]]:
    """Per-process environment, from any exported table of (process, name, value) rows."""
    out: dict[int, dict[str, str]] = {}
    for table in sorted(ex.tables):
        if "ENV" not in table.upper() or table == SYSTEM_ENV_TABLE:
            continue
        pid_col = ex.first_column(table, "globalPid", "globalTid")
        name_col = ex.first_column(table, "name", "nameId")
        value_col = ex.first_column(table, "value", "valueId")
        if not (pid_col and name_col and value_col):
            continue
        df = ex.query(f'SELECT {PID_SQL.format(col=quote(pid_col))} AS pid, {quote(name_col)} AS name, '
                      f'{quote(value_col)} AS value FROM {quote(table)}')
        names, values = ex.text_column(df["name"]), ex.text_column(df["value"])
        keep = np.isin(names, list(RANK_VARS + WORLD_VARS))
        for p, n, v in zip(df["pid"].to_numpy()[keep], names[keep], values[keep], strict=True):
            out.setdefault(int(p), {})[str(n)] = str(v).strip('"')
    return out


def _nccl_payload_ranks(calls: pd.DataFrame | None) -> dict[int, tuple[int, int]]:
    """pid -> (rank, nranks) of its largest NCCL communicator, from the set-up calls' NVTX payloads
    (analyzers.io.nsys_nccl.NcclCalls.calls); a process with two ranks in communicators of that size has none."""
    if calls is None or calls.empty:
        return {}
    best: dict[int, tuple[int, int] | None] = {}
    setup = calls[(calls["rank"] >= 0) & (calls["nranks"] > 0)]
    for p, rank, n in zip(setup["pid"], setup["rank"], setup["nranks"], strict=True):  # a few per process
        cand = (int(rank), int(n))
        prev = best.get(int(p), (-1, 0))
        if prev is None or cand[1] < prev[1]:
            continue
        best[int(p)] = None if (cand[1] == prev[1] and cand[0] != prev[0]) else cand
    return {p: v for p, v in best.items() if v is not None}


@dataclass
class _RankInfo:
    rank: int
    world_size: int | None
    source: str


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(str(text).strip()) if text is not None else None
    except ValueError:
        return None


def _from_env(env: dict[str, str]) -> tuple[int, int | None, str] | None:
    for var in RANK_VARS:
        rank = _int_or_none(env.get(var))
        if rank is not None:
            world = next((w for v in WORLD_VARS if (w := _int_or_none(env.get(v))) is not None), None)
            return rank, world, f"environment {var}"
    return None


def _assign_ranks(ex: _Export, pids: list[int], nccl_calls: pd.DataFrame | None = None) -> dict[int, _RankInfo]:
    """Rank per process: its environment, else NCCL NVTX payloads (nccl_calls), else process (pid) order."""
    per_proc = _process_env_tables(ex)
    found = {p: _from_env(per_proc.get(p, {})) for p in pids}
    if all(found.values()) and len({f[0] for f in found.values()}) == len(pids):  # type: ignore[index]
        return {p: _RankInfo(f[0], f[1], f[2]) for p, f in found.items() if f}
    if len(pids) == 1:
        launched = _launch_env(ex)
        env = _from_env(launched) if launched else None
        if env is not None:
            return {pids[0]: _RankInfo(env[0], env[1], env[2])}
    nccl = _nccl_payload_ranks(nccl_calls)
    if all(p in nccl for p in pids) and len({nccl[p][0] for p in pids}) == len(pids):
        world = max(nccl[p][1] for p in pids)
        return {p: _RankInfo(nccl[p][0], world, "NCCL NVTX payload") for p in pids}
    if len(pids) == 1:
        return {pids[0]: _RankInfo(0, None, "default")}
    return {p: _RankInfo(i, len(pids), "process order") for i, p in enumerate(pids)}
