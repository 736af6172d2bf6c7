"""The web UI's listening socket: its port checked, bound on the host asked (or the next free ports), before it listens."""

from __future__ import annotations

import errno
import socket
from typing import Callable

__all__ = ["check_port", "listen", "machine_names"]


def check_port(port: object) -> int:
    """``port`` if it is a TCP port number (0: any free one), else a ValueError naming it."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"the UI port must be an int from 0 to 65535 (0: any free port), got {port!r}")
    return port


def machine_names() -> tuple[str, ...]:
    """This machine's host name, which a UI bound to every interface answers too (when it is a valid Host)."""
    name = socket.gethostname().strip().lower()
    return (name,) if name and all(c.isalnum() or c in "-." for c in name) else ()


def listen(host: str, port: int, retries: int, check: Callable[[str], None] = lambda address: None) -> socket.socket:
    """A listening socket on ``host:port`` (or the next ``retries`` ports); ``check`` sees the bound address before it listens."""
    check_port(port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    last: OSError | None = None
    for candidate in range(port, min(65535, port + max(0, retries)) + 1) if port else (0,):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, candidate))
        except OSError as exc:
            sock.close()
            if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:  # the host is wrong, not the port
                raise OSError(exc.errno, f"cannot serve the web UI on {host}: {exc.strerror}; give a host name or "
                                         "address of this machine (spark.aiodstream.ui.host, --host)") from None
            last = exc
            continue
        try:
            check(sock.getsockname()[0])  # bound, not listening yet: nobody has reached it
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        return sock
    assert last is not None
    tried = f"{host}:{port}" if not retries else f"{host}:{port}-{min(65535, port + retries)}"
    raise OSError(last.errno, f"cannot serve the web UI on {tried}: {last.strerror}; pick another port "
                              "(uiPort, spark.aiodstream.ui.port) or 0 for any free one")
