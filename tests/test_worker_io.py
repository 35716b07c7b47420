"""How the per-rank stage reads files and survives its workers: mapped reads, and a killed worker
named in one line instead of a traceback."""

from __future__ import annotations

import gzip
import mmap
import os
import signal
from pathlib import Path

import pytest

from analyzers.errors import BadInputError, WorkerDiedError
from analyzers.io.kineto import load_kineto
from analyzers.io.load import load_file
from analyzers.io.parallel import run_files
from analyzers.io.trace_bytes import read_bytes
from analyzers.timeline.classify import default_rules

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "sample_traces" / "ag-gemm" / "host-sync"


def _plain_copy(tmp_path: Path, name: str = "rank0.json") -> Path:
    out = tmp_path / name
    out.write_bytes(gzip.decompress((RUN / "rank0.json.gz").read_bytes()))
    return out


@pytest.fixture()
def worker_mapping(monkeypatch):
    """This process maps files as a pool worker does (trace_bytes.map_files_here)."""
    from analyzers.io import trace_bytes

    monkeypatch.setattr(trace_bytes, "_map_files", True)


def test_the_calling_process_reads_files_never_maps_them(tmp_path):
    """A file cut short under a mapping kills the process with SIGBUS before it can say a word: the
    calling process (--jobs 1, a single file) reads its files instead."""
    plain = _plain_copy(tmp_path)
    data = read_bytes(plain)
    assert not isinstance(data, mmap.mmap) and data == plain.read_bytes()


def _mapped_here(path: Path, rank: int | None):
    from analyzers.io.trace_bytes import read_bytes as read

    traces = load_file(path, rank)
    traces[0].notes.append(f"mapped: {isinstance(read(path), mmap.mmap)}")
    return traces


def test_pool_workers_map_their_files(tmp_path):
    paths = [_plain_copy(tmp_path, "rank0.json"), _plain_copy(tmp_path, "rank1.json")]
    done = run_files(paths, None, default_rules(), _mapped_here, jobs=2)
    assert [d.traces[0].notes[-1] for d in done] == ["mapped: True"] * 2


