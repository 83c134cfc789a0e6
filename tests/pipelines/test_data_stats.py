"""Data statistics: the copyable 4-gram share and the distinct-token share."""

import pytest

from pipelines.data_stats import copyable_count, data_stats


def test_a_repeated_4gram_makes_its_last_token_copyable():
    # prompt [1, 2, 3, 4], response [1, 2, 3, 4, 5]: the response's 4-gram (1, 2, 3, 4) ends at
    # index 7 and occurred before (ending at 3): one copyable token; (2, 3, 4, 5) is new.
    tokens = [1, 2, 3, 4, 1, 2, 3, 4, 5]
    assert copyable_count(tokens, 4) == 1
    assert copyable_count(tokens, 0) == 1  # the first occurrence is never copyable
    # A loop copies every token from its previous lap once the 4-gram has been seen.
    loop = [7, 8, 9] * 6
    assert copyable_count(loop, 3) == len(loop) - 6


def test_shares_over_examples():
    st = data_stats([([1, 2, 3, 4, 1, 2, 3, 4, 5], 4), ([9, 9, 1, 2], 2), ([5], 1)])
    assert st.n_examples == 2
    assert st.response_tokens == 7
    assert st.copyable_share == pytest.approx(1 / 7)
    # distinct shares 5/5 and 2/2: median 1.0
    assert st.distinct_share_median == 1.0
    assert "copyable 4-gram share 14.3%" in st.line()
    with pytest.raises(ValueError, match="no example with a response"):
        data_stats([([1, 2], 2)])
