"""Blocking host syncs: classification, host time, GPU idle caused, callers; hand-computed figures.

Times in the hand-made traces are ns; every expected value is worked out in the comment beside it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.io.load import load_traces
from analyzers.syncs.blocking import SyncParams, api_base_name, blocking_syncs, op_base_name
from analyzers.syncs.nesting import innermost_enclosing, nesting_depth
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.model import SYNC_COLUMNS as SYNC_TABLE_COLUMNS
from analyzers.timeline.model import make_table

from .conftest import HTA_TRACES, NSYS_TRACES
from .synth import GEMM, rank_trace

DTOH = "Memcpy DtoH (Device -> Pageable)"
HTOD = "Memcpy HtoD (Pageable -> Device)"
DTOD = "Memcpy DtoD (Device -> Device)"


def _set_host_kinds(t, kinds: dict[str, str]) -> None:
    """rank_trace makes every host op a user_annotation; give named ops their Kineto kind."""
    names = t.names_of(t.host_ops["name_id"].to_numpy())
    t.host_ops["kind"] = np.array([kinds.get(n, "user_annotation") for n in names], dtype=object)


def _one_stream_sync(**extra_runtime):
    # kernel A [1000,5000) launched at 100; the host syncs [200,5300); kernel B launched at 5500 runs [6000,7000)
    return rank_trace(
        [(1000, 5000, 7, GEMM, "kernel", 1), (6000, 7000, 7, GEMM, "kernel", 2)],
        launches=[(1, 100), (2, 5500)],
        runtime=[("cudaStreamSynchronize", 200, 5300, 10)] + list(extra_runtime.get("runtime", [])),
    )


def test_stream_sync_host_time_and_gpu_idle():
    df = blocking_syncs(_one_stream_sync())
    assert len(df) == 1
    r = df.iloc[0]
    assert (r.api, r.kind, r.device) == ("cudaStreamSynchronize", "stream", 0)
    assert r.host_blocked_ns == 5100  # 5300 - 200
    assert r.next_gpu_start_ns == 6000  # kernel B: the first launched after the sync's end
    assert r.gpu_idle_ns == 700  # [5300, 6000): nothing runs
    assert list(df.columns)[:5] == ["rank", "api", "kind", "start_ns", "end_ns"]


def test_idle_does_not_count_work_still_running_on_another_stream():
    # kernel C on stream 9, launched at 150 (before the sync), runs [5000, 5800): busy during the gap
    t = rank_trace(
        [(1000, 5000, 7, GEMM, "kernel", 1), (5000, 5800, 9, GEMM, "kernel", 3), (6000, 7000, 7, GEMM, "kernel", 2)],
        launches=[(1, 100), (3, 150), (2, 5500)],
        runtime=[("cudaStreamSynchronize", 200, 5300, 10)],
    )
    r = blocking_syncs(t).iloc[0]
    assert r.next_gpu_start_ns == 6000  # C was launched before the sync: not "the next launched after it"
    assert r.gpu_idle_ns == 200  # [5300,6000) minus C's [5300,5800)


def test_idle_while_queued_work_waits_is_not_caused_by_the_sync():
    # the host is far ahead: kernels 3 and 4 were launched (at 150, 160) before a stream sync that
    # returns at once ([200, 210)); the GPU then idles [1000, 4000) waiting on a dependency of kernel 4,
    # not on the host. Kernel 2, launched after the sync, starts at 6000 once kernel 4 ended at 5000.
    t = rank_trace(
        [(300, 1000, 7, GEMM, "kernel", 3), (4000, 5000, 9, GEMM, "kernel", 4), (6000, 7000, 7, GEMM, "kernel", 2)],
        launches=[(3, 150), (4, 160), (2, 5200)],
        runtime=[("cudaStreamSynchronize", 200, 210, 10)],
    )
    r = blocking_syncs(t).iloc[0]
    assert r.next_gpu_start_ns == 6000
    assert r.gpu_idle_ns == 1000  # only [5000, 6000), after the queued work drained


def test_sync_device_is_where_its_thread_launched_last():
    # one process driving two GPUs: kernel 1 on device 0 (launched at 100), kernel 2 on device 1
    # (launched at 150); the device sync at [200, 3000) follows the device-1 launch
    t = rank_trace([(1000, 2000, 7, GEMM, "kernel", 1), (1000, 2900, 7, GEMM, "kernel", 2),
                    (3500, 3600, 7, GEMM, "kernel", 3)],
                   launches=[(1, 100), (2, 150), (3, 3100)],
                   runtime=[("cudaDeviceSynchronize", 200, 3000, 10)])
    t.gpu["device"] = np.array([0, 1, 1], dtype=np.int32)
    r = blocking_syncs(t).iloc[0]
    assert r.device == 1
    assert r.gpu_idle_ns == 500  # device 1: [3000, 3500); device 0's idle is not this sync's


def test_stream_wait_event_is_never_blocking():
    t = rank_trace([(1000, 5000, 7, GEMM, "kernel", 1)], launches=[(1, 100)],
                   runtime=[("cudaStreamWaitEvent", 200, 5300, 10), ("cudaEventRecord", 5400, 5410, 11)])
    assert blocking_syncs(t).empty


def test_device_and_event_syncs_and_nsys_version_suffix():
    t = rank_trace([(1000, 5000, 7, GEMM, "kernel", 1)], launches=[(1, 100)],
                   runtime=[("cudaDeviceSynchronize_v3020", 200, 5100, 10), ("cudaEventSynchronize", 6000, 6100, 11),
                            ("cudaStreamSynchronize_ptsz_v7000", 6200, 6300, 12)])
    df = blocking_syncs(t)
    assert df["api"].tolist() == ["cudaDeviceSynchronize", "cudaEventSynchronize", "cudaStreamSynchronize"]
    assert df["kind"].tolist() == ["device", "event", "stream"]
    assert api_base_name("cudaMemcpy_ptds_v7000") == "cudaMemcpy"
    assert op_base_name("aten::item, seq = 3, op_id = 9") == "aten::item"


def _memcpy_trace(copy_name: str, call: tuple[int, int], copy: tuple[int, int]):
    # kernel K [1000,5000) launched at 100; a synchronous cudaMemcpy call with its own copy activity
    return rank_trace(
        [(1000, 5000, 7, GEMM, "kernel", 1), (copy[0], copy[1], 7, copy_name, "memcpy", 20)],
        launches=[(1, 100)],
        runtime=[("cudaMemcpy", call[0], call[1], 20)],
    )


def test_blocking_memcpy_that_waited_for_pending_work_is_a_sync():
    # called at 300 while K runs (launched at 100, ends 5000); its DtoH copy runs [5000,5500); returns 5600
    df = blocking_syncs(_memcpy_trace(DTOH, (300, 5600), (5000, 5500)))
    assert df["kind"].tolist() == ["memcpy"] and df["api"].tolist() == ["cudaMemcpy"]
    assert df["host_blocked_ns"].tolist() == [5300]
    assert df["stream"].tolist() == [7]  # the copy's stream


def test_memcpy_that_waited_for_nothing_is_just_a_copy():
    # called at 6000, after K ended: nothing pending
    t = _memcpy_trace(DTOH, (6000, 6600), (6100, 6500))
    assert blocking_syncs(t).empty
    assert len(blocking_syncs(t, SyncParams(memcpy_needs_pending_work=False))) == 1


def test_pageable_htod_memcpy_returning_before_its_copy_is_not_a_sync():
    # K pending at 300, but the call returns at 400, before its own copy [5000,5100) even starts
    assert blocking_syncs(_memcpy_trace(HTOD, (300, 400), (5000, 5100))).empty


def test_device_to_device_memcpy_never_blocks():
    assert blocking_syncs(_memcpy_trace(DTOD, (300, 5600), (5000, 5500))).empty


def test_item_sync_reported_once_with_op_caller_and_annotation():
    # annotation "loss" [50,7000) > aten::item [100,6000) > aten::_local_scalar_dense [150,5900)
    #   > cudaMemcpyAsync [200,300) then cudaStreamSynchronize [310,5800)
    t = rank_trace(
        [(1000, 5000, 7, GEMM, "kernel", 1), (5000, 5100, 7, DTOH, "memcpy", 11), (6500, 7000, 7, GEMM, "kernel", 2)],
        launches=[(1, 100), (2, 6400)],
        host_ops=[("loss", 50, 7000), ("aten::item", 100, 6000), ("aten::_local_scalar_dense", 150, 5900)],
        runtime=[("cudaMemcpyAsync", 200, 300, 11), ("cudaStreamSynchronize", 310, 5800, 12)],
    )
    _set_host_kinds(t, {"aten::item": "cpu_op", "aten::_local_scalar_dense": "cpu_op"})
    df = blocking_syncs(t)
    assert len(df) == 1  # the async copy is not a sync; the item op is not reported a second time
    r = df.iloc[0]
    assert r.api == "cudaStreamSynchronize"
    assert r.caller == "aten::_local_scalar_dense" and r.sync_op == "aten::_local_scalar_dense"
    assert r.annotation == "loss"
    assert r.gpu_idle_ns == 700  # [5800, 6500): kernel 2 launched at 6400


def test_implied_op_without_runtime_table_is_reported_with_host_time():
    # no runtime calls at all (CPU activity only): aten::item > aten::_local_scalar_dense
    t = rank_trace([(1000, 5000, 7, GEMM)],
                   host_ops=[("aten::item", 100, 6000), ("aten::_local_scalar_dense", 150, 5900),
                             ("aten::nonzero", 8000, 9000)])
    _set_host_kinds(t, {"aten::item": "cpu_op", "aten::_local_scalar_dense": "cpu_op", "aten::nonzero": "cpu_op"})
    df = blocking_syncs(t)
    assert df["api"].tolist() == ["aten::_local_scalar_dense", "aten::nonzero"]  # innermost only, once each
    assert df["kind"].tolist() == ["op", "op"]
    assert df["host_blocked_ns"].tolist() == [5750, 1000]
    assert df["caller"].tolist() == ["aten::item", ""]  # an op is never its own caller


def test_item_on_cpu_tensor_is_not_a_sync_when_runtime_shows_none():
    t = rank_trace([(1000, 5000, 7, GEMM, "kernel", 1)], launches=[(1, 100)],
                   host_ops=[("aten::item", 6000, 6100), ("aten::_local_scalar_dense", 6010, 6090)])
    assert blocking_syncs(t).empty


def test_caller_on_another_thread_when_none_on_the_sync_thread():
    t = _one_stream_sync()
    t2 = rank_trace([(1000, 5000, 7, GEMM, "kernel", 1), (6000, 7000, 7, GEMM, "kernel", 2)],
                    launches=[(1, 100)], host_ops=[("outer", 0, 9000), ("inner", 150, 5400), ("late", 5301, 5400)],
                    runtime=[("cudaStreamSynchronize", 200, 5300, 10)])
    t2.runtime.loc[t2.runtime["name_id"] == t2.names.intern("cudaStreamSynchronize"), "tid"] = 5
    assert blocking_syncs(t2).iloc[0].caller == "inner"  # innermost on any thread
    t2.host_ops["tid"] = 5
    assert blocking_syncs(t2).iloc[0].caller == "inner"  # same thread
    assert blocking_syncs(t).iloc[0].caller == ""  # no host ops at all


def test_gpu_sync_records_confirm_but_stream_wait_event_does_not():
    t = _one_stream_sync()
    names = [t.names.intern("Stream Sync"), t.names.intern("Stream Wait Event")]
    t.sync_events = make_table(SYNC_TABLE_COLUMNS, 2, start_ns=[5000, 5000], end_ns=[5300, 5300], device=[0, 0],
                               stream=[7, 7], name_id=names, correlation=[10, 99])
    r = blocking_syncs(t).iloc[0]
    assert bool(r.confirmed) and r.stream == 7
    t.sync_events = t.sync_events.assign(correlation=[10, 98], name_id=names[::-1])  # 10 is now a wait record
    assert not bool(blocking_syncs(t).iloc[0].confirmed)


def test_step_column_and_censored_idle_at_trace_end():
    # ProfilerStep#3 host range [0, 9000); the sync [200,5300) is its last event: no kernel follows it
    t = rank_trace([(1000, 5000, 7, GEMM, "kernel", 1)], launches=[(1, 100)], steps=[(3, 0, 9000)],
                   runtime=[("cudaStreamSynchronize", 200, 5300, 10)])
    r = blocking_syncs(t).iloc[0]
    assert r.step == 3
    # nothing launched after it: the trace just ends, no idle was caused (censored evidence)
    assert r.next_gpu_start_ns == NO_TIME and r.gpu_idle_ns == 0
    assert r.caller == ""  # iteration ranges are never callers


# --- interval join property ------------------------------------------------------------------

@st.composite
def nested_ranges(draw):
    """Properly nested ranges on a few threads (a random bracket walk per thread) and queries."""
    starts, ends, tids = [], [], []
    for tid in range(draw(st.integers(1, 3))):
        t, stack = 0, []
        for _ in range(draw(st.integers(0, 30))):
            t += draw(st.integers(1, 5))
            if stack and draw(st.booleans()):
                starts.append(stack.pop())
                ends.append(t)
                tids.append(tid)
            else:
                stack.append(t)
        while stack:
            t += draw(st.integers(1, 5))
            starts.append(stack.pop())
            ends.append(t)
            tids.append(tid)
    qa = draw(st.lists(st.integers(0, 160), min_size=1, max_size=20))
    qlen = draw(st.lists(st.integers(0, 20), min_size=len(qa), max_size=len(qa)))
    qt = draw(st.lists(st.integers(0, 2), min_size=len(qa), max_size=len(qa)))
    return (np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), np.array(tids, dtype=np.int64),
            np.array(qa, dtype=np.int64), np.array(qa, dtype=np.int64) + np.array(qlen, dtype=np.int64),
            np.array(qt, dtype=np.int64))


@settings(max_examples=200, deadline=None)
@given(nested_ranges())
def test_innermost_enclosing_matches_brute_force(data):
    rs, re_, rt, qs, qe, qt = data
    got = innermost_enclosing(qs, qe, qt, rs, re_, rt)
    for i in range(qs.size):  # brute force: among enclosing ranges of the thread, the latest start
        ok = np.flatnonzero((rt == qt[i]) & (rs <= qs[i]) & (re_ >= qe[i]))
        want = ok[np.argmax(rs[ok])] if ok.size else -1
        assert got[i] == want
    depth = nesting_depth(rs, re_, rt)
    for i in range(rs.size):  # depth = number of ranges of the thread strictly around it
        around = (rt == rt[i]) & (rs <= rs[i]) & (re_ >= re_[i]) & (np.arange(rs.size) != i)
        assert depth[i] == around.sum()


# --- real traces ------------------------------------------------------------------------------

PIPIT = NSYS_TRACES / "pipit_perlmutter-cloverleaf-cuda.sqlite"


def test_pipit_cloverleaf_1312_blocking_syncs_with_their_idle():
    t = load_traces([PIPIT]).ranks[0]
    df = blocking_syncs(t)
    assert len(df) == 1312
    assert (df["api"] == "cudaDeviceSynchronize").all() and df["confirmed"].all()
    # nsys labels these "Event Sync"; classification goes by API name
    se_names = set(t.names_of(t.sync_events["name_id"].to_numpy()))
    assert se_names == {"Event Sync"}
    # Independent check of the idle: one stream, one thread, each kernel is followed by a
    # device sync, so the idle after a sync is simply (next activity start - sync end), for the
    # syncs that found the GPU still busy when called (the others blocked nothing).
    starts = np.sort(t.gpu["start_ns"].to_numpy())
    end, begin = df["end_ns"].to_numpy(), df["start_ns"].to_numpy()
    j = np.searchsorted(starts, end)
    has_next = j < starts.size
    # queued work at the call: an activity launched (runtime call, joined on correlation) before
    # the sync began that ends after it
    launched = t.gpu[["correlation", "end_ns"]].merge(
        t.runtime[["correlation", "start_ns"]].rename(columns={"start_ns": "launch_ns"}), on="correlation")
    launched = launched.sort_values("launch_ns")
    latest_end = np.maximum.accumulate(launched["end_ns"].to_numpy())
    k = np.searchsorted(launched["launch_ns"].to_numpy(), begin) - 1
    busy_at_call = (k >= 0) & (latest_end[np.clip(k, 0, None)] > begin)
    want = np.where(has_next & busy_at_call, starts[np.clip(j, 0, starts.size - 1)] - end, 0)
    got = df["gpu_idle_ns"].to_numpy()
    assert (got == want).all()
    assert int((~busy_at_call).sum()) == 2 and int(got.sum()) == int(want.sum()) == 22_346_307
    # the 279 synchronous cudaMemcpy calls never waited for other GPU work: they are copies, not syncs
    rt_names = pd.Series(t.names_of(t.runtime["name_id"].to_numpy()))
    assert (rt_names == "cudaMemcpy").sum() == 279
    assert not (df["kind"] == "memcpy").any()


def test_kineto_item_on_cpu_is_not_a_sync_and_copy_syncs_name_their_op():
    t = load_traces([HTA_TRACES / "negative_queue_rank0.json.gz"]).ranks[0]
    df = blocking_syncs(t)
    counts = df["api"].value_counts().to_dict()
    assert counts == {"cudaStreamSynchronize": 75, "cudaDeviceSynchronize": 1}
    names = pd.Series(t.names_of(t.host_ops["name_id"].to_numpy()))
    assert (names == "aten::item").sum() == 945  # mostly on CPU tensors: no sync inside, not reported
    stream_syncs = df[df["api"] == "cudaStreamSynchronize"]
    assert (stream_syncs["caller"] == "aten::copy_").all()
    assert (stream_syncs["annotation"] != "").all()  # record_function ranges around them


def test_nsys_stream_syncs_confirmed_with_stream():
    ts = load_traces([NSYS_TRACES / "mfu_2gpu_after.sqlite"])
    for t in ts:
        df = blocking_syncs(t)
        assert len(df) == 15 and df["confirmed"].all()
        assert (df["stream"] >= 0).all()
        assert df["caller"].str.startswith("aten::").all()


@pytest.mark.parametrize("trace", ["df_index_resolver.json.gz", "trace_diff_test.json.gz"])
def test_stream_wait_events_in_real_traces_are_never_reported(trace):
    t = next(iter(load_traces([HTA_TRACES / trace])))
    rt_names = pd.Series(t.names_of(t.runtime["name_id"].to_numpy()))
    assert (rt_names == "cudaStreamWaitEvent").sum() > 0
    assert "cudaStreamWaitEvent" not in set(blocking_syncs(t)["api"])
