"""Streamlit's server sockets without Nagle's delay (TCP_NODELAY).

Streamlit (1.5x+, Starlette/uvicorn) binds its listening socket itself as
`socket.socket(family)`, protocol 0. asyncio turns Nagle's algorithm off only
for sockets whose protocol reads IPPROTO_TCP (`asyncio.base_events._set_nodelay`),
so every connection the server accepts keeps it on. A response is written as
its headers, then its body: with Nagle on, the body waits for the browser to
acknowledge the headers, and the browser delays that acknowledgement (40 ms on
Linux) whenever the connection is past its first exchange. So every HTTP
response after the first on a kept-alive connection, and websocket messages
sent back to back, arrive about 40 ms late (docs/dashboard.md has what it cost the page).

`install()` wraps Streamlit's socket binder so the listening socket says
IPPROTO_TCP (the connections it accepts inherit that, and asyncio then sets
TCP_NODELAY on each) and has TCP_NODELAY itself. A Streamlit without that
binder is left as it is.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

_MARK = "_traceview_nodelay"


def tcp_socket(sock: socket.socket) -> socket.socket:
    """The same listening socket, as one whose protocol is IPPROTO_TCP, with TCP_NODELAY set."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
        return sock
    if sock.proto != socket.IPPROTO_TCP:
        timeout = sock.gettimeout()
        sock = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
        sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def wrap(bind: Callable[..., socket.socket]) -> Callable[..., socket.socket]:
    def bind_without_nagle(*args: Any, **kwargs: Any) -> socket.socket:
        return tcp_socket(bind(*args, **kwargs))

    setattr(bind_without_nagle, _MARK, True)
    return bind_without_nagle


def install() -> bool:
    """Patch Streamlit's socket binder (once); False where this Streamlit has none to patch."""
    try:
        from streamlit.web.server.starlette import starlette_server
    except ImportError:
        return False
    bind = getattr(starlette_server, "_bind_socket", None)
    if bind is None:
        return False
    if not getattr(bind, _MARK, False):
        starlette_server._bind_socket = wrap(bind)
    return True
