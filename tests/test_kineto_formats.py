"""Kineto loader edge formats: PyTorch <= 1.8 category names, epoch-scale fractional timestamps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzers.io.input_limits import InputLimitError
from analyzers.io.kineto import load_kineto
from analyzers.io.load import load_traces
from analyzers.overlap.metrics import rank_metrics

COMM = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
GEMM = "volta_sgemm_128x64_nn"


def _write(path: Path, events: list[dict], **top) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
    return path


def _old_format_events() -> list[dict]:
    """The shape of a PyTorch 1.8 Kineto trace (TensorBoard plugin samples): capitalised
    categories, string tids, integer epoch µs."""
    t0 = 1617073813683000
    return [
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#1", "pid": 9284, "tid": "9284",
         "ts": t0, "dur": 100, "args": {"External id": 1}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 9284, "tid": "9284",
         "ts": t0 + 1, "dur": 2, "args": {"cbid": 211, "correlation": 11, "external id": 1}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 9284, "tid": "9284",
         "ts": t0 + 3, "dur": 2, "args": {"cbid": 211, "correlation": 12, "external id": 1}},
        # compute 10..40 µs on stream 7, comm 30..60 µs on stream 13: 10 µs of overlap
        {"ph": "X", "cat": "Kernel", "name": GEMM, "pid": 0, "tid": "stream 7", "ts": t0 + 10, "dur": 30,
         "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 11, "external id": 1}},
        {"ph": "X", "cat": "Kernel", "name": COMM, "pid": 0, "tid": "stream 13", "ts": t0 + 30, "dur": 30,
         "args": {"queued": 0, "device": 0, "context": 1, "stream": 13, "correlation": 12, "external id": 1}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
         "ts": t0 + 70, "dur": 5, "args": {"device": 0, "stream": 7, "correlation": 13, "bytes": 4096}},
        {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7",
         "ts": t0 + 80, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 14, "bytes": 64}},
        {"ph": "i", "cat": "Kernel", "name": "instant, not a span", "pid": 0, "tid": "stream 7", "ts": t0 + 90},
    ]


def test_pytorch_1_8_categories_are_read(tmp_path):
    trace = load_kineto(_write(tmp_path / "old.json", _old_format_events()))
    assert not any("no GPU activity" in n for n in trace.notes)
    assert list(trace.gpu["kind"]) == ["kernel", "kernel", "memcpy", "memset"]
    assert list(trace.gpu["stream"]) == [7, 13, 7, 7]
    assert list(trace.gpu["bytes"]) == [-1, -1, 4096, 64]
    assert list(trace.runtime["correlation"]) == [11, 12]
    assert list(trace.host_ops["kind"]) == ["cpu_op"]
    assert trace.pid == 9284
    m = rank_metrics(load_traces([tmp_path / "old.json"]).ranks[0])
    # comm 30 µs, compute 30 µs, overlap 10 µs (by hand)
    assert (m.comm_ns, m.compute_ns, m.overlap_ns) == (30_000, 30_000, 10_000)
    assert abs(m.overlap_ratio - 1 / 3) < 1e-12


def test_lookalikes_keep_todays_behaviour(tmp_path):
    # Old-format trace without GPU activity: still the "no GPU activity" note, nothing invented.
    cpu_only = [e for e in _old_format_events() if e["cat"] in ("Operator", "Runtime")]
    trace = load_kineto(_write(tmp_path / "cpu.json", cpu_only))
    assert trace.gpu.empty and any("no GPU activity" in n for n in trace.notes)
    assert len(trace.runtime) == 2 and len(trace.host_ops) == 1
    # Categories that merely contain a known name are not taken for it.
    odd = [dict(e, cat=e["cat"] + "_launch") for e in _old_format_events()]
    trace = load_kineto(_write(tmp_path / "odd.json", odd))
    assert trace.gpu.empty and trace.runtime.empty and trace.host_ops.empty
    # Today's lower-case names load exactly as the capitalised ones.
    modern = [dict(e, cat={"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel",
                           "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}[e["cat"]])
              for e in _old_format_events()]
    a = load_kineto(_write(tmp_path / "modern.json", modern))
    b = load_kineto(_write(tmp_path / "old.json", _old_format_events()))
    for table in ("gpu", "runtime", "host_ops"):
        assert getattr(a, table).equals(getattr(b, table)), table


def test_epoch_scale_fractional_timestamps_are_exact(tmp_path):
    # 1.7e15 µs: a double is 0.25 µs apart there; the loader must keep every nanosecond.
    raw = ('{"traceEvents": ['
           '{"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 1700000000000000.123, '
           '"dur": 1.5, "args": {"device": 0, "stream": 7}},'
           '{"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 1700000000000001.999, '
           '"dur": 0.001, "args": {"device": 0, "stream": 7}},'
           '{"ph": "X", "cat": "kernel", "name": "k3", "pid": 0, "tid": 7, "ts": 1700000000000002, '
           '"dur": 2, "args": {"device": 0, "stream": 7}},'
           '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5, '
           '"ts": 1699999999999999.0005, "dur": 0.25, "args": {"correlation": 1}}'
           ']}')
    path = tmp_path / "epoch.json"
    path.write_text(raw)
    trace = load_kineto(path)
    assert list(trace.gpu["start_ns"]) == [1700000000000000123, 1700000000000001999, 1700000000000002000]
    assert list(trace.gpu["end_ns"]) == [1700000000000001623, 1700000000000002000, 1700000000000004000]
    # 0.0005 µs = 0.5 ns rounds half away from zero
    assert list(trace.runtime["start_ns"]) == [1699999999999999001]
    assert list(trace.runtime["end_ns"]) == [1699999999999999251]


def test_small_scale_timestamps_take_the_fast_path_exactly(tmp_path):
    # Since-boot µs (4.5e12, what current PyTorch writes) and integer epoch µs: read as doubles,
    # still exact to the nanosecond.
    events = [
        {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 4466930142299.748, "dur": 0.999,
         "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 4466930142301.001, "dur": 3,
         "args": {"device": 0, "stream": 7}},
    ]
    trace = load_kineto(_write(tmp_path / "boot.json", events))
    assert list(trace.gpu["start_ns"]) == [4466930142299748, 4466930142301001]
    assert list(trace.gpu["end_ns"]) == [4466930142300747, 4466930142304001]
    whole = [dict(e, ts=1617073813683556 + i) for i, e in enumerate(events)]
    trace = load_kineto(_write(tmp_path / "whole.json", whole))
    assert list(trace.gpu["start_ns"]) == [1617073813683556000, 1617073813683557000]


@pytest.mark.parametrize("ts", [5_000_000_000_000_000, 2**53 + 1, 10**20, -(2**63)])
def test_whole_timestamps_beyond_the_exact_range_are_refused_as_before(tmp_path, ts):
    # integer µs past the int64-ns clock (4e15 µs), past 2**53 or past int64 itself: the int fast
    # path steps aside and the double path refuses them with its message
    events = [{"ph": "X", "cat": "kernel", "name": "far", "pid": 0, "tid": 7, "ts": ts, "dur": 1,
               "args": {"device": 0, "stream": 7}}]
    with pytest.raises(InputLimitError, match="absurd timestamp"):
        load_kineto(_write(tmp_path / "far.json", events))


def test_whole_timestamps_beside_a_fraction_keep_every_nanosecond(tmp_path):
    # the runtime table's times are whole, one kernel's has a fraction: all go the exact way
    t0 = 1700000000000000
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5, "ts": t0, "dur": 1,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t0 + 2.001, "dur": 1,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]
    raw = json.dumps({"traceEvents": events}).replace(str(t0 + 2.001), "1700000000000002.001")
    path = tmp_path / "mixed.json"
    path.write_text(raw)
    trace = load_kineto(path)
    assert list(trace.runtime["start_ns"]) == [t0 * 1000]
    assert list(trace.gpu["start_ns"]) == [t0 * 1000 + 2001]


def _tables(trace) -> list:
    return [trace.gpu.to_dict("list"), trace.runtime.to_dict("list"), trace.host_ops.to_dict("list"),
            trace.sync_events.to_dict("list"), trace.pid, trace.meta]


def test_unknown_or_missing_phase_reads_the_same_complete_events(tmp_path):
    """The loader decodes by phase (only "X" events are read in full); a phase it does not know,
    or an event without one, sends the file to the any-phase decoder, which must give the same tables."""
    known = _old_format_events() + [{"ph": "s", "cat": "ac2g", "id": 1, "name": "flow", "pid": 0, "ts": 5},
                                    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]
    odd = known + [{"ph": "Z", "cat": "Kernel", "name": "odd", "pid": 0, "tid": 7, "ts": 1, "dur": 1},
                   {"cat": "Kernel", "name": "no phase", "pid": 0, "tid": 7, "ts": 2, "dur": 1}]
    fast = load_kineto(_write(tmp_path / "known.json", known))
    slow = load_kineto(_write(tmp_path / "odd.json", odd))
    assert len(fast.gpu) == 4
    assert _tables(slow)[:-1] == _tables(fast)[:-1]
    assert slow.meta["n_events"] == fast.meta["n_events"] + 2


def test_bundled_traces_use_the_by_phase_decoder():
    """Every phase and every complete event's category in the bundled Kineto traces is one the first,
    by-phase, known-category decoder knows (else every load would pay for a second, full decode)."""
    import gzip

    from analyzers.io.kineto_schema import KNOWN_CATEGORY_DECODER as DECODER

    repo = Path(__file__).resolve().parents[1]
    files = [*repo.glob("tests/data/public/hta/*.json.gz"), *repo.glob("sample_traces/*/*/rank?.json*")]
    assert len(files) >= 7
    for f in files:
        data = f.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        assert DECODER.decode(data).traceEvents, f


def test_file_is_read_into_one_buffer_or_none(tmp_path, monkeypatch):
    """A plain file is mapped: no copy of it is made. Where mapping is refused it is read unbuffered:
    a buffered read joins its buffered head to the rest, a second copy of the file. One is enough."""
    import gzip
    import mmap
    import tracemalloc

    from analyzers.io.trace_bytes import read_bytes

    text = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k" * 50, "ts": i, "dur": 1}
                                       for i in range(40_000)]}).encode()
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))

    def peak_of_reading() -> tuple[object, int]:
        tracemalloc.start()
        try:
            data = read_bytes(plain)
            return data, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    data, peak = peak_of_reading()  # the calling process reads (a mapping cut short would kill it unnamed)
    assert not isinstance(data, mmap.mmap) and data == text and peak < 1.5 * len(text), (peak, len(text))
    from analyzers.io import trace_bytes

    monkeypatch.setattr(trace_bytes, "_map_files", True)  # as in a pool worker
    data, peak = peak_of_reading()
    assert isinstance(data, mmap.mmap) and data[:] == text
    assert peak < len(text) / 10, (peak, len(text))  # mapped: nothing the size of the file allocated
    monkeypatch.setattr(mmap, "mmap", lambda *a, **k: (_ for _ in ()).throw(OSError(19, "No such device")))
    data, peak = peak_of_reading()
    assert data == text and peak < 1.5 * len(text), (peak, len(text))
    assert read_bytes(packed) == text


def test_a_category_kineto_does_not_write_takes_the_plain_decoder_and_reads_the_same(tmp_path):
    """Categories are decoded as one shared string each when they are Kineto's (KNOWN_CATEGORIES); a
    file with any other category on a complete event is decoded again with plain strings: the same
    tables, the foreign event left out as before."""
    import msgspec

    from analyzers.io.kineto_schema import KNOWN_CATEGORY_DECODER

    known = _old_format_events()
    foreign = known + [{"ph": "X", "cat": "my_tool_span", "name": "mine", "pid": 0, "tid": 7, "ts": 1, "dur": 1}]
    known_file, foreign_file = _write(tmp_path / "known.json", known), _write(tmp_path / "foreign.json", foreign)
    with pytest.raises(msgspec.ValidationError, match="cat"):
        KNOWN_CATEGORY_DECODER.decode(foreign_file.read_bytes())
    assert _tables(load_kineto(foreign_file))[:-1] == _tables(load_kineto(known_file))[:-1]
    events = [e for e in KNOWN_CATEGORY_DECODER.decode(known_file.read_bytes()).traceEvents if e.cat == "Runtime"]
    assert len(events) == 2 and events[0].cat is events[1].cat  # one string, not one per event
    assert type(events[0].dur) is int and events[0].dur is events[1].dur  # a small whole duration: shared


@pytest.mark.parametrize(("field", "digits", "said"), [
    ("ts", "9" * 400, "absurd timestamp"), ("ts", "-" + "9" * 400, "absurd timestamp"),
    ("dur", "9" * 400, "absurd duration"), ("dur", "-" + "9" * 400, "negative duration")])
def test_integers_past_any_double_are_refused_by_name(tmp_path, field, digits, said):
    """An integer of hundreds of digits is no double: it reads as the largest one of its sign, which
    the time checks name (not a conversion error)."""
    from analyzers.errors import BadInputError
    from analyzers.io.load import load_file

    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 5,
             "args": {"device": 0, "stream": 7}}
    text = json.dumps({"traceEvents": [event]}).replace(f'"{field}": {event[field]}', f'"{field}": {digits}')
    path = tmp_path / "rank0.json"
    path.write_text(text)
    with pytest.raises(BadInputError, match=said):
        load_file(path, None)


def test_known_categories_are_numbered_as_hashing_numbers_them():
    """The known-category decoder's categories are mapped by a table (KNOWN_CODE) and renumbered in
    first-seen order: the same positions, codes and categories as hashing plain strings gives."""
    import gzip

    import numpy as np

    from analyzers.io.kineto_schema import DECODER, KNOWN_CATEGORY_DECODER, complete_categories

    repo = Path(__file__).resolve().parents[1]
    for f in [repo / "tests/data/public/hta/df_index_resolver.json.gz",
              repo / "sample_traces/fsdp/zero3/rank0.json.gz"]:
        data = gzip.decompress(f.read_bytes())
        fast = complete_categories(KNOWN_CATEGORY_DECODER.decode(data).traceEvents, known=True)
        plain = complete_categories(DECODER.decode(data).traceEvents)
        assert len(fast[2]) > 3, f
        assert np.array_equal(fast[0], plain[0]) and np.array_equal(fast[1], plain[1]) and fast[2] == plain[2], f
