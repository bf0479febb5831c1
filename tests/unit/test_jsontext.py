"""render.jsontext.dumps must write exactly what json.dumps(obj, indent=1) writes (the reference)."""

from __future__ import annotations

import enum
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceview.render.jsontext import chunks, dumps

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["a,b", "%s", "%%", "\u00e9\u4e2d", "\ud83d\ude00", "\\\"", ",", ""]),
)
keys = st.one_of(st.text(max_size=6), st.sampled_from(["%s", "a%", "k,1", "\u00e9"]), st.integers(-5, 5),
                 st.floats(allow_nan=False), st.booleans(), st.none())


def _tables(children):
    """Lists of dicts sharing one key order (the reports' tables), so the column-wise path runs."""
    @st.composite
    def table(draw):
        names = draw(st.lists(st.one_of(st.text(max_size=4), st.sampled_from(["%s", "a%", "%%d", ","])),
                              min_size=1, max_size=5, unique=True))
        cell = st.one_of(scalars, children)
        n = draw(st.integers(min_value=0, max_value=20))
        return [{k: draw(cell) for k in names} for _ in range(n)]
    return table()


documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=12),
        st.dictionaries(keys, children, max_size=6),
        _tables(children),
    ),
    max_leaves=60,
)


@settings(max_examples=400, deadline=None)
@given(documents)
def test_same_text_as_the_standard_library(doc):
    assert dumps(doc) == json.dumps(doc, indent=1)
    assert "".join(chunks(doc, end="\n")) == json.dumps(doc, indent=1) + "\n"


def test_chunks_never_hold_the_whole_text():
    """A report of thousands of rows in several sections comes in pieces, none of them more than a batch of
    rows, so a writer of the pieces never holds the whole text."""
    rows = [{"id": f"host{i:04d}/dev{i % 8}", "busy_us": i * 1.5, "idle_us": None, "steps": [i, i + 1]}
            for i in range(5000)]
    doc = {"devices": rows, "summary": {"devices": rows[:3000], "idle": {"by_device": {r["id"]: [r] for r in rows}}}}
    whole = json.dumps(doc, indent=1)
    pieces = list(chunks(doc))
    assert "".join(pieces) == whole
    assert max(map(len, pieces)) < len(whole) / 10


def test_tables_with_nested_and_mixed_columns():
    rows = [{"step": i, "%s": i / 3, "50%": -i, "name": f"op,{i}%s", "flag": i % 2 == 0, "none": None,
             "by": {"compute": float(i), "idle": math.nan if i == 3 else -math.inf},
             "mixed": [1, "x"] if i % 3 else i, "list": [i, i + 0.5]} for i in range(12)]
    doc = {"summary": {"steps": rows}, "tuple": (1, 2.0, "3"), "empty": [{}, [], ""]}
    assert dumps(doc) == json.dumps(doc, indent=1)
    # rows whose keys differ in order or in number take the general path
    rows[5] = dict(reversed(list(rows[5].items())))
    rows[7] = {"step": 7}
    assert dumps(rows) == json.dumps(rows, indent=1)


def test_subclasses_of_numbers_and_strings():
    class Kind(enum.IntEnum):
        A = 1

    class Name(str):
        pass

    doc = [{"x": np.float64(0.1), "k": Kind.A, "n": Name("n")} for _ in range(10)] + [np.float64(math.nan), True]
    assert dumps(doc) == json.dumps(doc, indent=1)


@pytest.mark.parametrize("bad", [{1, 2}, b"bytes", {"k": object()}, [np.int64(1)] * 9, {(1, 2): 3}])
def test_what_json_refuses_is_refused(bad):
    with pytest.raises(TypeError):
        json.dumps(bad, indent=1)
    with pytest.raises(TypeError):
        dumps(bad)
    with pytest.raises(TypeError):
        "".join(chunks({"a": [bad, 1]}))
