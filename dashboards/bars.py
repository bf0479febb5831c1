"""The Overview's two bar charts as plain HTML (for `st.html`), drawn without Vega.

A Vega-Lite chart costs the first page about 0.5 s in the browser: Streamlit
loads Vega's scripts (about 1 MB) the first time a chart appears, then
compiles and draws it. The Overview's charts are a 100 % bar and stacked
columns: boxes whose widths or heights are the numbers, which HTML draws as
they are. The same numbers as the Altair charts (overview.split_bar_chart,
overview.steps_chart), the same colours; each box's tooltip (its `title`)
gives the figure. Colours of text and grid lines follow the page's theme.
"""

from __future__ import annotations

import math
from html import escape

import pandas as pd

from traceview.units import fmt_pct

_MUTED = "opacity:.7"
_GRID = "rgba(128,128,128,.25)"
_FONT = "font-size:12px;line-height:1.25;font-variant-numeric:tabular-nums"


def _ms(value: float) -> str:
    return f"{value:,.3f} ms"


def _pct(value: float) -> str:
    """A CSS percentage (no exponent, at most 4 decimals)."""
    return f"{max(value, 0.0) * 100:.4f}".rstrip("0").rstrip(".") + "%"


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """0 and round steps (1, 2, 2.5 or 5 x 10^k) up to the first at or above `top`, about `count` of them."""
    if not top > 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _tick_label(value: float, step: float) -> str:
    return f"{value:,.0f}" if step >= 1 else f"{value:,.{max(0, -math.floor(math.log10(step)) + 1)}f}".rstrip("0").rstrip(".")


def legend_html(colours: dict[str, str], names: list[str], labels: dict[str, str] | None = None) -> str:
    items = "".join(
        f'<span style="display:inline-flex;align-items:center;gap:5px;margin-right:14px">'
        f'<span style="display:inline-block;width:11px;height:11px;border-radius:2px;background:{colours.get(n, "#7f7f7f")}">'
        f'</span>{escape((labels or {}).get(n, n))}</span>' for n in names)
    return f'<div style="{_FONT};margin-top:6px">{items}</div>'


def share_bar_html(split: pd.DataFrame, colours: dict[str, str], height: int = 26) -> str:
    """One bar, 100 % wide: each bound's share of the time (bound_split's columns bound, time_us, share),
    with a 0-100 % axis and a legend."""
    rows = list(zip(split["bound"], split["time_us"], split["share"]))
    segments = "".join(
        f'<div title="{escape(bound)}: {_ms(time_us / 1000)} ({fmt_pct(share)})" '
        f'style="width:{_pct(share)};background:{colours.get(bound, "#7f7f7f")}"></div>'
        for bound, time_us, share in rows if share > 0)
    ticks = "".join(
        f'<div style="position:absolute;left:{t * 10}%;top:0;transform:translateX(-{0 if t == 0 else 100 if t == 10 else 50}%);'
        f'{_MUTED}">{t * 10}%</div>' for t in range(0, 11))
    marks = "".join(f'<div style="position:absolute;left:{t * 10}%;top:0;width:1px;height:4px;background:{_GRID}"></div>'
                    for t in range(0, 11))
    label = "time by bound: " + ", ".join(f"{b} {fmt_pct(s)}" for b, _, s in rows)
    return (f'<div role="img" aria-label="{escape(label)}" style="{_FONT}">'
            f'<div style="display:flex;width:100%;height:{height}px;background:{_GRID}">{segments}</div>'
            f'<div style="position:relative;height:4px">{marks}</div>'
            f'<div style="position:relative;height:16px">{ticks}</div>'
            + legend_html(colours, [b for b, _, _ in rows]) + '</div>')


def stacked_columns_html(frame: pd.DataFrame, colours: dict[str, str], order: list[str], height: int = 220,
                         x_title: str = "step", y_title: str = "ms") -> str:
    """One column per step, stacked by bound (steps_frame's long format: step, bound, time_ms), the bounds in
    `order` from the bottom, on a y axis of round figures in ms."""
    wide = frame.pivot_table(index="step", columns="bound", values="time_ms", aggfunc="sum", sort=True).fillna(0.0)
    bounds = [b for b in order if b in wide.columns] + [b for b in wide.columns if b not in order]
    totals = wide[bounds].sum(axis=1)
    ticks = nice_ticks(float(totals.max()) if len(totals) else 0.0)
    top, step = ticks[-1], ticks[1] - ticks[0]
    columns = []
    for step_id, row in wide[bounds].iterrows():
        total = float(row.sum())
        boxes = "".join(
            f'<div title="{escape(x_title)} {escape(str(step_id))}: {escape(b)} {_ms(v)} of {_ms(total)}" '
            f'style="flex:0 0 {_pct(v / total)};background:{colours.get(b, "#7f7f7f")}"></div>'
            for b, v in row.items() if v > 0 and total > 0)
        columns.append(f'<div style="flex:1 1 0;min-width:0;height:{_pct(total / top)};display:flex;'
                       f'flex-direction:column-reverse">{boxes}</div>')
    n = len(columns)
    every = max(1, math.ceil(n / 12))
    every = next((k for k in (1, 2, 4, 5, 8, 10, 20, 25, 50, 100) if k >= every), every)
    steps = list(wide.index)
    x_labels = "".join(
        f'<div style="position:absolute;left:{_pct((i + 0.5) / n)};transform:translateX(-50%);white-space:nowrap">'
        f'{escape(str(s))}</div>' for i, s in enumerate(steps) if i % every == 0)
    grid = "".join(
        f'<div style="position:absolute;left:0;right:0;bottom:{_pct(t / top)};border-top:1px solid {_GRID}"></div>'
        f'<div style="position:absolute;right:calc(100% + 6px);bottom:{_pct(t / top)};transform:translateY(50%);'
        f'white-space:nowrap;{_MUTED}">{_tick_label(t, step)}</div>' for t in ticks)
    label = f"{y_title} per {x_title}, stacked by bound, {n} {x_title}s"
    return (f'<div role="img" aria-label="{escape(label)}" style="{_FONT};padding-left:48px">'
            f'<div style="{_MUTED};margin:0 0 4px -48px">{escape(y_title)}</div>'
            f'<div style="position:relative;height:{height}px;border-bottom:1px solid rgba(128,128,128,.6)">{grid}'
            f'<div style="position:absolute;inset:0;display:flex;align-items:flex-end;gap:1px">{"".join(columns)}</div>'
            f'</div>'
            f'<div style="position:relative;height:18px;margin-top:3px;{_MUTED}">{x_labels}</div>'
            f'<div style="text-align:center;{_MUTED}">{escape(x_title)}</div></div>')
