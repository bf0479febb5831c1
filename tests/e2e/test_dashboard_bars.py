"""The Overview's HTML bar charts (dashboards/bars.py) and the server's sockets (dashboards/nodelay.py).

The charts are checked by reading the HTML back: each box's size is its
figure's share, worked out by hand here; each box's tooltip names the figure.
"""

from __future__ import annotations

import asyncio
import re
import socket
from html.parser import HTMLParser

import pandas as pd
import pytest

from traceview.dashboards import nodelay
from traceview.dashboards.bars import nice_ticks, share_bar_html, stacked_columns_html

COLOURS = {"compute": "#2ca02c", "memory": "#1f77b4", "idle": "#d9d9d9"}


class Boxes(HTMLParser):
    """Every element with a tooltip: (title, its style as a dict), and the parents' styles on the way."""

    def __init__(self) -> None:
        super().__init__()
        self.boxes: list[tuple[str, dict[str, str]]] = []
        self.stack: list[dict[str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        style = dict(p.split(":", 1) for p in (a.get("style") or "").split(";") if ":" in p)
        self.stack.append(style)
        if "title" in a:
            self.boxes.append((a["title"], {**style, "parent_height": self.stack[-2].get("height", "")}))

    def handle_endtag(self, tag):
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def boxes(html: str) -> Boxes:
    parser = Boxes()
    parser.feed(html)
    assert parser.stack == [], "unbalanced HTML"
    return parser


def pct(value: str) -> float:
    return float(re.fullmatch(r"(?:0 0 )?([0-9.]+)%", value).group(1))


def test_share_bar_widths_are_the_shares():
    # 30 us compute, 10 us memory, 60 us idle, 0 unknown: 30 %, 10 %, 60 %; the empty one has no box.
    split = pd.DataFrame({"bound": ["compute", "memory", "unknown", "idle"], "time_us": [30.0, 10.0, 0.0, 60.0]})
    split["share"] = split["time_us"] / 100.0
    parsed = boxes(share_bar_html(split, COLOURS))
    assert [(t, pct(s["width"])) for t, s in parsed.boxes] == [
        ("compute: 0.030 ms (30.0%)", 30.0), ("memory: 0.010 ms (10.0%)", 10.0), ("idle: 0.060 ms (60.0%)", 60.0)]
    assert [s["background"] for _, s in parsed.boxes] == ["#2ca02c", "#1f77b4", "#d9d9d9"]
    text = "".join(parsed.text)
    assert "0%" in text and "100%" in text and "unknown" in text   # the axis, and a legend of every bound


def test_stacked_columns_heights_are_the_times():
    # step 7: compute 2 ms + idle 1 ms = 3 ms; step 8: compute 4 ms + memory 1 ms = 5 ms.
    # The axis: 5 ms / 5 ticks = 1 ms steps, 0..5 ms, so the columns are 3/5 and 5/5 of the height.
    frame = pd.DataFrame({"step": [7, 7, 8, 8], "bound": ["compute", "idle", "compute", "memory"],
                          "time_ms": [2.0, 1.0, 4.0, 1.0]})
    parsed = boxes(stacked_columns_html(frame, COLOURS, ["compute", "memory", "idle"]))
    got = [(t, round(pct(s["flex"]), 3), round(pct(s["parent_height"]), 3)) for t, s in parsed.boxes]
    assert got == [   # from the bottom of each column up: compute, memory, then idle
        ("step 7: compute 2.000 ms of 3.000 ms", 66.667, 60.0),
        ("step 7: idle 1.000 ms of 3.000 ms", 33.333, 60.0),
        ("step 8: compute 4.000 ms of 5.000 ms", 80.0, 100.0),
        ("step 8: memory 1.000 ms of 5.000 ms", 20.0, 100.0),
    ]
    labels = "".join(parsed.text)
    assert all(str(n) in labels for n in range(6)) and "7" in labels and "8" in labels


def test_names_are_escaped():
    split = pd.DataFrame({"bound": ["<b>x</b>"], "time_us": [1.0], "share": [1.0]})
    html = share_bar_html(split, {})
    assert "<b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


@pytest.mark.parametrize("top, ticks", [
    (1000.0, [0, 200, 400, 600, 800, 1000]),        # 1000 / 5 = 200: 2 x 10^2
    (803.8, [0, 200, 400, 600, 800, 1000]),         # 160.8 -> 200; 800 < 803.8, so up to 1000
    (5.0, [0, 1, 2, 3, 4, 5]),
    (0.11, [0, 0.025, 0.05, 0.075, 0.1, 0.125]),   # 0.022 -> 2.5 x 10^-2
    (0.0, [0, 1]),                                  # nothing measured: an axis all the same
])
def test_nice_ticks(top, ticks):
    assert nice_ticks(top) == pytest.approx(ticks)


def _accepted_nodelay(listener: socket.socket) -> int:
    """TCP_NODELAY on the connection an asyncio server accepts on `listener` (as uvicorn serves)."""
    async def run() -> int:
        seen: list[int] = []

        async def on_connect(reader, writer):
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=listener)
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        while not seen:
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        return seen[0]

    return asyncio.run(run())


def _listener() -> socket.socket:
    sock = socket.socket(family=socket.AF_INET)   # as Streamlit binds it: protocol 0
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    return sock


def test_streamlits_kind_of_socket_keeps_nagle_on():
    """The reason for nodelay.py: asyncio leaves Nagle on for a listener of protocol 0."""
    assert _accepted_nodelay(_listener()) == 0


def test_nodelay_socket_turns_nagle_off():
    sock = nodelay.tcp_socket(_listener())
    assert sock.proto == socket.IPPROTO_TCP and not sock.getblocking()
    assert _accepted_nodelay(sock) != 0


def test_install_wraps_streamlits_binder_once():
    starlette_server = pytest.importorskip("streamlit.web.server.starlette.starlette_server")
    if not hasattr(starlette_server, "_bind_socket"):
        pytest.skip("this Streamlit binds its sockets elsewhere")
    original = starlette_server._bind_socket
    try:
        assert nodelay.install() and nodelay.install()
        wrapped = starlette_server._bind_socket
        assert wrapped is not original and getattr(wrapped, nodelay._MARK)
        sock = wrapped("127.0.0.1", 0, 8)
        try:
            assert sock.proto == socket.IPPROTO_TCP
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            sock.close()
        nodelay.install()
        assert starlette_server._bind_socket is wrapped   # not wrapped twice
    finally:
        starlette_server._bind_socket = original
