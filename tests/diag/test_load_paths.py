"""``load_log`` lives in read/formats/load.py (reading inputs of any format); the paths scripts
used before the move still reach it."""

from __future__ import annotations

import pytest


def test_every_import_path_reaches_the_one_load_log():
    import dflash_diag
    from dflash_diag.read import jsonl
    from dflash_diag.read.formats import load

    assert dflash_diag.load_log is load.load_log
    assert jsonl.load_log is load.load_log
    assert jsonl.drop_duplicate_writers is load.drop_duplicate_writers
    assert jsonl.DUPLICATE_WRITERS_SHARE == load.DUPLICATE_WRITERS_SHARE
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        jsonl.nothing_here  # noqa: B018 - the attribute access is the test
