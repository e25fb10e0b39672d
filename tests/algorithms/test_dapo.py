"""DAPO's soft overlong punishment (Eq. 13) and the dynamic-sampling filter."""

from __future__ import annotations

import pytest
import torch

from contrastive_rlvr.algorithms import informative_groups, overlong_penalty


def test_overlong_penalty_three_regions():
    # L_max = 10, L_cache = 4: free up to 6, linear in (6, 10], -1 beyond 10.
    lengths = torch.tensor([0, 6, 7, 8, 9, 10, 11, 100])
    expected = [0.0, 0.0, (6 - 7) / 4, (6 - 8) / 4, (6 - 9) / 4, (6 - 10) / 4, -1.0, -1.0]
    torch.testing.assert_close(
        overlong_penalty(lengths, max_len=10, cache_len=4), torch.tensor(expected)
    )


def test_overlong_penalty_whole_length_as_buffer():
    # L_cache = L_max: the penalty ramps from 0 at length 0 to -1 at L_max
    lengths = torch.tensor([0.0, 2.0, 8.0, 9.0], dtype=torch.float64)
    out = overlong_penalty(lengths, max_len=8, cache_len=8)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor([0.0, -0.25, -1.0, -1.0], dtype=torch.float64))


@pytest.mark.parametrize(("max_len", "cache_len"), [(10, 0), (10, 11), (10, -2)])
def test_overlong_penalty_bad_lengths(max_len, cache_len):
    with pytest.raises(ValueError, match=f"cache_len={cache_len}, max_len={max_len}"):
        overlong_penalty(torch.tensor([1]), max_len=max_len, cache_len=cache_len)


def test_informative_groups():
    # (1,1) all right, (0,1) mixed, (0.1,0.1) equal, (0,0) all wrong
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.1, 0.1, 0.0, 0.0])
    assert informative_groups(rewards, 2).tolist() == [False, True, False, False]
    assert informative_groups(rewards, 4).tolist() == [True, True]


def test_informative_groups_bad_layout():
    with pytest.raises(ValueError, match="does not divide"):
        informative_groups(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="group_size=1 is too small"):
        informative_groups(torch.zeros(4), 1)
