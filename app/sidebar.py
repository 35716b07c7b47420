"""The sidebar on every page: which runs to show, and where runs are added (a server path, an upload).

It is drawn once per script run (app/ui.py begin_run starts one). app/main.py draws it before the page, except
on the Overview, the page a new session opens on: while the server's first load of the opening runs is under
way (app/preload.py), the Overview draws its first chart first and the sidebar right after it. The browser's
work on the sidebar's widgets (the run picker, the path box, the uploader) would otherwise come before that
chart, on the CPU the load needs too. Once that load has ended, the sidebar comes first on every page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

from analyzers.errors import BadInputError
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown

from . import data, preload, ui, uploads

# How long the Overview may draw its first chart before the sidebar: the wait for the server's first load of the
# opening runs; past it the sidebar is drawn and the page keeps waiting, so a long load never hides the run picker.
WAIT_S = 10.0
K_UPLOAD_GUARDS = "os_upload_guards"  # uploads.UploadGuard of each upload made in this browser session


def draw() -> None:
    """The run picker, the "Add traces" panel and the messages of the last path or upload (once a run)."""
    if st.session_state.get(ui.K_SIDEBAR_DRAWN):
        return
    st.session_state[ui.K_SIDEBAR_DRAWN] = True
    srcs = ui.sources()
    with st.sidebar:
        st.markdown("### Trace sets")
        if not srcs:
            st.info("No sample traces found and no paths given. Add a server path or upload traces below, "
                    "or start `overlapscope app PATH...`.")
        st.multiselect(
            "Runs to show (the first is A in comparisons)", options=list(srcs),
            format_func=lambda k: f"{srcs[k].label}  [{srcs[k].kind}]", key=ui.K_SELECTED,
            help="Each entry is one run (all its ranks). Several runs appear side by side.",
        )
        with st.expander("Add traces", expanded=not srcs):
            st.text_input("Server path (file or run folder)", key="os_server_path",
                          placeholder="/data/traces/run1", help="Only under the allowed roots: "
                          + ", ".join(str(r) for r in ui.roots()))
            st.button("Add path", on_click=_add_server_path)
            limit = data.max_upload_mb()
            st.file_uploader(
                f"Upload traces of one run (.json, .json.gz, .sqlite; up to {limit} MB)",
                # no type=: Streamlit's own name check raises in its callback dispatch (a NUL byte: a stack trace
                # on the page); uploads.save_uploads checks the suffix and the name, in one line
                accept_multiple_files=True, key="os_upload", on_change=_on_upload,
            )
        for kind, msg in st.session_state.get(ui.K_MESSAGES, []):
            (st.error if kind == "error" else st.success)(md(msg))
        st.session_state[ui.K_MESSAGES] = []


def _keys(runs: Sequence[data.Source]) -> list[tuple[data.Fingerprint, str]]:
    try:
        return [(data.fingerprint(s.paths), s.label) for s in runs]
    except BadInputError:  # the page reports it when it loads the run
        return []


def waits_for(runs: Sequence[data.Source]) -> bool:
    """Whether the Overview of these runs draws its first chart before the sidebar: the server's own first load
    of them (app/preload.py) is under way."""
    return preload.under_way(_keys(runs))


def draw_unless_loaded(runs: Sequence[data.Source]) -> None:
    """Before the Overview loads these runs, when the sidebar waits for its first chart (waits_for): the
    sidebar now if the server's load of them has not ended within WAIT_S, so a long load never hides the run
    picker; else nothing (the page draws it after the chart)."""
    if not st.session_state.get(ui.K_SIDEBAR_DRAWN) and not preload.wait(_keys(runs), WAIT_S):
        draw()


def _add_server_path() -> None:
    text = st.session_state.get("os_server_path", "")
    try:
        src = data.server_source(text, ui.roots())
        data.fingerprint(src.paths)
    except BadInputError as exc:
        st.session_state[ui.K_MESSAGES].append(("error", f"Server path refused: {exc}"))
        return
    ui.add_source(src)
    st.session_state[ui.K_MESSAGES].append(("success", f"Added {src.label}"))


def _on_upload() -> None:
    """Callback of the uploader (callbacks run before the script, so the selection may change)."""
    _handle_uploads(st.session_state.get("os_upload") or [])


def _handle_uploads(files: Sequence[Any]) -> None:
    """Each new upload batch becomes one source, after it loads cleanly; else one clear error."""
    if not files:
        return
    batch_id = tuple(sorted(getattr(f, "file_id", f.name) for f in files))
    done = st.session_state[ui.K_UPLOADS_DONE]
    if batch_id in done:
        return
    done[batch_id] = True
    try:
        src = uploads.save_uploads([(f.name, f.getvalue()) for f in files])
    except BadInputError as exc:
        st.session_state[ui.K_MESSAGES].append(("error", f"Upload refused: {exc}"))
        return
    try:
        ui.Loaded(src, data.fingerprint(src.paths)).rank_report()
    except BadInputError as exc:
        uploads.discard_upload(src)
        st.session_state[ui.K_MESSAGES].append(("error", f"Upload could not be read: {ui.strip_tmp(str(exc))}"))
        return
    ui.add_source(src)
    st.session_state.setdefault(K_UPLOAD_GUARDS, []).append(uploads.UploadGuard(src))  # gone with the session
    st.session_state[ui.K_MESSAGES].append(("success", f"Uploaded {src.label}"))
