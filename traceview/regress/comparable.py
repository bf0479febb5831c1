"""Whether two snapshots can be compared at all: a verdict on unrelated inputs is not a verdict.

`check` refuses (exit 2, "not comparable: ...") when base and new share no HLO module and no op, or
when the ops they share cover less than MIN_SHARED_TIME of either side's op time (traces) or of
either side's ops (HLO inputs, which have no times). A wrong --baseline then fails CI loudly instead
of passing with nothing checked.
"""

from __future__ import annotations

import numpy as np

from traceview.regress.diff import Diff

MIN_SHARED_TIME = 0.5     # the shared ops must hold at least half of each side's op time


def not_comparable(diff: Diff, min_shared: float = MIN_SHARED_TIME) -> str | None:
    """Why `diff`'s two sides cannot be compared (one line), or None when they can."""
    ops = diff.ops
    shared = (ops["status"] != "new") & (ops["status"] != "vanished") if len(ops) else ops.get("status")
    modules = diff.modules
    shared_modules = int(((modules["status"] != "new") & (modules["status"] != "vanished")).sum()) \
        if len(modules) and "status" in modules else 0
    if (shared is None or not shared.any()) and not shared_modules:
        return (f"{diff.base.label} and {diff.new.label} share no HLO module and no op "
                f"({int((ops['status'] == 'vanished').sum()) if len(ops) else 0} ops only in the base, "
                f"{int((ops['status'] == 'new').sum()) if len(ops) else 0} only in the new side)")
    if shared is None or not len(ops):
        return None
    for side, label in (("base", diff.base.label), ("new", diff.new.label)):
        times = ops[f"{side}_time_ps"].to_numpy(dtype="float64")
        present = ops["status"] != ("new" if side == "base" else "vanished")
        if np.isfinite(times[present]).any() and np.nansum(times[present]) > 0:
            share = np.nansum(times[shared & present]) / np.nansum(times[present])
            what = "of its op time"
        else:
            share = shared.sum() / max(int(present.sum()), 1)
            what = "of its ops"
        if share < min_shared:
            return (f"the ops {diff.base.label} and {diff.new.label} share cover only {share:.1%} {what} in {label} "
                    f"(at least {min_shared:.0%} needed)")
    return None
