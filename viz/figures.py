"""Plotly figure builders: plain functions from analysis results to go.Figure.

No streamlit here, so the same figures work in a notebook:

    from analyzers.io.load import load_traces
    from viz.timeline import prepare_timeline, lod_for_windows
    from viz.figures import timeline_figure
    data = prepare_timeline(load_traces(["run_dir"]))
    fig = timeline_figure(lod_for_windows([data], [(data.t_min, data.t_min, data.t_max)]))

Timelines are WebGL (Scattergl) line segments, one trace per (lane, colour), with x as
float32 milliseconds from each variant's origin: typed arrays keep the payload small and
float32 keeps sub-pixel precision for any zoom of the window that was sent.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyzers.report import AnalysisReport

from .hover import hover_traces
from .iterations_figure import iteration_figure  # noqa: F401 - the figures' one import place
from .mix import mix_polygons, needs_mix, pixel_mix
from .safe_text import plotly_text
from .sync_markers import sync_traces
from .timeline import CODE, CODES, N_CODES, LaneSegments

COLORS: dict[str, str] = {
    "compute": "#1f77b4",
    "comm": "#ff7f0e",
    "copy": "#9467bd",
    "memset": "#8c564b",
    "other": "#b0b0b0",
    "overlap": "#2ca02c",
    "exposed_comm": "#d62728",
    "host_sync": "#e377c2",
    "harmless_sync": "#c7c7c7",
    "idle": "#e8e8e8",
}
LABELS: dict[str, str] = {
    "compute": "compute",
    "comm": "communication",
    "copy": "copy",
    "memset": "memset",
    "other": "other",
    "overlap": "overlap (comm ∩ compute)",
    "exposed_comm": "exposed communication",
    "host_sync": "blocking host sync (GPU idled)",
    "harmless_sync": "host sync, no GPU idle (harmless)",
}
TEMPLATE = "plotly_white"
NAME_CHARS = 90  # kernel names are long C++ templates; hover shows their head


def _ms(ns: np.ndarray | int | float) -> np.ndarray | float:
    return np.asarray(ns, dtype=np.float64) / 1e6


# --------------------------------------------------------------------------- overview


def overview_bars(reports: Sequence[tuple[str, AnalysisReport]]) -> go.Figure:
    """Per rank (and variant), the span split into compute only / overlapped / exposed comm /
    other busy / idle, in ms: the parts add up to the span, so bar lengths compare directly."""
    rows = []
    for label, rep in reports:
        for m in rep.ranks:
            w = m.whole
            other = w.busy_ns - (w.comm_ns + w.compute_ns - w.overlap_ns)
            rows.append({"y": f"{label} · rank {m.rank}" if len(reports) > 1 else f"rank {m.rank}",
                         "compute only": w.compute_ns - w.overlap_ns, "overlapped": w.overlap_ns,
                         "exposed communication": w.exposed_comm_ns, "other busy": max(other, 0),
                         "idle": w.idle_ns, "ratio": w.overlap_ratio})
    df = pd.DataFrame(rows)
    fig = go.Figure()
    parts = (("compute only", COLORS["compute"]), ("overlapped", COLORS["overlap"]),
             ("exposed communication", COLORS["exposed_comm"]), ("other busy", COLORS["other"]),
             ("idle", COLORS["idle"]))
    for name, color in parts:
        if df.empty:
            break
        fig.add_trace(go.Bar(
            y=df["y"].map(plotly_text), x=_ms(df[name].to_numpy()), name=name, orientation="h", marker_color=color,
            hovertemplate="%{y}<br>" + name + ": %{x:.3f} ms<extra></extra>",
        ))
    fig.update_layout(
        barmode="stack", template=TEMPLATE, height=120 + 34 * max(1, len(df)),
        xaxis_title="time (ms)", yaxis=dict(autorange="reversed"),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
        margin=dict(l=10, r=10, t=40, b=40),
    )
    return fig


# --------------------------------------------------------------------------- timeline


def _interleave(a: np.ndarray, b: np.ndarray, fill: float) -> np.ndarray:
    """[a0, b0, fill, a1, b1, fill, ...]: the point layout of separated line segments."""
    out = np.empty((a.size, 3), dtype=np.float32)
    out[:, 0], out[:, 1], out[:, 2] = a, b, fill
    return out.ravel()


def mix_traces(v: LaneSegments, width_px: int, top: int, legend_done: set[str]) -> list[go.Scattergl]:
    """The window as per-pixel category shares (viz/mix.py): one filled trace per colour."""
    d = v.data
    mix = pixel_mix(d.starts, d.ends, d.groups, v.lo_ns, v.hi_ns, width_px)
    poly = mix_polygons(mix, N_CODES, top, [CODE[c] for c in MIX_ORDER])
    out = []
    for code in sorted(poly.x, key=lambda c: MIX_ORDER.index(CODES[c]) if CODES[c] in MIX_ORDER else -1):
        name = CODES[code]
        out.append(go.Scattergl(
            x=_ms(poly.x[code] - v.origin_ns).astype(np.float32), y=poly.y[code].astype(np.float32),
            mode="lines", fill="toself", fillcolor=COLORS[name], line=dict(width=0, color=COLORS[name]),
            hoverinfo="skip", name=LABELS[name], legendgroup=name, showlegend=name not in legend_done))
        legend_done.add(name)
    return out


# Bottom to top within a lane's sub-lanes (communication on top, as segments are drawn).
MIX_ORDER = ("other", "memset", "copy", "compute", "comm", "exposed_comm", "overlap", "harmless_sync", "host_sync")


def timeline_figure(
    variants: Sequence[LaneSegments],
    *,
    width_px: int = 1600,
    lane_px: int = 22,
    max_sync_markers: int = 5_000,
    show_steps: bool = True,
    title: str | None = None,
) -> go.Figure:
    """Ranks x streams lanes for one or more variants in ONE figure with a shared x axis.

    Each variant is a row of subplots sharing x, so zooming one zooms all. x is ms from the
    variant's origin (its step start), which aligns variants at the iteration start.
    The drawn segments take no hover: an invisible heatmap row per lane (viz/hover.py) names the activity
    under the mouse anywhere on it, at the server's zoom and at any zoom the browser makes on its own.
    """
    n = max(1, len(variants))
    lane_counts = [max(1, len(v.data.lanes)) for v in variants] or [1]
    gap_px = 60
    height = int(sum(lane_counts) * lane_px + n * gap_px + 90)
    spacing = min(0.25, gap_px / max(height, 1))
    fig = make_subplots(
        rows=n, cols=1, shared_xaxes=True, vertical_spacing=spacing if n > 1 else 0.0,
        row_heights=[c / sum(lane_counts) for c in lane_counts],
        subplot_titles=[plotly_text(v.data.label) for v in variants] if variants else None,
    )
    widest = max((v.hi_ns - v.lo_ns for v in variants), default=1)
    min_width_ms = float(_ms(widest / max(1, width_px)))  # draw at least one pixel
    legend_done: set[str] = set()
    shapes: list[dict] = []
    annotations: list[dict] = []
    line_width = max(2.0, lane_px * 0.72)

    for row, v in enumerate(variants, start=1):
        seg, data = v.segments, v.data
        lanes = data.lanes
        # Lane 0 on top. y counts upward (top - lane): a reversed axis mis-draws Scattergl in
        # the plotly.js that Streamlit bundles (every line lands on the bottom edge).
        top = len(lanes) - 1
        if needs_mix(seg, max(1, int(widest / max(1, width_px)))):
            for trace in mix_traces(v, width_px, top, legend_done):
                fig.add_trace(trace, row=row, col=1)
        elif len(seg):
            cuts = np.flatnonzero(np.diff(seg.group)) + 1
            bounds = np.r_[0, cuts, len(seg)]
            # Draw order: other, memset, copy, compute, comm (communication on top), then bands.
            order = np.argsort(seg.group[bounds[:-1]] % N_CODES, kind="stable")
            for k in order:
                a, b = int(bounds[k]), int(bounds[k + 1])
                g = int(seg.group[a])
                lane, code = g // N_CODES, CODES[g % N_CODES]
                x0 = _ms(seg.start[a:b] - v.origin_ns)
                x1 = np.maximum(_ms(seg.end[a:b] - v.origin_ns), x0 + min_width_ms)
                show = code not in legend_done
                legend_done.add(code)
                fig.add_trace(go.Scattergl(
                    x=_interleave(x0, x1, np.nan), y=np.full(3 * (b - a), top - lane, dtype=np.int16),
                    mode="lines",
                    line=dict(color=COLORS[code], width=line_width * (0.3 if code == "harmless_sync" else 1.0)),
                    hoverinfo="skip", name=LABELS[code], legendgroup=code, showlegend=show,
                ), row=row, col=1)
        for hover in hover_traces(v, width_px, top):  # a tooltip anywhere on an activity, at every zoom
            fig.add_trace(hover, row=row, col=1)
        # host sync markers: where the host blocked, with what it cost (harmless ones apart)
        sy = data.syncs
        if len(sy):
            inside = sy[(sy["end_ns"] > v.lo_ns) & (sy["start_ns"] < v.hi_ns)]
            if len(inside) > max_sync_markers:
                inside = inside.nlargest(max_sync_markers, ["gpu_idle_ns", "blocked_ns"])
            if len(inside):
                lane_of = dict(zip(lanes.loc[lanes["kind"] == "sync", "rank"],
                                   lanes.loc[lanes["kind"] == "sync", "lane"], strict=True))
                y = top - inside["rank"].map(lane_of).to_numpy(dtype=np.float32)
                for trace in sync_traces(inside, y, v.origin_ns, v.lo_ns, v.hi_ns, width_px, lane_px, legend_done):
                    fig.add_trace(trace, row=row, col=1)
        yname = "yaxis" if row == 1 else f"yaxis{row}"
        fig.layout[yname].update(
            tickvals=(top - lanes["lane"]).tolist(), ticktext=[plotly_text(x) for x in lanes["label"]],
            range=[-0.5, len(lanes) - 0.5], fixedrange=True, showgrid=False, zeroline=False,
        )
        if show_steps and not data.steps.empty:
            sh, an = _step_lines(data, v, row)
            shapes += sh
            annotations += an

    if shapes:  # all at once: plotly validates each add_shape call against the whole layout
        fig.layout.shapes = tuple(fig.layout.shapes) + tuple(shapes)
        fig.layout.annotations = tuple(fig.layout.annotations) + tuple(annotations)
    x_lo = min((_ms(v.lo_ns - v.origin_ns) for v in variants), default=0.0)
    x_hi = max((_ms(v.hi_ns - v.origin_ns) for v in variants), default=1.0)
    fig.update_xaxes(range=[x_lo, x_hi], showgrid=True, zeroline=False)
    fig.update_xaxes(title_text="time from step start (ms)", row=n, col=1)
    fig.update_layout(
        template=TEMPLATE, height=height, hovermode="closest", dragmode="zoom", showlegend=True,
        margin=dict(l=10, r=10, t=70 if title else 50, b=50), title=title,
        legend=dict(orientation="h", yref="container", y=1.0, yanchor="top", x=0.0, xanchor="left"),
    )
    return fig


def _step_lines(data, v: LaneSegments, row: int, limit: int = 60) -> tuple[list[dict], list[dict]]:
    """Dotted lines (and labels) at each step start inside the window, as layout dicts.

    Only up to `limit` steps: more would be clutter, and plotly validates shapes one by one.
    """
    st = data.steps
    st = st[(st["start_ns"] >= v.lo_ns) & (st["start_ns"] < v.hi_ns)]
    if st.empty or len(st) > limit:
        return [], []
    xref = "x" if row == 1 else f"x{row}"
    yref = "y domain" if row == 1 else f"y{row} domain"
    xs = _ms(st["start_ns"].to_numpy() - v.origin_ns)
    shapes = [dict(type="line", x0=float(x), x1=float(x), y0=0, y1=1, xref=xref, yref=yref,
                   line=dict(color="#555", width=1, dash="dot")) for x in xs]
    labels = [dict(x=float(x), y=1, xref=xref, yref=yref, text=f"#{int(n)}", showarrow=False, yanchor="bottom",
                   xanchor="left", font=dict(size=9, color="#555")) for x, n in zip(xs, st["step"], strict=True)]
    return shapes, labels


def figure_payload_bytes(fig: go.Figure) -> int:
    """Bytes of the JSON the browser receives (what Streamlit sends for st.plotly_chart)."""
    return len(fig.to_json().encode())


# --------------------------------------------------------------------------- syncs


def sync_figure(syncs: pd.DataFrame, t0_ns: int | None = None) -> go.Figure:
    """Blocking host syncs over time per rank; marker area ~ the GPU idle time each caused."""
    fig = go.Figure()
    if syncs.empty:
        fig.update_layout(template=TEMPLATE, height=200, annotations=[dict(text="no blocking host syncs",
                                                                            showarrow=False)])
        return fig
    t0 = int(syncs["start_ns"].min()) if t0_ns is None else int(t0_ns)
    idle = syncs["gpu_idle_ns"].fillna(0).to_numpy(dtype=float)
    size = 6 + 24 * np.sqrt(idle / idle.max()) if idle.max() > 0 else np.full(idle.size, 8.0)
    for (name, harmful), g in syncs.assign(_harmful=idle > 0).groupby(["name", "_harmful"], sort=True):
        idx = g.index.to_numpy()
        marker = (dict(opacity=0.75, line=dict(width=1, color="#333")) if harmful else  # harmless: open, grey
                  dict(symbol="circle-open", color=COLORS["harmless_sync"], line=dict(width=1)))
        fig.add_trace(go.Scattergl(
            x=_ms(g["start_ns"].to_numpy() - t0), y=g["rank"].to_numpy(), mode="markers",
            name=plotly_text(name) if harmful else f"{plotly_text(name)}, no GPU idle (harmless)",
            marker=dict(size=size[syncs.index.get_indexer(idx)], **marker),
            customdata=np.stack([_ms(g["blocked_ns"].to_numpy(dtype=float)),
                                 _ms(g["gpu_idle_ns"].to_numpy(dtype=float))], axis=1),
            text=g["caller"].map(plotly_text).to_numpy(dtype=object),
            hovertemplate=f"<b>{plotly_text(name)}</b> rank %{{y}}<br>%{{x:.3f}} ms<br>host blocked "
                          "%{customdata[0]:.4f} ms<br>GPU idle caused %{customdata[1]:.4f} ms<br>%{text}"
                          "<extra></extra>",
        ))
    fig.update_layout(template=TEMPLATE, height=160 + 40 * syncs["rank"].nunique(), xaxis_title="time (ms)",
                      yaxis=dict(title="rank", dtick=1), margin=dict(l=10, r=10, t=30, b=40))
    return fig


# --------------------------------------------------------------------------- cross-rank


def arrival_lateness(collectives: pd.DataFrame, ranks: Sequence[int]) -> pd.DataFrame:
    """rank x collective matrix (ns) of how long after the first rank each rank started it.

    Reads analyzers.crossrank's collectives table (start_ns_r{r}, first_start_ns); NaN
    where a rank is not in the collective. Columns are the collective ids.
    """
    if collectives.empty:
        return pd.DataFrame(index=list(ranks), dtype=float)
    first = collectives["first_start_ns"].to_numpy(dtype=np.int64)
    rows = {}
    for r in ranks:
        col = f"start_ns_r{r}"
        if col in collectives.columns:
            start = collectives[col]
            ok = start.notna().to_numpy()
            vals = np.full(len(start), np.nan)
            # subtract as int64, then float: exact differences of epoch nanoseconds
            vals[ok] = (start[ok].astype("int64").to_numpy() - first[ok]).astype(float)
            rows[r] = vals
    return pd.DataFrame(rows, index=collectives["coll_id"].to_numpy()).T


def skew_heatmap(collectives: pd.DataFrame, ranks: Sequence[int], max_collectives: int = 400) -> go.Figure:
    """Rank x collective heatmap of arrival lateness: who reached each collective late, by how much.

    More than max_collectives: the most skewed ones are shown (in order), so the picture stays readable.
    """
    if collectives.empty:
        fig = go.Figure()
        fig.update_layout(template=TEMPLATE, height=200,
                          annotations=[dict(text="no matched collectives", showarrow=False)])
        return fig
    colls = collectives
    if len(colls) > max_collectives:
        colls = colls.nlargest(max_collectives, "skew_ns").sort_values("coll_id")
    mat = arrival_lateness(colls, ranks)
    names = colls["coll_name"].astype(str).to_numpy() if "coll_name" in colls else np.full(len(colls), "")
    labels = [plotly_text(f"#{int(c)} {n}") for c, n in zip(colls["coll_id"].to_numpy(), names, strict=True)]
    # Red where the skew made a peer wait (the table's max wait > 0), grey where it cost nothing: the colour's
    # emphasis says what the table says, so a large skew that nobody waited for is never the darkest column.
    z = _ms(mat.to_numpy(dtype=float))
    cost = (colls["max_wait_ns"].fillna(0).to_numpy(dtype=float) > 0 if "max_wait_ns" in colls
            else np.ones(len(colls), dtype=bool))
    zmax = float(np.nanmax(z)) if np.isfinite(z).any() else 1.0
    fig = go.Figure()
    for keep, scale, title, what in ((cost, "Reds", "late, peers waited (ms)", "peers waited for it"),
                                     (~cost, "Greys", "late, no wait (ms)", "no peer waited (max wait 0)")):
        if not keep.any():
            continue
        fig.add_trace(go.Heatmap(
            z=z[:, keep], x=[lb for lb, k in zip(labels, keep, strict=True) if k], y=[f"rank {r}" for r in mat.index],
            colorscale=scale, zmin=0, zmax=zmax if scale == "Reds" else zmax * 3,  # grey stays light
            colorbar=dict(title=title, x=1.0 if scale == "Reds" else 1.12), showscale=True,
            hovertemplate="%{y}<br>%{x}<br>started %{z:.4f} ms after the first rank; " + what + "<extra></extra>"))
    fig.update_layout(template=TEMPLATE, height=160 + 36 * len(mat),
                      xaxis=dict(title="collective", type="category", categoryorder="array", categoryarray=labels),
                      yaxis=dict(autorange="reversed"),
                      margin=dict(l=10, r=10, t=30, b=40))
    return fig


def peer_wait_bars(table: pd.DataFrame, wait: str = "wait_ns", transfer: str | None = "transfer_ns") -> go.Figure:
    """Per rank, time its collectives waited for a late peer vs time spent moving data."""
    fig = go.Figure()
    if table.empty:
        fig.update_layout(template=TEMPLATE, height=200, annotations=[dict(text="no peer wait data",
                                                                            showarrow=False)])
        return fig
    y = [f"rank {r}" for r in table["rank"]]
    fig.add_trace(go.Bar(y=y, x=_ms(table[wait].to_numpy(dtype=float)), orientation="h", name="waiting for peers",
                         marker_color=COLORS["exposed_comm"], hovertemplate="%{y}: waited %{x:.3f} ms<extra></extra>"))
    if transfer and transfer in table.columns:
        fig.add_trace(go.Bar(y=y, x=_ms(table[transfer].to_numpy(dtype=float)), orientation="h",
                             name="transferring", marker_color=COLORS["comm"],
                             hovertemplate="%{y}: transferred %{x:.3f} ms<extra></extra>"))
    fig.update_layout(template=TEMPLATE, barmode="stack", height=120 + 34 * len(table), xaxis_title="time (ms)",
                      yaxis=dict(autorange="reversed"), margin=dict(l=10, r=10, t=30, b=40),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig
