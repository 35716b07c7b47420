"""The `overlapscope analyze` command: formats, gate, exit codes, one-line errors."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyzers.errors import BadInputError
from analyzers.timeline.classify import classify_names, load_rules

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "overlapscope", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_json_output_carries_every_metric(hta_dir):
    r = cli("analyze", str(hta_dir / "trace_filter_sampled_rank-0.json.gz"),
            str(hta_dir / "trace_filter_sampled_rank-1.json.gz"), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["world_size"] == 128 and [x["rank"] for x in doc["ranks"]] == [0, 1]
    r0 = doc["ranks"][0]
    for key in ("comm_ns", "compute_ns", "overlap_ns", "overlap_ratio", "exposed_comm_ns",
                "hidden_fraction_of_min", "span_ns", "idle_ns", "streams", "stream_pair_overlap_ns",
                "iteration_summary", "compute_compute_overlap_ns"):
        assert key in r0
    assert "iterations" not in r0  # per-iteration rows: analyze --tables (tests/test_write_tables.py)
    assert abs(r0["overlap_ratio"] * 100 - 14.95) < 0.1
    assert r0["exposed_comm_ns"] == r0["comm_ns"] - r0["overlap_ns"]


def test_table_md_csv(hta_dir):
    f = str(hta_dir / "nccl_data.json.gz")
    table = cli("analyze", f)
    assert table.returncode == 0 and "15.6%" in table.stdout and "overlap" in table.stdout
    md = cli("analyze", f, "--format", "md", "--like-hta")
    assert md.returncode == 0 and "| 0 |" in md.stdout and "14.3%" in md.stdout
    rows = list(csv.DictReader(io.StringIO(cli("analyze", f, "--format", "csv").stdout)))
    assert len(rows) == 1 and abs(float(rows[0]["overlap_ratio"]) - 0.1561) < 0.001


def test_collectives_section_in_every_format_and_from_the_cache(hta_dir, tmp_path):
    """nccl_data (A100, 21 sized NCCL kernels): the section in the table, Markdown and JSON, the same from a
    report-cache hit; --link-gbps changes the fraction of the link."""
    f = str(hta_dir / "nccl_data.json.gz")
    env_cache = {"OVERLAPSCOPE_CACHE_DIR": str(tmp_path / "cache")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "overlapscope", "analyze", f, *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, env={**os.environ, **env_cache})

    doc = json.loads(run("-f", "json").stdout)["collectives"]
    assert doc["n_rows"] == 21 and doc["link_gbps"] == 300.0 and {g["op"] for g in doc["groups"]} == {
        "AllReduce", "Broadcast"}
    table, hit = run(), run()
    assert "Collectives: size and bandwidth" in table.stdout and "link peak 300 GB/s" in table.stdout
    assert hit.stdout == table.stdout
    md = run("-f", "md", "--link-gbps", "150")
    assert "#### Collectives: size and bandwidth" in md.stdout and "(--link-gbps)" in md.stdout
    big = max(doc["groups"], key=lambda g: g["n"])
    assert f"{100 * big['busbw_median_gbps'] / 150:.1f}%" in md.stdout


def test_gate_exit_codes(hta_dir):
    f = str(hta_dir / "trace_diff_test.json.gz")  # 70.8 %
    assert cli("analyze", f, "--fail-under-overlap", "0.5", "-f", "csv").returncode == 0
    low = cli("analyze", f, "--fail-under-overlap", "80", "-f", "csv")
    assert low.returncode == 1 and "rank 1" in low.stderr and "gate failed" in low.stderr
    # all communication exposed (0 %): fails
    assert cli("analyze", str(hta_dir / "df_index_resolver.json.gz"), "--fail-under-overlap", "0.5",
               "-f", "csv").returncode == 1


def test_rank_without_comm_fails_gate_unless_allowed_and_shows_na(tmp_path):
    trace = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.0,
                              "dur": 5.0, "args": {"device": 0, "stream": 7, "correlation": 1}}]}
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(trace))
    # the gate measured nothing: it says so and fails, unless --allow-undefined
    r = cli("analyze", str(p), "--fail-under-overlap", "0.9")
    assert r.returncode == 1 and "n/a" in r.stdout and "overlap ratio undefined for rank 0" in r.stderr
    r = cli("analyze", str(p), "--fail-under-overlap", "0.9", "--allow-undefined")
    assert r.returncode == 0 and "n/a" in r.stdout and "overlap ratio undefined for rank 0" in r.stderr
    doc = json.loads(cli("analyze", str(p), "-f", "json").stdout)
    assert doc["ranks"][0]["overlap_ratio"] is None and doc["ranks"][0]["compute_ns"] == 5000


def test_bad_input_exit_3_one_line(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"traceEvents": [{"ph": "X", ')
    r = cli("analyze", str(bad))
    assert r.returncode == 3
    assert r.stderr.strip().count("\n") == 0 and str(bad) in r.stderr and "Traceback" not in r.stderr
    missing = cli("analyze", str(tmp_path / "nope.json"))
    assert missing.returncode == 3 and "no such file" in missing.stderr


def test_usage_errors_exit_2(hta_dir):
    assert cli("analyze", "--no-such-flag").returncode == 2
    assert cli("analyze", str(hta_dir / "nccl_data.json.gz"), "--steps", "x-y").returncode == 2
    assert cli().returncode in (0, 2)  # no command: help


def test_help_explains():
    r = cli("analyze", "--help")
    assert r.returncode == 0 and "--fail-under-overlap" in r.stdout and "--like-hta" in r.stdout


def test_user_rules_override_and_extend(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\npattern = "^my_allgather"\ncategory = "comm"\n'
                     '[[rule]]\npattern = "CatArrayBatchedCopy"\ncategory = "copy"\n')
    r = load_rules(rules)
    got = classify_names(["my_allgather_kernel", "CatArrayBatchedCopy<...>", "ncclDevKernel_SendRecv", "gemm"], r)
    assert got.tolist() == ["comm", "copy", "comm", "compute"]
    replace = tmp_path / "only.toml"
    replace.write_text('replace_defaults = true\n[[rule]]\npattern = "gemm"\ncategory = "compute"\n')
    assert classify_names(["ncclKernel_x", "gemm"], load_rules(replace)).tolist() == ["other", "compute"]
    broken = tmp_path / "broken.toml"
    broken.write_text('[[rule]]\npattern = "("\ncategory = "comm"\n')
    with pytest.raises(BadInputError, match="rule #1"):
        load_rules(broken)
    assert classify_names(["foo_ag_kernel"], load_rules(comm_names=["foo_ag"])).tolist() == ["comm"]


def test_default_rules_cover_nccl_symm_mem_and_peer_copies():
    names = ["ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
             "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
             "void c10d::symmetric_memory::barrier_kernel(unsigned int**, unsigned long, int, int)",
             "Memcpy PtoP (Device -> Device)", "Memcpy DtoD (Device -> Device)", "Memset (Device)",
             "void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>",
             "at::cuda::(anonymous namespace)::spin_kernel(long)"]
    assert classify_names(names, load_rules()).tolist() == [
        "comm", "comm", "comm", "comm", "copy", "memset", "compute", "other"]


EXIT_SCRIPT = """
import atexit, sys, threading, time
from overlapscope.cli import exit_after_command
atexit.register(lambda: open(sys.argv[1], "w").write("atexit ran"))
sys.stdout.write("x" * 200_000)  # more than any buffer: must all arrive
sys.stderr.write("done")
if sys.argv[2] == "thread":  # a thread still working: the normal exit waits for it
    threading.Thread(target=lambda: (time.sleep(0.3), open(sys.argv[1] + ".thread", "w").write("ok"))).start()
