"""The reader's dict-based factorization equals pd.Categorical exactly (categories, codes, dtypes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


@pytest.mark.parametrize("values", [
    ["b", "a", "b", None, "é", "", "a"],
    ["only"],
    [None, None],
    [],
    ["x", 2, None],
    ["z" * 300, "Z", "ß", "\u00e9\u0301", "a b", "a"] * 50,
])
def test_categorical_equals_pandas(values):
    from traceview.parsers.tables.columns import categorical

    arr = np.array(values, dtype=object)
    try:
        want = pd.Categorical(arr)
    except TypeError:  # pandas cannot order mixed values: neither can we
        with pytest.raises(TypeError):
            categorical(arr)
        return
    got = categorical(arr)
    pd.testing.assert_index_equal(got.categories, want.categories, exact=True)
    np.testing.assert_array_equal(got.codes, want.codes)
    assert got.codes.dtype == want.codes.dtype and got.dtype == want.dtype
