"""`analyze --tables DIR`: the report's full detail as Parquet tables, one file per table.

The JSON document stays compact at any rank count (per-rank summaries, aggregated collective and
straggler figures); what grows with ranks x collectives or ranks x iterations is written here, in long
form (one row per rank and item), readable with pandas (`pd.read_parquet`) or DuckDB
(`SELECT * FROM 'DIR/collective_ranks.parquet'`):

  ranks.parquet             one row per rank: the whole-trace metrics and the iteration summary
  iterations.parquet        one row per (rank, iteration): the per-iteration metrics
  streams.parquet           one row per (rank, stream): busy, comm and compute time (the JSON: up to 16 a rank)
  stream_pairs.parquet      one row per (rank, stream pair, a <= b): time both were busy (the JSON: the matrix
                            over up to 16 streams a rank)
  stream_roles.parquet      one row per (rank, stream): the stream role it was matched to across ranks (the JSON:
                            up to 16 a rank)
  collectives.parquet       one row per matched collective: arrival, skew, late rank, waits
  collective_ranks.parquet  one row per (collective, rank): aligned start/end, wait, transfer, lateness, last
  collective_activities.parquet  one row per communication activity and rank: bytes, wait, transfer, bandwidth
                            (the JSON: groups per operation and size, the first rows)
  collective_groups.parquet one row per (rank, operation, size bucket): medians of those activities (the JSON:
                            the groups over all ranks, the first of these)
  order_checks.parquet      one row per (rank pair, stream-role pair) whose kernel order was compared (the
                            JSON: the first of them and their count)
  stragglers.parquet        one row per rank: the straggler view (times last, lateness, what came before)
  syncs.parquet             one row per blocking host sync, with its rank (the JSON: totals, groups, the top syncs)
  findings.parquet          one row per finding, evidence as JSON text (the JSON: at most 32 of each kind)
  critical_rows.parquet     one row per (rank, GPU row) on that rank's replayed critical path (the JSON: counts)
  critical_steps.parquet    one row per step: its slowest rank's critical path, parts as charged and as walked,
                            the replay's error (the JSON: the slowest steps and the count n_steps)
Tables a report does not have (one rank: no collectives) are not written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from analyzers.report import AnalysisReport


# collective_ranks is built and written this many rows at a time: at 1024 ranks it is millions of rows,
# and a whole copy of it (merged with the lateness, made plain, converted to Arrow) would cost the caller
# several times the members it is made from.
CHUNK_ROWS = 65_536


def report_tables(report: AnalysisReport) -> dict[str, pd.DataFrame]:
    """The report's tables by file stem (see the module docstring), each as one DataFrame."""
    import pandas as pd

    return {name: parts[0] if len(parts := list(chunks)) == 1 else pd.concat(parts, ignore_index=True)
            for name, chunks in table_chunks(report).items()}


def table_chunks(report: AnalysisReport) -> dict[str, Iterator[pd.DataFrame]]:
    """The report's tables by file stem, each as its rows in order, one or more DataFrames at a time."""
    import pandas as pd

    out: dict[str, Iterator[pd.DataFrame]] = {}
    ranks = []
    for m in report.ranks:
        d = m.to_dict(iterations=False)
        row: dict[str, Any] = {k: v for k, v in d.items() if not isinstance(v, dict | list)}
        row.update({f"iterations_{k}": v for k, v in (m.iteration_summary or {}).items()
                    if not isinstance(v, dict | list)})
        ranks.append(row)
    out["ranks"] = iter([pd.DataFrame(ranks)])
    if any(len(m.streams) for m in report.ranks):
        out["streams"] = iter([_rank_first(pd.concat([m.streams.assign(rank=m.rank) for m in report.ranks],
                                                     ignore_index=True))])
        out["stream_pairs"] = iter([pd.concat([_pairs_long(m.rank, m.stream_pairs) for m in report.ranks],
                                              ignore_index=True)])
    its = [m.iterations.assign(rank=m.rank) for m in report.ranks if len(m.iterations)]
    if its:
        out["iterations"] = iter([_rank_first(pd.concat(its, ignore_index=True))])
    cr = report.cross_rank
    if cr is not None and len(cr.collectives):
        from analyzers.crossrank.report import collective_columns

        out["collectives"] = iter([cr.collectives[collective_columns(cr.collectives)].reset_index(drop=True)])
        out["collective_ranks"] = _collective_ranks(cr.collectives, cr.members)
        out["stream_roles"] = iter([pd.DataFrame([{"rank": r, **d} for r, v in cr.stream_roles.items() for d in v])])
        if checks := (cr.mismatch_summary or {}).get("order_checks"):
            out["order_checks"] = iter([pd.DataFrame(checks)])
    if report.collectives is not None and report.collectives.n_rows:
        out["collective_activities"] = report.collectives.row_chunks()
        out["collective_groups"] = iter([report.collectives.rank_groups])
    if report.stragglers and report.stragglers.get("ranks"):
        out["stragglers"] = iter([pd.DataFrame(report.stragglers["ranks"])])
    if any(len(df) for df in report.syncs.values()):
        out["syncs"] = _rank_syncs(report.syncs)
    if report.findings:
        out["findings"] = iter([pd.DataFrame([f.to_dict() for f in report.findings])])
    crit = (report.critical_path or {}).get("critical_rows") or {}
    if crit:
        import numpy as np

        out["critical_rows"] = iter([pd.DataFrame({
            "rank": np.repeat(np.asarray([int(r) for r in crit], dtype=np.int64), [len(v) for v in crit.values()]),
            "row": np.concatenate([np.asarray(v, dtype=np.int64) for v in crit.values()])})])
    if report.critical_path and report.critical_path.get("steps"):
        from analyzers.graph.analysis import critical_steps_table

        out["critical_steps"] = iter([critical_steps_table(report.critical_path)])
    return out


