#!/bin/bash
# Unpack the analyzer's pure-Python dependencies (and msgspec for CPython 3.12) into .pydeps/,
# so that `overlapscope run/sweep` can analyze on a GPU host that has torch, numpy and pandas
# but no network. Carry .pydeps with the working tree and put it on PYTHONPATH there.
#
# With "thunder" as second argument it adds lightning-thunder 0.2.6 and the packages it needs that a
# torch image lacks (looseversion, lightning-utilities, optree, opt_einsum, dill; about 1.7 MB of
# wheels), for `overlapscope run thunder-fsdp` (the host's torch brings networkx, sympy and numpy).
#
# usage (repo root, on a machine with an index):  bash runners/pack_host_deps.sh [PYTHON_VERSION] [thunder]
set -eu
PYV="${1:-3.12}"
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
pip download -q -d "$tmp" --only-binary=:all: --python-version "$PYV" "${PLATFORMS[@]}" \
    msgspec typer rich sqlite-utils platformdirs
if [[ "${2:-}" == thunder ]]; then  # --no-deps: thunder's own requirements would pull a CUDA torch
    pip download -q --no-deps -d "$tmp" --only-binary=:all: --python-version "$PYV" "${PLATFORMS[@]}" \
        lightning-thunder==0.2.6 looseversion lightning-utilities optree opt_einsum dill
fi
rm -rf .pydeps && mkdir .pydeps
for whl in "$tmp"/*.whl; do
    case "$(basename "$whl")" in pip-*) continue ;; esac
    python3 -m zipfile -e "$whl" .pydeps/
done
du -sh .pydeps
