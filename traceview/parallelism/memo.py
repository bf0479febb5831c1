"""What one pass over a module found, kept for the last few modules: a report asks about the same few modules
from several views (the roles, the per-chip batch, the what-if baseline), and each pass walks the whole
module. Few are kept, as each holds its module alive; a module is recognised by identity (a module read
again is another one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from traceview.parsers.hlo.model import HloModule

T = TypeVar("T")
KEPT = 4


class ModuleMemo(Generic[T]):
    """``make(module)``, made once per module while it is among the last KEPT asked about."""

    def __init__(self, make: Callable[[HloModule], T], kept: int = KEPT) -> None:
        self._make = make
        self._kept = kept
        self._found: dict[int, tuple[HloModule, T]] = {}

    def __call__(self, module: HloModule) -> T:
        found = self._found.get(id(module))
        if found is None or found[0] is not module:
            while len(self._found) >= self._kept:
                del self._found[next(iter(self._found))]          # the oldest
            found = self._found[id(module)] = (module, self._make(module))
        return found[1]