exit_after_command(int(sys.argv[3]))
"""


@pytest.mark.parametrize("thread", ["none", "thread"])
@pytest.mark.parametrize("code", [0, 3])
def test_exit_after_command_flushes_runs_atexit_and_keeps_the_code(tmp_path, thread, code):
    marker = tmp_path / "marker"
    r = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(marker), thread, str(code)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == code
    assert r.stdout == "x" * 200_000 and r.stderr == "done"
    assert marker.read_text() == "atexit ran"
    assert (tmp_path / "marker.thread").exists() == (thread == "thread")


@pytest.mark.parametrize("env", [{}, {"FORCE_COLOR": "1"}, {"FORCE_COLOR": ""}, {"TTY_COMPATIBLE": "1"},
                                 {"TTY_COMPATIBLE": "0"}, {"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}])
def test_lazy_console_answers_is_terminal_as_rich_does(monkeypatch, env):
    """The consoles are made on first use; whether they are a terminal (progress bars, table width)
    is rich's answer, which a piped stream without TTY_COMPATIBLE / FORCE_COLOR gets without rich."""
    from rich.console import Console

    from overlapscope.common import LazyConsole

    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for stderr in (False, True):
        lazy = LazyConsole(stderr=stderr)
        assert lazy.is_terminal == Console(stderr=stderr).is_terminal
        # rich is asked only where the environment could make it say yes (the streams here are no TTY)
        assert (lazy._console is not None) == ("FORCE_COLOR" in env or env.get("TTY_COMPATIBLE") == "1")


