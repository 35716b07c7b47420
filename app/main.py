"""overlapscope dashboard entry: `overlapscope app [PATH...]` or
`streamlit run app/main.py -- [PATH...]`.

Sets up the sources (sidebar, on every page) and the pages through st.navigation. The sidebar comes before the
page, except on the Overview, which draws it after its first chart while the server loads the opening runs
(app/sidebar.py).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

# `streamlit run app/main.py` puts app/ on sys.path, not the repository root.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import streamlit as st  # noqa: E402

from analyzers.errors import BadInputError  # noqa: E402
from app import sidebar, ui, url_state  # noqa: E402
from viz.safe_text import markdown_text as md  # noqa: E402  (names from trace files: text, never Markdown)

st.set_page_config(page_title="overlapscope", layout="wide", initial_sidebar_state="expanded")

OVERVIEW = st.Page(ui.PAGE_FILES["overview"], title="Overview", default=True)
PAGES = [
    OVERVIEW,
    st.Page(ui.PAGE_FILES["timeline"], title="Timeline"),
    st.Page(ui.PAGE_FILES["crossrank"], title="Cross-rank"),
    st.Page(ui.PAGE_FILES["stragglers"], title="Stragglers"),
    st.Page(ui.PAGE_FILES["syncs"], title="Syncs"),
    st.Page(ui.PAGE_FILES["collectives"], title="Collectives"),
    st.Page(ui.PAGE_FILES["diff"], title="Diff"),
    st.Page(ui.PAGE_FILES["run"], title="Run"),
]


def _run() -> None:
    ui.begin_run()
    url_state.publish(runs=url_state.runs_value([s.label for s in ui.selected()]))  # a link to these runs
    page = st.navigation(PAGES, position="sidebar", expanded=True)
    if page is not OVERVIEW or not sidebar.waits_for(ui.selected()):
        sidebar.draw()
    page.run()
    sidebar.draw()  # where the page has not drawn it (drawn once a run)


if not st.get_option("server.enableXsrfProtection"):
    st.warning("Streamlit's XSRF protection is off on this server: uploads can be forged by other sites. "
               "Start the app with `overlapscope app`, which keeps it on.")
try:
    _run()
except Exception as exc:  # noqa: BLE001 - a page shows one line, never a stack trace (st.stop/rerun are not Exceptions)
    logging.getLogger("overlapscope.app").exception("page failed")  # the details go to the server's log
    st.error(f"This page could not be shown: {md(exc)}" if isinstance(exc, BadInputError) else
             f"This page could not be shown ({type(exc).__name__}: {md(str(exc)[:300])}). The server log has the "
             "details.")
    sidebar.draw()
