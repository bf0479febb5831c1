"""A run's host parts combined into what the analysis reads: the op table of all their rows, the run's
activity, the modules its ops ran in (its step times are folded as its hosts arrive: hostreduce.step_times).

One path for every run: one host is one part, a pod is many; the parts come from the files, the
parsed-table cache or tables in memory alike (:mod:`traceview.hostreduce.part`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from traceview.hostreduce.activity import Activity, merge_activity
from traceview.hostreduce.part import HostPart
from traceview.hostreduce.profile import Profile
from traceview.hostreduce.run_ops import RunOps, merge_parts
from traceview.timeline.lateness import SpanFold

# a merge, then at most: shared devices kept, pair members kept, and one to spare
_MERGE_TRIES = 4


def combine(profile: Profile, per_device: bool, pairs: pd.DataFrame) -> RunOps:
    """The profile's parts merged into the op table of all their rows (per device with ``per_device``).

    A merge that lacks rows (a device in several hosts' files, a member of an async pair in ``pairs``
    whose name does not say so) has those hosts reduced again keeping them, through the profile's
    reader, and is merged again; the parts reduced again stay on the profile for its next analysis.
    Each request keeps strictly more rows than the parts held, so a merge still short after
    ``_MERGE_TRIES`` is a bug, never a silently partial answer.
    """
    parts = [p.ops for p in profile.parts]
    workers = profile.workers
    for _ in range(_MERGE_TRIES):
        run = merge_parts(parts, per_device, jobs=profile.jobs, workers=workers)
        need = run.missing_rows(pairs)
        if not need:
            return run
        again = profile.reader.reduce_again(parts, need)
        workers = None          # the parts held elsewhere lack the rows kept now: the passes run here
        for i, part in again.items():
            # its activity does not depend on the rows kept, and may hold its host's threads, cut where it was read
            part.activity = parts[i].activity
            parts[i] = part
            profile.parts[i].ops = part
    raise RuntimeError(f"the hosts' op partials still lack rows after {_MERGE_TRIES} merges")


def run_activity(parts: Sequence[HostPart], span_fold: SpanFold | None = None) -> Activity:
    """The run's device activity: its hosts' activities merged (each reduced where its host was read);
    ``span_fold``: their step spans' sums folded as they arrived (``Profile.span_fold``)."""
    return merge_activity([p.ops.activity for p in parts], span_fold)


def executed(parts: Sequence[HostPart]) -> tuple[set[int], set[str]]:
    """The program ids and module names the parts' ops ran in (-1 and "" included where a row had none)."""
    ids = {int(i) for p in parts for i in np.unique(p.ops.program_id)}
    names = {p.ops.modules[m] for p in parts for m in np.unique(p.ops.module) if m >= 0}
    return ids, names
