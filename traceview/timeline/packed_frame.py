"""A table held as its columns, made a DataFrame only where it is read.

A pod's caller holds one step-span table per host for the whole run (``hostreduce.activity``), its columns on
disk behind memory maps (``hostreduce.spill``), and reads the tables again only where two hosts' spans name
one device: the stragglers take each host's per-step sums, folded as the hosts arrived. As a DataFrame each
table cost the caller about 26 kB beyond its columns (its block manager and index, and each categorical's
dtype with a pyarrow-backed index of its names), 26 MB at 1024 hosts; held as the arrays and the names
themselves it costs about 4 kB, and a reader gets the same DataFrame back (docs/scale.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pandas as pd


@dataclass
class Categories:
    """A categorical column's dtype as plain parts: its names (an object array), their dtype, and whether
    ordered."""

    names: np.ndarray
    dtype: Any
    ordered: bool

    def dtype_of(self) -> pd.CategoricalDtype:
        return pd.CategoricalDtype(pd.Index(self.names, dtype=self.dtype), ordered=self.ordered)


@dataclass
class PackedFrame:
    """A DataFrame's columns by name (a categorical's codes), its categoricals' names, and nothing else: the
    row index is the default one (0..n-1), as every table packed here has."""

    columns: dict[str, np.ndarray]
    categories: dict[str, Categories] = field(default_factory=dict)

    @classmethod
    def of(cls, frame: pd.DataFrame) -> PackedFrame:
        """The frame's columns as they are (views where pandas holds them so; no copy of the rows)."""
        columns: dict[str, np.ndarray] = {}
        categories: dict[str, Categories] = {}
        for name, dtype in frame.dtypes.items():
            column = frame[name]
            if isinstance(dtype, pd.CategoricalDtype):
                names = dtype.categories
                categories[str(name)] = Categories(names.to_numpy(dtype=object), names.dtype, bool(dtype.ordered))
                columns[str(name)] = column.array.codes
            else:
                columns[str(name)] = column.to_numpy()
        return cls(columns, categories)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    @property
    def empty(self) -> bool:
        """As ``DataFrame.empty``: no rows, or no columns."""
        return len(self) == 0

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame (its columns not copied)."""
        return pd.DataFrame({name: pd.Categorical.from_codes(values, dtype=self.categories[name].dtype_of(),
                                                             validate=False)
                             if name in self.categories else values for name, values in self.columns.items()},
                            copy=False)


Table: TypeAlias = "pd.DataFrame | PackedFrame"


def as_frame(table: Table) -> pd.DataFrame:
    """The table as a DataFrame: itself, or a packed one unpacked."""
    return table.frame() if isinstance(table, PackedFrame) else table
