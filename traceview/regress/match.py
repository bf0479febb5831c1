"""Pairing the ops of two snapshots: by (module, op name), then fingerprint, cost signature and source.

Ops left over after the name match are paired one to one by their HLO
fingerprint (a fusion XLA renumbered), then by their cost signature (opcode,
shape and FLOPs/bytes per execution: what a stored JSON baseline still has),
then by source location, each only where the key is unique on both sides.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _signature(ops: pd.DataFrame) -> pd.Series:
    """Cost signature: what an op computes per execution, without its name."""
    occ = ops["occurrences"].where(ops["occurrences"] > 0)
    flops = (ops["flops"] / occ).round(0).astype(str)
    nbytes = (ops["bytes"] / occ).round(0).astype(str)
    return (ops["opcode"].astype(str) + "|" + ops["shape"].astype(str) + "|" + ops["dtype"].astype(str)
            + "|" + flops + "|" + nbytes)


def _source(ops: pd.DataFrame) -> pd.Series:
    has = ops["source_file"].fillna("").astype(str) != ""
    text = (ops["opcode"].astype(str) + "|" + ops["source_file"].fillna("").astype(str) + ":"
            + ops["source_line"].astype(str))
    return text.where(has, "")


def _unique_pairs(base_keys: pd.Series, new_keys: pd.Series) -> list[tuple[int, int]]:
    """Index pairs whose key is non-empty and appears exactly once on each side."""
    b = base_keys[base_keys != ""]
    n = new_keys[new_keys != ""]
    b = b[~b.duplicated(keep=False)]
    n = n[~n.duplicated(keep=False)]
    joined = pd.Series(b.index, index=b.values).to_frame("base").join(
        pd.Series(n.index, index=n.values).to_frame("new"), how="inner")
    return list(zip(joined["base"], joined["new"]))


def _fingerprint(frame: pd.DataFrame) -> pd.Series:
    return frame["fingerprint"].fillna("").astype(str)


def _keyed(frame: pd.DataFrame, keyer) -> pd.Series:
    """module + key, or "" where the key is unknown."""
    key = keyer(frame)
    return (frame["module"] + "\0" + key).where(key != "", "")


def match_ops(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Pairs of row labels (base, new) with how they matched; unmatched rows have NaN on the other side.

    A name pair whose fingerprints differ is undone when the fingerprints
    pair its ops otherwise (XLA swapped two fusions' numbers); the ops it
    leaves behind go on to the later rules.
    """
    base_key = base["module"] + "\0" + base["op"]
    new_key = new["module"] + "\0" + new["op"]
    by_name = pd.Series(base.index, index=base_key.values).to_frame("base").join(
        pd.Series(new.index, index=new_key.values).to_frame("new"), how="inner")
    named = dict(zip(by_name["base"], by_name["new"]))
    fb, fn = _fingerprint(base), _fingerprint(new)
    suspect = [b for b, n in named.items() if fb[b] and fn[n] and fb[b] != fn[n]]
    left_b = base.index.difference(by_name["base"]).union(pd.Index(suspect, dtype=base.index.dtype))
    left_n = new.index.difference(by_name["new"]).union(pd.Index([named[b] for b in suspect], dtype=new.index.dtype))
    pairs: list[tuple] = []
    for how, keyer in (("fingerprint", _fingerprint), ("signature", _signature), ("source", _source)):
        if len(left_b) == 0 or len(left_n) == 0:
            break
        found = _unique_pairs(_keyed(base.loc[left_b], keyer), _keyed(new.loc[left_n], keyer))
        if how == "fingerprint":  # keep the suspect name pairs that no fingerprint pair breaks up
            found = [(b, n) for b, n in found if named.get(b) != n]
            moved = {b for b, _ in found} | {n for _, n in found}
            for b in suspect:
                if b not in moved and named[b] not in moved:
                    pairs.append((b, named[b], "name"))
                    left_b, left_n = left_b.drop(b), left_n.drop(named[b])
            named = {b: n for b, n in named.items() if b not in suspect}
        pairs += [(b, n, how) for b, n in found]
        left_b = left_b.difference([b for b, _ in found])
        left_n = left_n.difference([n for _, n in found])
    pairs = [(b, n, "name") for b, n in named.items()] + pairs
    pairs += [(b, np.nan, "") for b in left_b] + [(np.nan, n, "") for n in left_n]
    return pd.DataFrame(pairs, columns=["base", "new", "matched_by"])
