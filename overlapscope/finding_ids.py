"""The finding ids in catalogue order, for `--fail-on`'s help and checks without importing the
analysis stack (so `--help` and report-cache hits start fast). tests/test_catalogue.py checks
that this list equals the registry's (analyzers/findings/registry.py)."""

FINDING_IDS = (
    "host-blocking-sync",
    "serialized-streams",
    "cross-rank-order-mismatch",
    "front-loaded-collectives",
    "copy-kernels-block-overlap",
    "launch-bound-gaps",
    "comm-slowed-by-overlap",
    "comm-starved-by-compute",
    "late-peer",
)
