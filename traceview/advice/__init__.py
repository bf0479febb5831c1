"""advice: why the devices waited, and one list of what to fix first.

- ``idle``: each device's idle time (its gaps between ops) split into host / launch / sync / transfer /
  unknown, per device and per step, with the host events behind each (docs/advice.md: the rules).
- ``stragglers``: per step, the device (and host) that started and finished last, and who waited.
- ``findings``: :class:`~traceview.advice.findings.Advice` (one item), the :class:`AdviceContext` a
  provider reads, and ``ranked`` (by saving; the unquantified after).
- ``providers``: one provider per source of findings: ops (gain), mesh axes (exposed communication),
  idle causes, memory (headroom), named scopes and serving.
- ``view``: ``advice_report(pipeline, views)``, what ``Analysis.advice()`` returns.

Adding a source of advice: write ``def my_provider(context: AdviceContext) -> Iterable[Advice]`` and
list it in ``providers.DEFAULT_PROVIDERS`` (or pass ``providers=`` to ``advice_report``). A provider
reads the other views through ``context.view(name)``, which builds a view only when asked and gives
None when the analysis has none; ``Analysis.advice()`` registers the getters. Savings are device time
per device (``context.per_device(total)``), capped by ``removable_ps`` (the time the finding measured)
and by the span; an item with no honest estimate has ``saving_ps=None`` and ranks after the others.

Two providers read other views through their JSON records, so advice imports nothing from them:

- ``scopes_provider`` reads ``context.view("scopes")``: the ``traceview scopes --format json`` record
  (``nodes`` with ``path``, ``self_gain_us``, ``self_us``, ``bound``);
- ``serving_provider`` reads ``context.view("serving")``: the ``traceview inference --format json``
  record (``phases`` with ``step_time_us``, ``floor_us``, ``steps``, ``batch``; ``critical_batch``),
  None when no program with a KV cache ran.
"""
