"""The one place findings are registered: which exist, in which order, and all their thresholds.

Adding a finding: write analyzers/findings/<id with underscores>.py with its ENTRY (catalogue
entry), its Params (thresholds with defaults and why) and detect(view, context) (or
detect_cross_rank(report)), add the module below, and its tests (fires / a look-alike stays silent);
tests/test_catalogue.py then asks for its README row and docs/findings.md section.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.findings import (
    comm_slowed_by_overlap,
    comm_starved_by_compute,
    copy_kernels_block_overlap,
    cross_rank_order_mismatch,
    front_loaded_collectives,
    host_blocking_sync,
    late_peer,
    launch_bound_gaps,
    serialized_streams,
)
from analyzers.findings.finding import CATALOGUE
from analyzers.findings.view import SharedParams

# Catalogue order: README's table, docs/findings.md, `analyze --fail-on` help.
FINDINGS = (
    host_blocking_sync,
    serialized_streams,
    cross_rank_order_mismatch,
    front_loaded_collectives,
    copy_kernels_block_overlap,
    launch_bound_gaps,
    comm_slowed_by_overlap,
    comm_starved_by_compute,
    late_peer,
)

# Run on each rank, in this order: detect(view, context).
RANK_FINDINGS = (
    host_blocking_sync,
    serialized_streams,
    front_loaded_collectives,
    copy_kernels_block_overlap,
    launch_bound_gaps,
    comm_slowed_by_overlap,
    comm_starved_by_compute,
)

# The per-rank detectors whose answer depends on the cross-rank start shift (RankContext.eff_start:
# collectives measured from the last rank's arrival). The others' per-rank results, made beside the
# parse, stand whatever the other ranks did, so only these run again after the cross-rank stage
# (detect.detect_findings; tests/test_findings.py checks the others ignore the shift).
START_SHIFT_FINDINGS = (comm_slowed_by_overlap,)

# Need every rank (the cross-rank report), in this order: detect_cross_rank(report).
CROSS_RANK_FINDINGS = (late_peer, cross_rank_order_mismatch)

CATALOGUE.update({finding.ENTRY.id: finding.ENTRY for finding in FINDINGS})


@dataclass(frozen=True)
class FindingParams(
    comm_starved_by_compute.Params,
    comm_slowed_by_overlap.Params,
    launch_bound_gaps.Params,
    copy_kernels_block_overlap.Params,
    front_loaded_collectives.Params,
    serialized_streams.Params,
    host_blocking_sync.Params,
    SharedParams,
):
    """Every threshold the per-rank detectors use: the shared ones, then each finding's own Params
    (listed in reverse: a dataclass takes its bases' fields from the last base to the first)."""
