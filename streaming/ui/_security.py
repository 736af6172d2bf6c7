"""Who may reach the web UI and what it shows: the loopback rule, the Host check, a token or a password, tracebacks.

Spark's UI leaves access control to servlet filters (``spark.ui.filters``) and ACLs
(``spark.acls.enable``); ours is built in, as ASGI middleware around the pages, the API and
``/metrics``. Secrets are compared with ``hmac.compare_digest``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
from typing import Any, Callable, Iterable
from urllib.parse import urlencode

import attrs

from scheduler import StreamingError

from . import _relay
from ._relay import ConnectionLimits

__all__ = ["LOOPBACK_HOSTS", "RemoteUIRefusedError", "UISecurity", "is_loopback_address", "secure_app"]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""The Host names every UI accepts: this machine's loopback names."""

ALLOW_REMOTE = "spark.aiodstream.ui.allowRemote"
ALLOWED_HOSTS = "spark.aiodstream.ui.allowedHosts"
TOKEN = "spark.aiodstream.ui.token"
USER = "spark.aiodstream.ui.user"
PASSWORD = "spark.aiodstream.ui.password"
SHOW_TRACEBACKS = "spark.aiodstream.ui.showTracebacks"
SETTINGS = (ALLOW_REMOTE, ALLOWED_HOSTS, TOKEN, USER, PASSWORD, SHOW_TRACEBACKS, *_relay.SETTINGS)
"""The Spark settings :meth:`UISecurity.from_settings` reads."""

_REALM = "aiodstream UI"


class RemoteUIRefusedError(StreamingError, ValueError):
    """The web UI was asked to listen beyond loopback without ``spark.aiodstream.ui.allowRemote``."""


