"""`overlapscope cache info` / `cache clear`: the parse cache (analyzers.io.parse_cache)."""

from __future__ import annotations

import typer

from analyzers.io import parse_cache

from .common import out_console

cache_app = typer.Typer(
    name="cache",
    help="The parse cache: parsed trace tables kept (as Parquet) in the user cache directory so that "
         "loading the same unchanged files again is fast. Entries are keyed by path, size, mtime and "
         "loader version; a changed file is parsed again.",
    no_args_is_help=True,
)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@cache_app.command("info")
def cache_info() -> None:
    """Where the parse cache is and how much it holds."""
    info = parse_cache.info()
    out_console.print(f"parse cache: {info.folder}\nentries: {info.entries}\nsize: {_mb(info.bytes)}",
                      markup=False, highlight=False)


@cache_app.command("clear")
def cache_clear() -> None:
    """Delete every entry of the parse cache (the traces themselves are never touched)."""
    info = parse_cache.clear()
    out_console.print(f"removed {info.entries} entries ({_mb(info.bytes)}) from {info.folder}",
                      markup=False, highlight=False)
