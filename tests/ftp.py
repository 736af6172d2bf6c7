"""An FTP server on 127.0.0.1 for tests: a checkpoint file system that is neither the driver's disk nor POSIX.

The driver reaches it through Hadoop's ``FTPFileSystem`` (in pyspark's jars), the executors'
Python tasks through fsspec's FTP client: both sides of a checkpoint on a remote file system,
on one machine. The server (pyftpdlib) runs in threads of the test process and serves one
directory; ``uri`` names it with the test user's credentials.
"""

from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path
from types import TracebackType

with warnings.catch_warnings():  # before Python 3.12 pyftpdlib uses the standard library's deprecated asyncore
    warnings.simplefilter("ignore", DeprecationWarning)
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import ThreadedFTPServer

__all__ = ["FtpServer"]

logging.getLogger("pyftpdlib").setLevel(logging.WARNING)


class FtpServer:
    """Serves ``root`` on a free port of 127.0.0.1 until closed (a context manager)."""

    user, password = "spark", "streaming"

    def __init__(self, root: Path) -> None:
        """Start serving ``root`` (created if missing) to the test user, with every permission."""
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        authorizer = DummyAuthorizer()
        authorizer.add_user(self.user, self.password, str(root), perm="elradfmwMT")
        handler = type("Handler", (FTPHandler,), {"authorizer": authorizer, "banner": "aiodstream test FTP"})
        self._server = ThreadedFTPServer(("127.0.0.1", 0), handler)
        self.port = self._server.socket.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="test-ftp-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        # One poll at a time, and the close on this same thread: closing the server from another thread while this one
        # polls its epoll descriptor raised EBADF here (a test's teardown error, at random).
        while not self._stop.is_set():
            self._server.serve_forever(timeout=0.2, blocking=False, handle_exit=False)
        self._server.close_all()

    def uri(self, path: str = "") -> str:
        """``ftp://user:password@127.0.0.1:port/<path>``."""
        return f"ftp://{self.user}:{self.password}@127.0.0.1:{self.port}/{path.lstrip('/')}"

    def close(self) -> None:
        """Stop serving and close every connection."""
        self._stop.set()
        self._thread.join(timeout=10)

    def __enter__(self) -> FtpServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
