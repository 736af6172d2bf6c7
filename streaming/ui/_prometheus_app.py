"""guarded: prometheus_client's ASGI app, answering what it cannot read with a 400 instead of raising."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["guarded"]


def guarded(app: Callable[..., Any]) -> Callable[..., Any]:
    """``app`` (prometheus_client's ``make_asgi_app``) behind a check of what it decodes.

    It decodes the query string, every header name and the ``Accept`` and ``Accept-Encoding`` values as UTF-8,
    strictly, and asserts an HTTP scope: a request with other bytes there, or a websocket, raised, and the server logged
    each with its traceback, so any client reaching ``/metrics/`` could fill the log (lane K5: 4.9 MB in 9 s). Such a
    request now gets a 400, a websocket a close.
    """

    async def metrics(scope: Any, receive: Any, send: Any) -> None:
        http = scope.get("type") == "http"
        if http and _readable(scope):
            await app(scope, receive, send)
        elif http:
            await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Bad Request: a header or the query is not UTF-8"})
        elif scope.get("type") == "websocket":
            await send({"type": "websocket.close", "code": 1003})

    return metrics


def _readable(scope: Any) -> bool:
    """Whether prometheus_client's app can decode what it reads of ``scope``."""
    try:
        scope.get("query_string", b"").decode("utf8")
        for name, value in scope.get("headers", ()):
            if name.decode("utf8").lower() in ("accept", "accept-encoding"):
                value.decode("utf8")
    except UnicodeDecodeError:
        return False
    return True
