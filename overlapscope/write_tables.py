"""`analyze --tables DIR`: the report's full detail as Parquet tables, one file per table.

The JSON document stays compact at any rank count (per-rank summaries, aggregated collective and
straggler figures); what grows with ranks x collectives or ranks x iterations is written here, in long
form (one row per rank and item), readable with pandas (`pd.read_parquet`) or DuckDB
(`SELECT * FROM 'DIR/collective_ranks.parquet'`):

  ranks.parquet             one row per rank: the whole-trace metrics and the iteration summary
  iterations.parquet        one row per (rank, iteration): the per-iteration metrics
  collectives.parquet       one row per matched collective: arrival, skew, late rank, waits
  collective_ranks.parquet  one row per (collective, rank): aligned start/end, wait, transfer, lateness, last
  stragglers.parquet        one row per rank: the straggler view (times last, lateness, what came before)
  syncs.parquet             one row per blocking host sync, with its rank
Tables a report does not have (one rank: no collectives) are not written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from analyzers.report import AnalysisReport


def report_tables(report: AnalysisReport) -> dict[str, pd.DataFrame]:
    """The report's tables by file stem (see the module docstring)."""
    import pandas as pd

    from analyzers.crossrank.report import collective_columns
    from analyzers.crossrank.stragglers import lateness

    out: dict[str, pd.DataFrame] = {}
    ranks = []
    for m in report.ranks:
        d = m.to_dict(iterations=False)
        row: dict[str, Any] = {k: v for k, v in d.items() if not isinstance(v, dict | list)}
        row.update({f"iterations_{k}": v for k, v in (m.iteration_summary or {}).items()
                    if not isinstance(v, dict | list)})
        ranks.append(row)
    out["ranks"] = pd.DataFrame(ranks)
    its = [m.iterations.assign(rank=m.rank) for m in report.ranks if len(m.iterations)]
    if its:
        out["iterations"] = _rank_first(pd.concat(its, ignore_index=True))
    cr = report.cross_rank
    if cr is not None and len(cr.collectives):
        out["collectives"] = cr.collectives[collective_columns(cr.collectives)].reset_index(drop=True)
        mem = cr.members.copy()
        lat = lateness(cr.collectives, cr.members)
        mem = mem.merge(lat[["coll_id", "rank", "lateness_ns", "last"]], on=["coll_id", "rank"], how="left")
        out["collective_ranks"] = mem
    if report.stragglers and report.stragglers.get("ranks"):
        out["stragglers"] = pd.DataFrame(report.stragglers["ranks"])
    syncs = [df.assign(rank=r) for r, df in report.syncs.items() if len(df)]
    if syncs:
        out["syncs"] = _rank_first(pd.concat(syncs, ignore_index=True))
    return out


def _rank_first(df: pd.DataFrame) -> pd.DataFrame:
    return df[["rank"] + [c for c in df.columns if c != "rank"]]


def write_tables(report: AnalysisReport, folder: Path) -> list[Path]:
    """Write report_tables(report) as DIR/<name>.parquet (the folder is made; files are replaced)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, df in report_tables(report).items():
        path = folder / f"{name}.parquet"
        _plain_columns(df).to_parquet(path, index=False)
        written.append(path)
    return written


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
