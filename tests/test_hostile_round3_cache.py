"""Round three of hostile input, the caches: keyed by the files' bytes (a writer that restores the size
and the mtime does not get the old answer), every entry checked (a flipped bit is detected and the
answer made again, with a note), the nsys cache (unpacked .sqlite.gz, exported .nsys-rep) never reused
under --no-cache, listed and emptied by `cache info` / `cache clear`, and bounded."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
from pathlib import Path

import pytest

from analyzers.io import content_key, nsys_cache, parse_cache, report_cache
from analyzers.io.environment import ENV_CACHE_DIR
from analyzers.io.load import load_traces
from analyzers.io.nsys_gz import gunzip_to_cache
from overlapscope.cli import main
from tests.trace_files import GEMM, NCCL_ALLREDUCE, Kineto

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
NSYS_A = SAMPLES / "ag-gemm-nsys" / "sync-in-loop" / "rank0.sqlite"
NSYS_B = SAMPLES / "ag-gemm-nsys" / "sync-before-loop" / "rank0.sqlite"


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(ENV_CACHE_DIR, str(folder))
    return folder


def _two_kernels(path: Path, gemm_start: int) -> Path:
    """A comm kernel [100, 200) µs and a GEMM [gemm_start, gemm_start + 100): overlap (200 - start) / 100.
    A two-digit start keeps the file's size whatever the start."""
    assert 10 <= gemm_start <= 99 or 100 <= gemm_start <= 199
    k = Kineto(rank=0, world_size=1)
    k.kernel(100, 200, NCCL_ALLREDUCE, launch=90, stream=8)
    k.kernel(gemm_start, gemm_start + 100, GEMM, launch=90)
    return k.write(path)


def _analyze(capsys, *args: str) -> tuple[int, dict, str]:
    rc = main(["analyze", *map(str, args), "-f", "json"])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if out.out.strip() else {}), out.err


def _rewrite_keeping_stat(path: Path, write) -> None:
    """Change a file's bytes, then put its size (checked) and its atime and mtime back."""
    st = path.stat()
    write()
    assert path.stat().st_size == st.st_size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("remembered", [True, False], ids=["digest-remembered", "racy-hashed-again"])
def test_contents_changed_with_size_and_mtime_restored_get_a_new_answer(cache, tmp_path, capsys, monkeypatch,
                                                                        remembered):
    if remembered:  # the digest is kept per stat at once (else only for files whose ctime is 2 s old)
        monkeypatch.setattr(content_key, "RACY_NS", 0)
    trace = _two_kernels(tmp_path / "rank0.json", 150)
    rc, first, _ = _analyze(capsys, trace)
    assert rc == 0 and first["ranks"][0]["overlap_ratio"] == pytest.approx(0.5)
    assert report_cache.info().entries == 1 and parse_cache.info().entries == 1
    _rewrite_keeping_stat(trace, lambda: _two_kernels(trace, 167))
    rc, second, _ = _analyze(capsys, trace)
    assert rc == 0 and second["ranks"][0]["overlap_ratio"] == pytest.approx(0.33)
    # the parse cache alone (another option: the report cache misses) reads the new bytes too
    rc, third, _ = _analyze(capsys, trace, "--no-align")
    assert third["ranks"][0]["overlap_ratio"] == pytest.approx(0.33)
    assert len(load_traces([trace], cache=True).ranks[0].gpu) == 2


def test_a_touched_file_with_the_same_bytes_still_hits(cache, tmp_path, capsys):
    trace = _two_kernels(tmp_path / "rank0.json", 150)
    _analyze(capsys, trace)
    os.utime(trace, ns=(1, 2))
    key = report_cache.ReportKey.of([str(trace)], {})
    assert key == report_cache.ReportKey.of([str(trace)], {})
    rc, doc, _ = _analyze(capsys, trace)
    assert rc == 0 and report_cache.info().entries == 1


def _flip(path: Path, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))


def test_every_flipped_bit_in_a_parse_cache_entry_is_detected(cache, tmp_path):
    src = tmp_path / "rank0.json.gz"
    shutil.copy(SAMPLES / "ag-gemm" / "host-sync" / "rank0.json.gz", src)
    fresh = load_traces([src], cache=True).ranks[0]
    entry = parse_cache.FileKey.of(src, None).folder()
    pristine = tmp_path / "pristine"
    shutil.copytree(entry, pristine)
    files = sorted(p.name for p in pristine.iterdir())
    rng = random.Random(44)
    for trial in range(300):
        name = files[trial % len(files)]
        size = (pristine / name).stat().st_size
        shutil.rmtree(entry, ignore_errors=True)
        shutil.copytree(pristine, entry)
        _flip(entry / name, rng.randrange(size * 8))
        traces, problem = parse_cache.lookup(src, None)
        assert traces is None and problem, f"a flipped bit in {name} went unnoticed"
        assert not entry.exists()  # removed, never trusted
    # through the loader: parsed again, the same tables, and a note that says why
    shutil.rmtree(entry, ignore_errors=True)
    shutil.copytree(pristine, entry)
    _flip(entry / "0.gpu.parquet", 8 * 200 + 3)
    again = load_traces([src], cache=True).ranks[0]
    assert any("parse cache's entry for this file was damaged" in n for n in again.notes)
    assert again.gpu.equals(fresh.gpu)
    assert parse_cache.get(src, None) is not None  # rewritten whole
    assert not any("damaged" in n for n in parse_cache.get(src, None)[0].notes)


