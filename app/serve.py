"""The dashboard's server: `python app/serve.py [streamlit run options] -- [PATH...]`, what `overlapscope app`
starts.

It is `streamlit run app/main.py` plus one thing: as the server starts, a background thread loads and
analyzes the runs a new session opens on (the command-line runs, else the opening samples), through the
very caches the pages read (app/ui.py). Streamlit runs a page only when a browser connects; without this,
the first browser would wait for the server start, then the imports, the parse and the analysis one after
the other. A browser that connects while the work is under way waits on the same cache entry (Streamlit
holds one lock per entry), so the work is done once.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

# run as a script (`python app/serve.py`): the repository root on sys.path, as app/main.py does
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

MAIN = Path(__file__).resolve().parent / "main.py"
LOG = logging.getLogger("overlapscope.app")
THREAD = "overlapscope-warm-up"
# Streamlit warns when its caches are declared before the server exists and used outside a page; both are
# what this module means to do, so those two lines stay out of the server's log.
QUIET = {"streamlit.runtime.caching.cache_data_api": "No runtime found",
         "streamlit.runtime.scriptrunner_utils.script_run_context": "missing ScriptRunContext"}


def _quiet() -> None:
    for name, text in QUIET.items():
        logging.getLogger(name).addFilter(
            lambda rec, text=text: not (text in rec.getMessage()
                                        and (rec.threadName == THREAD or text == "No runtime found")))


def warm_up(paths: Sequence[str]) -> None:
    """Load every opening run, then analyze each (the order the Overview asks for them: its first chart needs
    the per-rank metrics of every run, which come with the load). A run that cannot be read is left for the
    page to report, in the session that opens it."""
    try:
        from analyzers.errors import BadInputError
        from app import data, ui

        sources, keys = ui.opening_sources(data.command_line_paths(list(paths)))
        runs = []
        for key in keys:
            try:
                run = ui.Loaded(sources[key], data.fingerprint(sources[key].paths))
                run.traces()
            except BadInputError:
                continue
            runs.append(run)
        for run in runs:
            run.report()
    except Exception:  # noqa: BLE001 - a failed warm-up costs time, never the server: the page redoes the work
        LOG.exception("loading the opening runs at server start failed")


def split_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(streamlit run options, paths): the paths follow `--`, as for `streamlit run app/main.py -- PATH...`."""
    args = list(argv)
    if "--" not in args:
        return args, []
    cut = args.index("--")
    return args[:cut], args[cut + 1:]


def main(argv: Sequence[str]) -> None:
    options, paths = split_args(argv)
    # The stack (streamlit, pandas, numpy, pyarrow, plotly) is imported here, before the thread starts: two
    # threads importing pandas at once can see it half-initialized (plotly looks it up in sys.modules).
    _quiet()
    import pyarrow  # noqa: F401 - the parse cache's and st.dataframe's

    from app import ui  # noqa: F401
    from viz import critical, figures, scale_figures  # noqa: F401 - the Overview's figures

    threading.Thread(target=warm_up, args=(paths,), name=THREAD, daemon=True).start()
    from streamlit.web import cli

    cli.main(["run", str(MAIN), *options, "--", *paths], prog_name="streamlit")


if __name__ == "__main__":
    main(sys.argv[1:])
