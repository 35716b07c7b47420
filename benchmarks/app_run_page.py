"""Drive the app's Run page on a GPU host, headless, and record what it showed.

The page is the real one (app/main.py -> views/run.py through streamlit's AppTest):
it picks the sample, shows its recorded facts and command, checks the GPUs with
`nvidia-smi -L`, and its button runs the command there. This script clicks the button
and writes every element the page rendered (metrics, captions, code, messages) to a
JSON file, so docs/app.md can quote it.

usage (repo root):  python benchmarks/app_run_page.py SAMPLES_ROOT SAMPLE_LABEL RUNS_DIR OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
if str(ROOT) not in sys.path:  # this checkout's app/ and runners/, not an installed copy
    sys.path.insert(0, str(ROOT))


def page_elements(at: Any) -> dict[str, Any]:
    """The texts a reader of the page sees, element kind by element kind."""
    return {
        "title": [t.value for t in at.title],
        "metrics": {m.label: m.value for m in at.metric},
        "markdown": [m.value for m in at.markdown],
        "captions": [c.value for c in at.caption],
        "code": [c.value for c in at.code],
        "buttons": [b.label for b in at.button],
        "info": [i.value for i in at.info],
        "success": [s.value for s in at.success],
        "error": [e.value for e in at.error],
        "exceptions": [e.value for e in at.exception],
    }


def main(samples: str, label: str, runs_dir: str, out_json: str) -> int:
    from streamlit.testing.v1 import AppTest

    from app import data

    os.environ[data.ENV_SAMPLES] = samples
    os.environ[data.ENV_RUNS_DIR] = runs_dir
    at = AppTest.from_file(MAIN, default_timeout=900)
    at.run()
    at.switch_page("views/run.py").run()
    options = at.selectbox(key="run_source").options
    pick = [o for o in options if o.endswith(label)]
    if not pick:
        print(f"no sample labelled {label!r} among {options}", file=sys.stderr)
        return 3
    at.selectbox(key="run_source").set_value(pick[0]).run()
    out = Path(runs_dir) / "from-run-page"
    at.text_input(key="run_out").set_value(str(out)).run()
    before = page_elements(at)
    t0 = time.time()
    at.button(key="run_go").click().run()
    after = page_elements(at)
    record = {"gpu_count": data.gpu_count(), "sample": pick[0], "out": str(out),
              "seconds": round(time.time() - t0, 1), "before_click": before, "after_click": after,
              "selected": list(at.session_state["os_selected"]),
              "made": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())}
    Path(out_json).write_text(json.dumps(record, indent=1, default=str))
    print(json.dumps({k: record[k] for k in ("gpu_count", "sample", "seconds", "made")}, indent=1))
    print("before:", json.dumps(before["metrics"]), before["buttons"], before["info"])
    print("after:", after["success"], after["error"], after["exceptions"])
    return 0 if after["success"] and not after["exceptions"] else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
