"""`overlapscope cache info` / `cache clear`: the parse cache (analyzers.io.parse_cache), the
report cache (analyzers.io.report_cache), the nsys cache (analyzers.io.nsys_cache: exported
.nsys-rep reports and unpacked .sqlite.gz exports) and the remembered file digests the caches are
keyed by (analyzers.io.content_key)."""

from __future__ import annotations

import typer

from .common import out_console

cache_app = typer.Typer(
    name="cache",
    help="The caches in the user cache directory ($OVERLAPSCOPE_CACHE_DIR to move it), all keyed by the "
         "SHA-256 of each input file's bytes. The parse cache keeps parsed trace tables (Parquet) per file "
         "and loader version, so loading unchanged files again is fast. The report cache keeps finished "
         "`analyze` results per files, options and code version, so the same command on unchanged files "
         "answers at once. The nsys cache keeps the SQLite of exported .nsys-rep reports and unpacked "
         ".sqlite.gz exports. Every entry is checked against its checksum before use; a changed file, "
         "option or release is analyzed again; --no-cache uses none of them.",
    no_args_is_help=True,
)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _caches():
    from analyzers.io import content_key, nsys_cache, parse_cache, report_cache

    return (("parse cache", parse_cache), ("report cache", report_cache), ("nsys cache", nsys_cache),
            ("file digests", content_key))


@cache_app.command("info")
def cache_info() -> None:
    """Where the caches are and how much they hold."""
    for name, cache in _caches():
        info = cache.info()
        out_console.print(f"{name}: {info.folder}\nentries: {info.entries}\nsize: {_mb(info.bytes)}",
                          markup=False, highlight=False)


@cache_app.command("clear")
def cache_clear() -> None:
    """Delete every entry of every cache (the traces themselves are never touched)."""
    for name, cache in _caches():
        info = cache.clear()
        out_console.print(f"{name}: removed {info.entries} entries ({_mb(info.bytes)}) from {info.folder}",
                          markup=False, highlight=False)
