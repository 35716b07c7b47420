"""The view is in the URL: ?runs= on every page, the Timeline's step and window, and links between pages keep them.

AppTest on the bundled Nsight Systems and ag-gemm runs; parsing by hand.
"""

from __future__ import annotations

import pytest

from app.url_state import parse_ranks, parse_window, window_value

from .test_app_decision import _app, bundled  # noqa: F401 - fixture

NSYS = "ag-gemm-nsys/sync-in-loop,ag-gemm-nsys/sync-before-loop"


def test_parse_by_hand() -> None:
    assert parse_window("0.5~1.5", 10.0) == (0.5, 1.5)
    assert parse_window("-3~20", 10.0) == (0.0, 10.0)  # clipped to the step
    assert parse_window("2~1", 10.0) is None and parse_window("a~b", 10.0) is None and parse_window(None, 1) is None
    assert parse_window(window_value(1.25, 3.5), 10.0) == (1.25, 3.5)
    assert parse_ranks("7,x,3,7,99", [0, 3, 7]) == [7, 3]
    assert parse_ranks("99", [0, 1]) is None


def test_a_link_opens_the_timeline_on_its_runs_step_and_window(bundled) -> None:  # noqa: F811
    from streamlit.testing.v1 import AppTest

    from .test_app import MAIN, TIMEOUT

    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    at.query_params.update({"runs": NSYS, "step": "1", "window": "0.25~0.75"})
    at.run()
    at.switch_page("views/timeline.py").run()
    assert not at.exception and not at.error
    assert [s.split(":", 1)[1] for s in at.session_state["os_selected"]] == NSYS.split(",")
    assert at.selectbox[0].value == 1
    assert at.slider[0].value == pytest.approx((0.25, 0.75))
    # the view changes: the URL follows
    at.selectbox[0].set_value("whole trace").run()
    assert at.query_params["step"] == "whole"
    lo, hi = at.slider[0].value
    assert at.query_params["window"] == window_value(lo, hi) and at.query_params["runs"] == NSYS


def test_runs_follow_the_selection_and_show_in_timeline_keeps_them(bundled) -> None:  # noqa: F811
    at = _app("ag-gemm/host-sync,ag-gemm/tuned")
    assert at.query_params["runs"] == "ag-gemm/host-sync,ag-gemm/tuned"
    at.multiselect(key="os_selected").set_value(["sample:ag-gemm/host-sync"]).run()
    assert at.query_params["runs"] == "ag-gemm/host-sync"
    at.multiselect(key="os_selected").set_value(["sample:ag-gemm/host-sync", "sample:ag-gemm/baseline"]).run()
    button = next(b for b in at.button if str(b.key).startswith("finding-sample:ag-gemm/host-sync-"))
    button.click().run()
    assert not at.exception
    assert at.title[0].value == "Timeline"
    assert at.query_params["runs"] == "ag-gemm/host-sync,ag-gemm/baseline"
