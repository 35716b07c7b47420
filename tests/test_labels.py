"""The metric registry (viz/labels.py): one label, unit and format per metric, for the CLI, the HTML report
and the app alike. Hand-picked values with their expected text."""

from __future__ import annotations

import math

import pytest

from viz import labels
from viz.diff_tables import METRICS as DIFF_METRICS
from viz.formats import ms, pct


@pytest.mark.parametrize(("key", "v", "text"), [
    ("overlap_ratio", 0.74389, "74.4%"),
    ("overlap_ratio", None, "n/a"),  # undefined: no communication
    ("overlap_ratio", math.nan, "n/a"),
    ("comm_ns", 1_234_567, "1.235 ms"),
    ("comm_ns", 1_234_567_890, "1,234.568 ms"),
    ("n_gpu", 12345, "12,345"),
    ("step", -1, "—"),  # no step: absent, not a number
    ("step", 3, "3"),
    ("step", 3.0, "3"),
    ("late_rank", -1, "—"),
    ("caller", "", "—"),
    ("caller", None, "—"),
    ("sync_op", "aten::item", "aten::item"),
    ("busbw_median_gbps", 123.456, "123.5 GB/s"),
    ("busbw_median_gbps", math.nan, "n/a"),  # no activity alone: no median
    ("bytes_median", 3 * 2**20, "3.00 MiB"),
    ("outlier", True, "yes"),
    ("outlier", False, "no"),
    ("host", None, "—"),
    ("last_share", 0.25, "25.0%"),
])
def test_values_read_with_their_units(key, v, text):
    assert labels.show(key, v) == text


def test_headers_are_labels_with_the_unit_of_a_time():
    assert labels.header("gpu_idle_ns") == "GPU idle caused (ms)"
    assert labels.header("overlap_ratio") == "overlap ratio (overlap/comm)"
    assert labels.header("sync_op") == "sync-implying op"
    assert labels.header("busbw_median_gbps") == "bus bandwidth, median (GB/s)"
    assert labels.header("bytes_median") == "median size (MiB)"
    assert labels.header("median_lateness_ns") == "median lateness (ms)"


def test_an_unregistered_key_still_reads_as_words():
    assert labels.header("queue_wait_ns") == "queue wait (ms)"
    assert labels.metric("copy_share").kind == "ratio"
    assert labels.header("n_retries") == "retries (count)"
    assert "_" not in labels.header("some_new_text_field")


def test_deltas_and_relative_changes():
    assert labels.delta("ratio", 0.123) == "+12.3 pt"
    assert labels.delta("time", -2_478_000) == "-2.478 ms"
    assert labels.delta("count", 0) == "no change" and labels.delta("time", 0) == "0.000 ms"
    assert labels.delta("time", None) == "n/a"
    assert labels.relative(-0.17) == "-17.0%"
    assert labels.relative(None) == "n/a"  # A was 0: a relative change is undefined


def test_the_cli_formats_and_the_diff_labels_come_from_the_registry():
    assert ms(1_234_567) == labels.number("time", 1_234_567) == "1.235"
    assert pct(0.511) == labels.number("ratio", 0.511) == "51.1%"
    assert ms(None) == pct(None) == "n/a"
    for key, (label, kind, better) in DIFF_METRICS.items():
        m = labels.metric(key)
        assert (label, kind, better) == (m.label, m.kind, m.better) and key in labels.METRICS