def test_imports_without_gc_restores_the_collector_and_freezes_what_was_imported():
    """The CLI imports its stack with the cyclic GC off (overlapscope/stack_imports.py), then freezes it."""
    import gc

    from overlapscope.stack_imports import imports_without_gc

    was_enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with imports_without_gc():
                assert not gc.isenabled()
                made = [[] for _ in range(10)]
            assert gc.isenabled() is enabled
            assert gc.get_freeze_count() >= frozen + len(made)  # what existed is in the permanent generation
        with pytest.raises(ValueError), imports_without_gc():
            raise ValueError("an import that fails")
        assert gc.isenabled() is False  # restored as it was (disabled by the loop's last round)
    finally:
        gc.unfreeze()
        (gc.enable if was_enabled else gc.disable)()


_NUMPY_THREADS = """
import os, sys
from overlapscope.stack_imports import single_thread_blas
def threads():  # native threads too (OpenBLAS's are not Python threads); -1 where the OS does not list them
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else -1
before = threads()
with (single_thread_blas() if sys.argv[1] == "pinned" else open(os.devnull)):
    seen = os.environ.get("OPENBLAS_NUM_THREADS")
    import numpy
print(threads() - before if before >= 0 else -1, seen, os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def test_numpy_loads_openblas_without_server_threads_unless_the_user_says():
    """analysis_stack_imports keeps OpenBLAS to one thread (nothing here calls BLAS; its server threads
    only spin), then restores the environment; a user's own setting stands. Threads are counted where
    the OS lists a process's threads (/proc: Linux, CI); the settings are checked everywhere."""
    def run(mode: str, **env: str) -> tuple[int, str, str]:
        clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
        out = subprocess.run([sys.executable, "-c", _NUMPY_THREADS, mode], capture_output=True, text=True,
                             cwd=ROOT, env={**clean, **env}, check=True).stdout.split()
        return int(out[0]), out[1], out[2]

    made, during, after = run("pinned")
    assert (during, after) == ("1", "None")  # numpy loads with one thread; no setting left for child processes
    assert run("pinned", OPENBLAS_NUM_THREADS="2")[1:] == ("2", "2")  # the user's choice, untouched
    assert run("pinned", OMP_NUM_THREADS="3")[1:] == ("None", "None")  # OpenBLAS reads this one itself
    if made >= 0:  # the OS lists threads
        assert made == 0  # no server thread
        if (os.cpu_count() or 1) > 1:
            assert run("plain")[0] > 0  # what numpy does on its own here: the threads exist to be saved
            assert run("pinned", OPENBLAS_NUM_THREADS="2")[0] == 1
