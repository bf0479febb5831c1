"""Table columns built without a Python object per row: categoricals from codes, joined chunks, and the
figures a trace does not report.

Readers keep text as codes into distinct strings (:class:`Vocab`) and turn
them into ``pd.Categorical`` once; a chunk's labels are spread over its rows
by index arrays; a column of NaN that the trace never reports holds no memory
(:func:`unreported`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd


class Vocab:
    """Distinct strings gathered from several sources, each with one code."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self._index: dict[str, int] = {}

    def code(self, text: str) -> int:
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.strings)
            self.strings.append(text)
        return found

    def take(self, codes: np.ndarray, strings: list[str]) -> np.ndarray:
        """Codes into `strings` (-1: none) as codes into this vocabulary."""
        remap = np.empty(len(strings) + 1, dtype=np.int64)
        remap[:-1] = [self.code(t) for t in strings]
        remap[-1] = -1
        return remap[codes]

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """pd.Categorical of these codes: only the strings used, sorted (as pd.Categorical(values) has them)."""
        used = np.flatnonzero(np.bincount(codes + 1, minlength=len(self.strings) + 1)[1:])
        texts = [self.strings[i] for i in used.tolist()]
        order = sorted(range(len(texts)), key=texts.__getitem__)
        remap: np.ndarray = np.full(len(self.strings) + 1, -1, dtype=_code_dtype(len(order)))  # codes of the size pandas keeps
        remap[used[order]] = np.arange(len(order))
        return pd.Categorical.from_codes(remap[codes], categories=pd.Index([texts[i] for i in order]))


def _code_dtype(categories: int) -> type:
    """The integer type pandas keeps a Categorical's codes in for this many categories (so it need not
    convert them)."""
    for dtype in (np.int8, np.int16, np.int32):
        if categories < np.iinfo(dtype).max:
            return dtype
    return np.int64


def categorical(values: np.ndarray) -> pd.Categorical:
    """pd.Categorical(values) for an object array of str (None: missing), by hash instead of by sort.

    Same categories (sorted), codes and dtypes as pd.Categorical, several
    times faster when millions of values repeat a few thousand strings.
    """
    values = np.asarray(values, dtype=object)
    codes, keys = pd.factorize(values)  # a C hash table over the objects; None -> -1
    keys = keys.tolist()
    if not keys or not all(type(k) is str for k in keys):
        return pd.Categorical(values)
    order = sorted(range(len(keys)), key=keys.__getitem__)
    remap = np.empty(len(keys) + 1, dtype=np.int64)
    remap[order] = np.arange(len(keys))
    remap[-1] = -1  # codes of -1 (missing) index the last slot
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index([keys[i] for i in order]))


def spread(per_md: list, index: np.ndarray, default) -> pd.Categorical:
    """Categorical of per-metadata values spread over events by metadata index."""
    codes, dtype = _spread_table(tuple(per_md), default)
    return pd.Categorical.from_codes(codes[np.where(index >= 0, index, codes.size - 1)], dtype=dtype)


@lru_cache(maxsize=64)
def _spread_table(values: tuple, default) -> tuple[np.ndarray, pd.CategoricalDtype]:
    """Codes and dtype of pd.Categorical(values + default), made once per list (a plane's lines share it)."""
    cats = pd.Categorical(list(values) + [default])
    return cats.codes, cats.dtype


def unreported(n: int) -> np.ndarray:
    """A float column of n NaN (a figure the trace does not report: GPU and CPU rows' flops and bytes) that
    holds no memory: one value seen n times, read-only. A Profile's own op table gets writable copies
    (trace.read); a table only reduced (``analyze``) never holds the 16 bytes per row of its two columns."""
    return np.broadcast_to(np.float64(np.nan), (n,))


def is_unreported(a: np.ndarray) -> bool:
    """Whether `a` is an :func:`unreported` column."""
    return a.ndim == 1 and a.strides == (0,) and a.dtype == np.float64 and (a.size == 0 or bool(np.isnan(a[0])))


def joined(arrays: list[np.ndarray], dtype) -> np.ndarray:
    """The arrays end to end, as `dtype`: an array of its own (no view of another), so a table can hold it
    without a copy; unreported columns stay one (no memory)."""
    if dtype == np.float64 and all(is_unreported(a) for a in arrays):
        return unreported(sum(a.size for a in arrays))
    if len(arrays) == 1:
        a = arrays[0]
        own = a.dtype == dtype and a.flags.owndata and a.flags.c_contiguous and a.flags.writeable
        return a if own else a.astype(dtype, copy=True)
    return np.concatenate(arrays).astype(dtype, copy=False)


def repeat_categories(values: list, sizes: list[int]) -> pd.Categorical:
    """Per-row labels of chunks: a chunk's one label (a str) repeated over its rows, or its own per-row
    labels (a Categorical: the trace JSON reader puts many lines in one chunk)."""
    if any(isinstance(v, pd.Categorical) for v in values):
        from pandas.api.types import union_categoricals

        return union_categoricals([pd.Categorical.from_codes(v.codes, pd.Index(v.categories, dtype=object))
                                   if isinstance(v, pd.Categorical) else
                                   pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), pd.Index([v], dtype=object))
                                   for v, n in zip(values, sizes)])
    cats = pd.Categorical(values)
    return pd.Categorical.from_codes(np.repeat(cats.codes, sizes), cats.categories)
