"""advice: why the devices waited, and one list of what to fix first.

- ``idle``: each device's idle time (its gaps between ops) split into host / launch / sync / transfer /
  unknown, per device and per step, with the host events behind each (docs/advice.md: the rules).
- ``stragglers``: per step, the device (and host) that started and finished last, and who waited.
- ``findings``: :class:`~traceview.advice.findings.Advice` (one item), the :class:`AdviceContext` a
  provider reads (with :class:`Views`, the other views' getters), and ``ranked`` (by saving; the
  unquantified after).
- ``providers``: one provider per source of findings: ops (gain), mesh axes (exposed communication),
  idle causes, memory (headroom), named scopes and serving.
- ``view``: ``advice_report(pipeline, views)``, what ``Analysis.advice()`` returns
  (``render.advice`` writes its JSON and text).

Adding a source of advice: write ``def my_provider(context: AdviceContext) -> Iterable[Advice]`` and
list it in ``providers.DEFAULT_PROVIDERS`` (or pass ``providers=`` to ``advice_report``). A provider
reads the other views' typed reports through the context (``context.parallelism()``, ``.memory()``,
``.scopes()``, ``.serving()``, and the ``idle`` and ``stragglers`` findings): each is built only when a
provider first asks for it and is None when the analysis has no such view; ``Analysis.advice()`` gives
the getters. Savings are device time per device (``context.per_device(total)``), capped by
``removable_ps`` (the time the finding measured) and by the span; an item with no honest estimate has
``saving_ps=None`` and ranks after the others.
"""