def test_a_file_cut_short_while_read_in_the_calling_process_is_one_line(tmp_path):
    """--jobs 1: the file shrinks between the size check and the read; the read gets what is there, and
    the loader refuses it in one line (no SIGBUS, no traceback)."""
    plain = _plain_copy(tmp_path)
    full = plain.read_bytes()
    real_fstat = os.fstat

    def shrink_after_stat(fd):
        st = real_fstat(fd)
        with open(plain, "r+b") as fh:  # another program truncates it now
            fh.truncate(len(full) // 3)
        return st

    import analyzers.io.trace_bytes as tb

    tb_os = tb.os
    try:
        tb.os = type("os", (), {"fstat": staticmethod(shrink_after_stat), "name": os.name})
        with pytest.raises(BadInputError) as err:
            load_file(plain)
    finally:
        tb.os = tb_os
    assert str(plain) in str(err.value) and "truncated JSON" in str(err.value) and "\n" not in str(err.value)


def test_a_plain_trace_is_mapped_and_reads_as_its_bytes(tmp_path, worker_mapping):
    plain = _plain_copy(tmp_path)
    data = read_bytes(plain)
    assert isinstance(data, mmap.mmap) and data[:] == plain.read_bytes()
    unpacked = read_bytes(RUN / "rank0.json.gz")  # gzip: unpacked into memory
    assert not isinstance(unpacked, mmap.mmap) and bytes(unpacked) == plain.read_bytes()
    # the same tables whichever way the bytes came
    mapped, packed = load_kineto(plain), load_kineto(RUN / "rank0.json.gz")
    for table in ("gpu", "runtime", "host_ops", "sync_events"):
        assert getattr(mapped, table).equals(getattr(packed, table)), table


def test_what_cannot_be_mapped_is_read(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert read_bytes(empty) == b""
    with pytest.raises(BadInputError, match="empty file"):
        load_kineto(empty)
    blank = tmp_path / "blank.json"
    blank.write_bytes(b" \n" * 5000)  # whitespace past the head that is checked first
    with pytest.raises(BadInputError, match="empty file"):
        load_kineto(blank)


def test_a_file_system_that_refuses_mapping_is_read(tmp_path, monkeypatch, worker_mapping):
    plain = _plain_copy(tmp_path)

    def refuse(*args, **kwargs):
        raise OSError(19, "No such device")  # what mmap answers on a file system without it

    monkeypatch.setattr(mmap, "mmap", refuse)
    data = read_bytes(plain)
    assert isinstance(data, (bytes, bytearray)) and data == plain.read_bytes()


def _dies_on_rank1(path: Path, rank: int | None):
    """A loader whose worker is killed on rank1's file (what the OOM killer or a SIGBUS does)."""
    if path.name.startswith("rank1"):
        os.kill(os.getpid(), signal.SIGKILL)
    return load_file(path, rank)


def test_a_killed_worker_names_the_file_it_was_reading(tmp_path):
    paths = sorted(RUN.glob("rank*.json.gz"))
    rules = default_rules()
    assert len(run_files(paths, None, rules, load_file, jobs=2)) == 2  # the same files load when no worker dies
    with pytest.raises(WorkerDiedError) as err:
        run_files(paths, None, rules, _dies_on_rank1, jobs=2)
    assert str(paths[1]) in err.value.path
    assert "worker process died" in str(err.value) and "\n" not in str(err.value)
    one = WorkerDiedError(str(paths[1]))
    assert one.problem.startswith("a worker process died while reading this file")
    assert isinstance(one, BadInputError)  # the CLI's one line and exit code 3


def _noting_last_file(path: Path, rank: int | None):
    """load_file, noting in the trace whether its worker was told this is its last file."""
    from analyzers.io import worker_memory

    traces = load_file(path, rank)
    traces[0].notes.append(f"hold everything: {worker_memory._hold_everything}")
    return traces


def test_each_worker_leaves_only_its_last_file_unfreed(tmp_path):
    """The pool hands out files in order, so the last one per worker is known when it starts: only
    then are its decoded objects left for the worker's exit (worker_memory.last_file_follows)."""
    names = []
    for i in range(5):
        (tmp_path / f"rank{i}.json.gz").write_bytes((RUN / f"rank{i % 2}.json.gz").read_bytes())
        names.append(tmp_path / f"rank{i}.json.gz")
    done = run_files(names, None, default_rules(), _noting_last_file, jobs=2)
    noted = [d.traces[0].notes[-1] for d in done]
    assert noted == ["hold everything: False"] * 3 + ["hold everything: True"] * 2


def test_the_caller_runs_meanwhile_once_while_its_workers_parse(tmp_path):
    """run_files' `meanwhile` (analyze's imports of its own stages) runs once, in the caller, after the pool's
    workers are forked (so they never import what it imports) and before the first result is taken; the
    results are those of a run without it."""
    import multiprocessing

    paths = [_plain_copy(tmp_path, "rank0.json"), _plain_copy(tmp_path, "rank1.json")]
    seen: list[tuple[int, int]] = []
    done = run_files(paths, None, default_rules(), load_file, jobs=2,
                     meanwhile=lambda: seen.append((os.getpid(), len(multiprocessing.active_children()))))
    assert seen == [(os.getpid(), 2)]
    plain = run_files(paths, None, default_rules(), load_file, jobs=2)
    assert [d.traces[0].gpu.equals(p.traces[0].gpu) for d, p in zip(done, plain, strict=True)] == [True, True]
    inline: list[int] = []
    run_files(paths[:1], None, default_rules(), load_file, jobs=1, meanwhile=lambda: inline.append(1))
    assert inline == [1]  # parsed in the caller: run first


def test_analyze_forks_its_workers_without_the_callers_own_stages():
    """What the per-rank stage needs imports none of the modules only the caller runs (collectives table,
    set graph, pricing): analyze imports those while the workers parse (report.import_caller_stages)."""
    import subprocess
    import sys

    code = ("import sys, analyzers.report as r; "
            "late = ['analyzers.crossrank.collective_table', 'analyzers.crossrank.stragglers', "
            "'analyzers.graph.analysis', 'analyzers.graph.pricing', 'analyzers.graph.set_graph']; "
            "before = [m for m in late if m in sys.modules]; r.import_caller_stages(); "
            "print(before, all(m in sys.modules for m in late))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split() == ["[]", "True"]
