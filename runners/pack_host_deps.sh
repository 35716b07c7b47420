#!/bin/bash
# Unpack the analyzer's pure-Python dependencies (and msgspec for CPython 3.12) into .pydeps/,
# so that `overlapscope run/sweep` can analyze on a GPU host that has torch, numpy and pandas
# but no network. Carry .pydeps with the working tree and put it on PYTHONPATH there.
#
# usage (repo root, on a machine with an index):  bash runners/pack_host_deps.sh [PYTHON_VERSION]
set -eu
PYV="${1:-3.12}"
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip download -q -d "$tmp" --only-binary=:all: --python-version "$PYV" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    msgspec typer rich sqlite-utils platformdirs
rm -rf .pydeps && mkdir .pydeps
for whl in "$tmp"/*.whl; do
    case "$(basename "$whl")" in pip-*) continue ;; esac
    python3 -m zipfile -e "$whl" .pydeps/
done
du -sh .pydeps