def test_a_flipped_bit_in_a_report_cache_entry_is_detected(cache, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "ag-gemm" / "host-sync", run)
    rc, fresh, _ = _analyze(capsys, run)
    (entry,) = [p for p in (cache / "reports").iterdir() if not p.name.startswith(".")]
    pristine = tmp_path / "pristine"
    shutil.copytree(entry, pristine)
    rng = random.Random(3)
    key = report_cache.ReportKey.of([str(run)], _settings_of_a_plain_analyze())
    for trial in range(200):
        name = (report_cache.DOC, report_cache.HEADER)[trial % 2]
        shutil.rmtree(entry, ignore_errors=True)
        shutil.copytree(pristine, entry)
        _flip(entry / name, rng.randrange((entry / name).stat().st_size * 8))
        doc, problem = report_cache.lookup(key)
        assert doc is None and problem, f"a flipped bit in {name} went unnoticed"
    shutil.rmtree(entry, ignore_errors=True)
    shutil.copytree(pristine, entry)
    _flip(entry / report_cache.DOC, 8 * 100)
    rc, again, err = _analyze(capsys, run)
    assert rc == 0 and again == fresh and "report cache's entry was damaged" in err


def _settings_of_a_plain_analyze() -> dict:
    """The settings `analyze RUN -f json` keys its entry by (read back from the entry it wrote)."""
    (entry,) = [p for p in report_cache.cache_root().iterdir() if not p.name.startswith(".")]
    header = json.loads((entry / report_cache.HEADER).read_text())
    return json.loads(json.loads(header["key"])["settings"])


def _gz(src: Path, dst: Path) -> Path:
    dst.write_bytes(gzip.compress(src.read_bytes(), mtime=0))
    return dst


def test_the_unpacked_sqlite_gz_follows_the_file_no_cache_and_cache_clear(cache, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    packed = _gz(NSYS_A, run / "rank0.sqlite.gz")
    rc, a, _ = _analyze(capsys, packed)
    assert rc == 0 and nsys_cache.info().entries == 1
    assert main(["cache", "info"]) == 0 and "nsys cache" in capsys.readouterr().out
    (unpacked,) = [p for p in nsys_cache.cache_dir().iterdir() if p.suffix == ".sqlite"]
    before = unpacked.stat().st_ino, unpacked.stat().st_mtime_ns
    # --no-cache: unpacked again, not reused
    rc, a2, _ = _analyze(capsys, packed, "--no-cache")
    assert a2["ranks"] == a["ranks"]
    assert (unpacked.stat().st_ino, unpacked.stat().st_mtime_ns) != before
    # other contents, stat put back: the other file's answer, with and without the caches
    b_packed = _gz(NSYS_B, tmp_path / "b.sqlite.gz")
    st = packed.stat()
    shutil.copy(b_packed, packed)
    os.utime(packed, ns=(st.st_atime_ns, st.st_mtime_ns))
    rc, b, _ = _analyze(capsys, b_packed)
    for args in ((packed,), (packed, "--no-cache")):
        rc, got, _ = _analyze(capsys, *args)
        assert rc == 0 and got["ranks"][0]["overlap_ratio"] == b["ranks"][0]["overlap_ratio"]
        assert got["ranks"][0]["comm_ns"] == b["ranks"][0]["comm_ns"] != a["ranks"][0]["comm_ns"]
    # cache clear empties the nsys cache too
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "nsys cache: removed" in out and nsys_cache.info().entries == 0 and parse_cache.info().entries == 0


def test_a_damaged_unpacked_copy_is_unpacked_again(cache, tmp_path):
    packed = _gz(NSYS_A, tmp_path / "rank0.sqlite.gz")
    out = gunzip_to_cache(packed)
    _flip(out, 8 * 5000 + 1)
    again = gunzip_to_cache(packed)
    assert again.read_bytes() == NSYS_A.read_bytes()


def test_the_nsys_cache_is_bounded(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(nsys_cache, "MAX_ENTRIES", 2)
    made = [gunzip_to_cache(_gz(src, tmp_path / f"{i}-{src.parent.name}.sqlite.gz"))
            for i, src in enumerate([NSYS_A, NSYS_B, NSYS_A.with_name("rank1.sqlite")])]
    assert nsys_cache.info().entries == 2 and not made[0].exists() and made[2].exists()
    monkeypatch.setattr(nsys_cache, "MAX_ENTRIES", 64)
    monkeypatch.setattr(nsys_cache, "MAX_BYTES", NSYS_A.stat().st_size + 1)
    gunzip_to_cache(_gz(NSYS_B, tmp_path / "again.sqlite.gz"))
    assert nsys_cache.info().entries == 1


def test_the_parse_cache_is_bounded(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(parse_cache, "MAX_ENTRIES", 2)
    for i in range(4):
        load_traces([_two_kernels(tmp_path / f"rank0-{i}.json", 150 + i)], cache=True)
    assert parse_cache.info().entries == 2


def test_an_exported_nsys_rep_is_not_reused_under_no_cache(cache, tmp_path, monkeypatch):
    from analyzers.io.nsys_rep import nsys_rep_to_sqlite
    from tests.test_nsys import NVFUSER_REP, NVFUSER_SQLITE, fake_nsys

    calls = tmp_path / "calls.txt"
    script = fake_nsys(tmp_path, f"""echo "$@" >> {calls}
while [ $# -gt 0 ]; do [ "$1" = "--output" ] && out="$2"; shift; done
cp {NVFUSER_SQLITE} "$out"
""")
    monkeypatch.setenv("NSYS", str(script))
    rep = tmp_path / NVFUSER_REP.name
    shutil.copy2(NVFUSER_REP, rep)
    nsys_rep_to_sqlite(rep)
    nsys_rep_to_sqlite(rep)
    assert len(calls.read_text().splitlines()) == 1
    with nsys_cache.reuse_entries(False):
        nsys_rep_to_sqlite(rep)
    assert len(calls.read_text().splitlines()) == 2
    assert nsys_cache.info().entries == 1