def _collective_ranks(colls: pd.DataFrame, members: pd.DataFrame) -> Iterator[pd.DataFrame]:
    """The members with each one's lateness and whether it came last, CHUNK_ROWS rows at a time. Members of a
    collective whose peers are unknown have none: then the whole column is float with NaN (and `last` objects),
    in every chunk alike, as one left merge of the whole table would make it."""
    import numpy as np

    from analyzers.crossrank.stragglers import lateness

    pos = np.searchsorted(colls["coll_id"].to_numpy(), members["coll_id"].to_numpy())
    all_known = bool((colls["peers_known"].to_numpy(dtype=bool) & (colls["n_ranks"].to_numpy() > 1))[pos].all())
    del pos
    for a in range(0, max(len(members), 1), CHUNK_ROWS):
        part = members.iloc[a:a + CHUNK_ROWS]
        lat = lateness(colls, part)
        part = part.merge(lat[["coll_id", "rank", "lateness_ns", "last"]], on=["coll_id", "rank"], how="left")
        if not all_known:
            part = part.astype({"lateness_ns": "float64", "last": object})
        yield part


def _pairs_long(rank: int, matrix: pd.DataFrame) -> pd.DataFrame:
    """A rank's stream-pair matrix as rows (rank, stream_a, stream_b, overlap_ns), a <= b."""
    import numpy as np
    import pandas as pd

    a, b = np.triu_indices(len(matrix))
    labels = np.asarray(matrix.index, dtype=np.int64)
    return pd.DataFrame({"rank": np.full(len(a), rank, dtype=np.int64), "stream_a": labels[a],
                         "stream_b": labels[b], "overlap_ns": matrix.to_numpy(dtype=np.int64)[a, b]})


def _rank_syncs(syncs: Mapping[int, pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Every rank's blocking syncs with its rank, one rank at a time (at 1024 ranks of thousands of syncs
    each, all of them at once would cost the caller a GB; each rank's frame is unpacked in its turn)."""
    for r, df in syncs.items():
        if len(df):
            yield _rank_first(df.assign(rank=r)).reset_index(drop=True)


def _rank_first(df: pd.DataFrame) -> pd.DataFrame:
    return df[["rank"] + [c for c in df.columns if c != "rank"]]


def write_tables(report: AnalysisReport, folder: Path) -> list[Path]:
    """Write the report's tables as DIR/<name>.parquet (the folder is made; files are replaced), each
    chunk appended to its file as it is made (one row group or more per chunk)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, chunks in table_chunks(report).items():
        path = folder / f"{name}.parquet"
        writer = None
        try:
            for df in chunks:
                table = pa.Table.from_pandas(_plain_columns(df), preserve_index=False,
                                             schema=writer.schema if writer else None)
                if writer is None:
                    table = table.cast(_typed_last(table.schema))
                    writer = pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        written.append(path)
    return written


def _typed_last(schema: Any) -> Any:
    """collective_ranks' `last`, all missing in a first chunk of collectives whose peers are unknown, typed
    bool as the column is, so that later chunks with values fit the same file."""
    import pyarrow as pa

    return pa.schema([f.with_type(pa.bool_()) if f.name == "last" and f.type == pa.null() else f for f in schema],
                     metadata=schema.metadata)


def _plain_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding dicts or lists (e.g. evidence) as JSON text: Parquet needs one type per column."""
    import json

    import pandas as pd

    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object and out[c].map(lambda v: isinstance(v, dict | list)).any():
            out[c] = out[c].map(lambda v: json.dumps(v, default=str) if isinstance(v, dict | list) else v)
        if isinstance(out[c].dtype, pd.CategoricalDtype):
            out[c] = out[c].astype(str)
    return out
