"""The dashboard's server: `python app/serve.py [streamlit run options] -- [PATH...]`, what `overlapscope app`
starts.

It is `streamlit run app/main.py` plus one thing: the server loads and analyzes the runs a new session opens
on (the command-line runs, else the opening samples) as it starts, through the very caches the pages read
(app/ui.py). Streamlit runs a page only when a browser connects; without this, the first browser would wait
for the server start, then the imports, the parse and the analysis one after the other. The parse starts
first, before Streamlit and Plotly are imported (app/preload.py): its workers run while the server starts. A
browser that connects while the work is under way waits on the same cache entry (Streamlit holds one lock
per entry), so the work is done once.
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

from app import data, preload  # noqa: E402 - plain Python (no streamlit): the load starts before it

MAIN = Path(__file__).resolve().parent / "main.py"
LOG = logging.getLogger("overlapscope.app")
THREAD = "overlapscope-warm-up"
# CPU priorities (nice values, preload.niced) for a browser on the same machine: the first chart waits for
# the server's start, the browser's page and the per-rank metrics, which share the cores. The first load runs a
# little lower, so the page the user opens is not held back by it (on 2 cores the value, 0 to 10, changed the
# first chart less than the run-to-run noise: benchmarks/RESULTS.md). The whole analysis runs at the same
# priority: the Overview's first screen, the decision (app/decision.py), waits for it.
PRELOAD_NICE = 5
BACKGROUND_NICE = 5
# Streamlit warns when its caches are declared before the server exists and used outside a page; both are
# what this module means to do, so those two lines stay out of the server's log.
QUIET = {"streamlit.runtime.caching.cache_data_api": "No runtime found",
         "streamlit.runtime.scriptrunner_utils.script_run_context": "missing ScriptRunContext"}


def _quiet() -> None:
    for name, text in QUIET.items():
        logging.getLogger(name).addFilter(
            lambda rec, text=text: not (text in rec.getMessage()
                                        and (rec.threadName == THREAD or text == "No runtime found")))


def warm_up(runs: Sequence[tuple[data.Source, data.Fingerprint]]) -> None:
    """Fill the pages' caches for each opening run (preload.opening_runs), in the order the Overview asks:
    every run's per-rank metrics (its first chart, from the load preload.start began), then each run's whole
    analysis (from that same load). A run that cannot be read is left for the page to report, in the session
    that opens it."""
    try:
        from analyzers.errors import BadInputError
        from app import ui

        readable = []
        for src, fp in runs:
            run = ui.Loaded(src, fp)
            try:
                run.rank_report()
            except BadInputError:
                continue
            readable.append(run)
        for run in readable:
            run.report()
    except Exception:  # noqa: BLE001 - a failed warm-up costs time, never the server: the page redoes the work
        LOG.exception("loading the opening runs at server start failed")


def skip_component_scan() -> None:
    """Streamlit's runtime, as it starts, reads every installed package's metadata in search of custom
    components (streamlit.components.v2); the dashboard uses none. That scan took 0.5 s of CPU with 207
    packages installed, before /_stcore/health answers and while the parse runs: it is skipped (it finds none
    here, and no page could use what it would find). A Streamlit without that scanner is left as it is."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:
        return
    if hasattr(manifest_scanner, "scan_component_manifests"):
        manifest_scanner.scan_component_manifests = lambda *args, **kwargs: []


def split_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(streamlit run options, paths): the paths follow `--`, as for `streamlit run app/main.py -- PATH...`."""
    args = list(argv)
    if "--" not in args:
        return args, []
    cut = args.index("--")
    return args[:cut], args[cut + 1:]


def main(argv: Sequence[str]) -> None:
    options, paths = split_args(argv)
    _quiet()
    # The analysis stack (pandas, numpy, pyarrow, the analyzers) is imported before the load thread starts,
    # and the rest (streamlit, plotly) before the warm-up thread: two threads importing pandas at once can see
    # it half-initialized (plotly looks it up in sys.modules).
    import pyarrow  # noqa: F401 - the parse cache's and st.dataframe's

    import analyzers.io.parallel  # noqa: F401 - what the load imports as it runs
    import analyzers.io.parse_cache  # noqa: F401
    import analyzers.report  # noqa: F401

    runs = preload.opening_runs(paths)
    preload.start(runs, PRELOAD_NICE)
    from app import ui  # noqa: F401
    from viz import critical_figures, figures, scale_figures  # noqa: F401 - the Overview's figures

    threading.Thread(target=preload.niced, args=(BACKGROUND_NICE, warm_up, runs), name=THREAD,
                     daemon=True).start()
    skip_component_scan()
    from streamlit.web import cli

    cli.main(["run", str(MAIN), *options, "--", *paths], prog_name="streamlit")


if __name__ == "__main__":
    main(sys.argv[1:])