def is_loopback_address(address: str) -> bool:
    """Whether ``address`` (an IP literal, as a socket reports it) is a loopback address (IPv4-mapped ones too)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _host_pattern(raw: str) -> str:
    """One allowed Host: a name, an IP literal or ``*.domain`` (``*``: any host), without a port; IPv6 in brackets."""
    host = raw.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        inner = host[1:-1]
    else:
        inner = host
    try:
        ip = ipaddress.ip_address(inner)
    except ValueError:
        ip = None
    if ip is not None:
        return f"[{ip.compressed}]" if ip.version == 6 else str(ip)
    bad = (not host or ":" in host or "/" in host or "*" in host[1:] or (host.startswith("*") and host != "*"
                                                                          and not host.startswith("*.")))
    if bad:
        raise ValueError(f"{ALLOWED_HOSTS} takes host names without a port (a name, an IP address, '*.example.com' "
                         f"or '*' for any host), comma-separated; got {raw!r}")
    return host


def _host_patterns(hosts: str | Iterable[str]) -> tuple[str, ...]:
    """Allowed hosts from a comma-separated string or an iterable of names, checked and normalised."""
    if isinstance(hosts, str):
        hosts = [h for h in hosts.split(",") if h.strip()]
    return tuple(_host_pattern(h) for h in hosts)


def _flag(get: Callable[[str], str | None], key: str) -> bool:
    raw = get(key)
    if raw is None or not raw.strip():
        return False
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, got {raw!r}")
    return value == "true"


@attrs.frozen
class UISecurity:
    """What the web UI lets a visitor reach and see. The default: loopback only, no credentials, no tracebacks.

    With a ``token``, every request needs it: ``Authorization: Bearer <token>`` (scripts,
    Prometheus' ``authorization`` option), or once in a browser ``?token=<token>``, which sets an
    HttpOnly, SameSite=Lax cookie and redirects to the same address without it. With ``user`` and
    ``password``, HTTP basic auth (browsers prompt; Prometheus' ``basic_auth``). With both, either
    works. Without either, the UI is open to whoever reaches its port.

    Args:
        token: the bearer token (``spark.aiodstream.ui.token``); use a long random one
            (``python -c 'import secrets; print(secrets.token_urlsafe(32))'``).
        user: the basic-auth user (``spark.aiodstream.ui.user``), with ``password``.
        password: the basic-auth password (``spark.aiodstream.ui.password``).
        allowed_hosts: more Host names the UI answers (``spark.aiodstream.ui.allowedHosts``):
            names, IP addresses, ``*.example.com``, or ``*`` (no Host check). The UI's own
            address and the loopback names are always allowed.
        allow_remote: let :meth:`StreamingUI.serve` listen beyond loopback
            (``spark.aiodstream.ui.allowRemote``); it logs a warning when it does.
        show_tracebacks: show failures' full tracebacks (``spark.aiodstream.ui.showTracebacks``);
            without it pages and API show each failure's type and message only.
        limits: how many connections :meth:`StreamingUI.serve` holds and how long one may stall
            (``spark.aiodstream.ui.maxConnections``, ``.idleTimeout``, ``.writeTimeout``).

    Raises:
        ValueError: an empty token, a user without a password (or the reverse), a password with
            no user, or a malformed allowed host.
    """

    token: str | None = attrs.field(default=None, repr=False)
    user: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=_host_patterns)
    allow_remote: bool = False
    show_tracebacks: bool = False
    limits: ConnectionLimits = attrs.field(factory=ConnectionLimits)

    def __attrs_post_init__(self) -> None:
        """Check the credentials."""
        if self.token is not None and not self.token.strip():
            raise ValueError(f"{TOKEN} must not be empty; unset it for no token, or use a long random one")
        if (self.user is None) != (self.password is None) or self.user == "" or self.password == "":
            raise ValueError(f"basic auth needs both {USER} and {PASSWORD}, non-empty, got "
                             f"{'a user' if self.user else 'no user'} and {'a password' if self.password else 'no password'}")
        if self.user is not None and ":" in self.user:
            raise ValueError(f"{USER} cannot hold ':' (HTTP basic auth splits the user from the password there), "
                             f"got {self.user!r}")

    @classmethod
    def from_settings(cls, get: Callable[[str], str | None]) -> UISecurity:
        """Read the ``spark.aiodstream.ui.*`` settings (:data:`SETTINGS`) through ``get`` (e.g. ``SparkConf.get``).

        Raises:
            ValueError: a setting's value is malformed (the message names it).
        """
        return cls(token=get(TOKEN) or None, user=get(USER) or None, password=get(PASSWORD) or None,
                   allowed_hosts=_host_patterns(get(ALLOWED_HOSTS) or ""), allow_remote=_flag(get, ALLOW_REMOTE),
                   show_tracebacks=_flag(get, SHOW_TRACEBACKS), limits=ConnectionLimits.from_settings(get))

    @property
    def authentication(self) -> str:
        """How visitors authenticate: ``"token"``, ``"basic"``, ``"token or basic"`` or ``"none"``."""
        methods = [m for m, on in (("token", self.token is not None), ("basic", self.user is not None)) if on]
        return " or ".join(methods) or "none"

    def check_bind(self, host: str, address: str) -> None:
        """Refuse to listen on ``address`` (what ``host`` bound) when it is not loopback and ``allow_remote`` is off.

        Raises:
            RemoteUIRefusedError: naming the address and the setting that allows it.
        """
        if self.allow_remote or is_loopback_address(address):
            return
        shown = host if host == address else f"{host or '(all interfaces)'} ({address})"
        raise RemoteUIRefusedError(
            f"the web UI listens on loopback addresses only unless {ALLOW_REMOTE}=true, got {shown}: anyone who "
            f"reaches that port reads every page, the JSON API and /metrics; listen on 127.0.0.1, or set "
            f"{ALLOW_REMOTE}=true (UISecurity(allow_remote=True); aiodstream ui --allow-remote) together with "
            f"{TOKEN} or {USER} and {PASSWORD}")

    def hosts_for(self, host: str | None, address: str | None, extra: tuple[str, ...] = ()) -> list[str]:
        """The Host names a UI bound to ``host`` (``address``) answers: those, the loopback names, ``extra`` and the allowed ones."""
        names = [*LOOPBACK_HOSTS, *extra, *self.allowed_hosts]
        for name in (host, address):
            if name:
                names.append(_host_pattern(name))
        return list(dict.fromkeys(names))

    # -- credentials --

    def cookie(self) -> tuple[str, str] | None:
        """The browser cookie's name and value a valid ``?token=`` sets (``None`` without a token).

        One name per token, so that UIs on other ports of the same host keep their own (cookies
        ignore ports); the value is derived from the token, not the token: it opens this UI's
        pages but does not tell the token.
        """
        if self.token is None:
            return None
        key = self.token.encode()
        tag = hmac.new(key, b"aiodstream-ui-cookie-name", hashlib.sha256).hexdigest()[:12]
        return f"aiodstream_ui_{tag}", hmac.new(key, b"aiodstream-ui-cookie", hashlib.sha256).hexdigest()

    def token_matches(self, candidate: str) -> bool:
        """Whether ``candidate`` is the token (constant-time)."""
        return self.token is not None and hmac.compare_digest(candidate.encode(), self.token.encode())

    def authenticated(self, authorization: str | None, cookie: str | None = None, expected_cookie: str | None = None) -> bool:
        """Whether a request's ``Authorization`` header, or its cookie (``expected_cookie``: :meth:`cookie`'s value), is valid.

        Every comparison of a secret is constant-time.
        """
        if cookie is not None and expected_cookie is not None and hmac.compare_digest(cookie.encode(), expected_cookie.encode()):
            return True
        scheme, _, value = (authorization or "").strip().partition(" ")
        scheme, value = scheme.lower(), value.strip()
        if scheme == "bearer" and self.token is not None:
            return self.token_matches(value)
        if scheme == "basic" and self.user is not None and self.password is not None:
            try:
                user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            # Both compared, always: the time does not tell whether the user was right.
            user_ok = hmac.compare_digest(user.encode(), self.user.encode())
            password_ok = hmac.compare_digest(password.encode(), self.password.encode())
            return bool(sep) and user_ok and password_ok
        return False

    def challenge(self) -> list[str]:
        """The ``WWW-Authenticate`` challenges of a 401 (basic first: browsers prompt for it)."""
        out = []
        if self.user is not None:
            out.append(f'Basic realm="{_REALM}", charset="UTF-8"')
        if self.token is not None:
            out.append(f'Bearer realm="{_REALM}"')
        return out


def secure_app(app: Any, security: UISecurity, allowed_hosts: list[str] | None) -> Any:
    """``app`` behind the Host check (``allowed_hosts``; ``None``: none) and the credentials ``security`` asks for."""
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    if security.token is not None or security.user is not None:
        app = _Credentials(app, security)
    if allowed_hosts is not None and "*" not in allowed_hosts:
        app = TrustedHostMiddleware(app, allowed_hosts=allowed_hosts, www_redirect=False)
    return app


def _over_https(scope: Any, headers: Any) -> bool:
    """Whether the browser reached the UI over https: directly, or through a TLS-terminating proxy that says so
    (``X-Forwarded-Proto: https`` or ``Forwarded: proto=https``, its first hop). Only the cookie's ``Secure`` flag
    follows it: a forged header makes the cookie stricter, never looser."""
    if scope.get("scheme") == "https":
        return True
    forwarded_proto = headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    first_hop = headers.get("forwarded", "").split(",")[0]
    protos = [part.split("=", 1)[1].strip().strip('"').lower() for part in first_hop.split(";")
              if part.strip().lower().startswith("proto=")]
    return forwarded_proto == "https" or protos[:1] == ["https"]


class _Credentials:
    """ASGI middleware: 401 without valid credentials; a valid ``?token=`` sets the cookie and redirects without it."""

    def __init__(self, app: Any, security: UISecurity) -> None:
        self.app = app
        self.security = security
        self.cookie = security.cookie()  # two HMACs: once, not per request

    def _cookie_of(self, conn: Any) -> tuple[str | None, str | None]:
        """The request's cookie of this UI and the value it must have (``None, None`` without a token)."""
        if self.cookie is None:
            return None, None
        return conn.cookies.get(self.cookie[0]), self.cookie[1]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        from starlette.requests import HTTPConnection
        from starlette.responses import PlainTextResponse, RedirectResponse

        security = self.security
        conn = HTTPConnection(scope)
        offered = conn.query_params.getlist("token")
        if offered and security.token is not None and scope["type"] == "http":
            # The token in the link (once or repeated): a cookie, and the same URL without it. A stale
            # one falls through to the header and the cookie, which may still let the request in.
            if all(security.token_matches(one) for one in offered):
                rest = urlencode([(k, v) for k, v in conn.query_params.multi_items() if k != "token"])
                root = scope.get("root_path", "").rstrip("/")
                # One leading slash: "//host/..." would send the browser to another site.
                target = root + "/" + scope["path"][len(root):].lstrip("/") if scope["path"].startswith(root) else "/"
                response = RedirectResponse(target + (f"?{rest}" if rest else ""), status_code=303,
                                            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})
                assert self.cookie is not None
                response.set_cookie(*self.cookie, path=root or "/",
                                    httponly=True, samesite="lax", secure=_over_https(scope, conn.headers))
                await response(scope, receive, send)
                return
        if security.authenticated(conn.headers.get("authorization"), *self._cookie_of(conn)):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        how = []
        if security.token is not None:
            how.append("its token (an 'Authorization: Bearer <token>' header, or once in a browser: ?token=<token>)")
        if security.user is not None:
            how.append("its user and password (HTTP basic auth)")
        denied = PlainTextResponse(f"401 Unauthorized: this web UI needs {' or '.join(how)}\n", status_code=401,
                                     headers={"Cache-Control": "no-store"})
        for challenge in security.challenge():
            denied.raw_headers.append((b"www-authenticate", challenge.encode()))
        await denied(scope, receive, send)
