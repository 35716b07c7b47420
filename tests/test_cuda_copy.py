"""copy_2d: the strided 2-D copy the kcat schedule places operands with (copy_ on CPU; the copy engine on CUDA)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from runners.cuda_copy import copy_2d  # noqa: E402


def test_copy_2d_places_a_column_block_and_leaves_the_rest():
    dst = torch.zeros(4, 6)
    src = torch.arange(8.0).view(4, 2)
    copy_2d(dst[:, 2:4], src)
    assert torch.equal(dst[:, 2:4], src)
    assert dst[:, :2].abs().sum() == 0 and dst[:, 4:].abs().sum() == 0


def test_copy_2d_refuses_mismatched_or_non_2d_tensors():
    with pytest.raises(ValueError, match="shapes/dtypes differ"):
        copy_2d(torch.zeros(4, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="shapes/dtypes differ"):
        copy_2d(torch.zeros(4), torch.zeros(4))
    with pytest.raises(ValueError, match="shapes/dtypes differ"):
        copy_2d(torch.zeros(2, 2, dtype=torch.float64), torch.zeros(2, 2))


def test_kcat_candidates_only_where_the_operands_move_less():
    from types import SimpleNamespace

    from runners.gemm_rs_kcat import offered

    wl = SimpleNamespace(M=64, D=2, N=16)
    names = [s.name for s in offered(wl, True)]
    assert names == ["ce x2 prio-1 kcat", "ce x2 prio-1 kcat +graph", "ce x4 prio-1 kcat", "ce x4 prio-1 kcat +graph",
                     "ce x2 prio-1 kcat-n", "ce x2 prio-1 kcat-n +graph", "ce x4 prio-1 kcat-n",
                     "ce x4 prio-1 kcat-n +graph"]
    assert offered(wl, False) == []
    assert offered(SimpleNamespace(M=6, D=2, N=5), True) == []  # 3 rows, 5 columns: no even split
