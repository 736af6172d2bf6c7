"""Credentials out of everything shown: URIs' passwords and secret-looking query parameters (Spark's ``spark.redaction.regex``).

A checkpoint URI may carry credentials (``s3a://KEY:SECRET@bucket/x``, ``ftp://user:pass@host/x``,
``...?sig=...&token=...``). Every message, log event, listener event, page and command-line line
that shows a URI or a traceback goes through :func:`redact_uri` first; I/O keeps the real URI.
"""

from __future__ import annotations

import re
import traceback

__all__ = ["REDACTED", "REDACTION_PATTERN", "redact_uri", "redacted_traceback"]

REDACTED = "***"
"""What a secret is replaced with."""

REDACTION_PATTERN = re.compile(r"(?i)secret|password|token|access[.]?key|credential")
"""Spark's default ``spark.redaction.regex`` (Spark 4): a query parameter whose name matches it has its value redacted."""

# Parameters that carry a secret in URIs although Spark's pattern (made for setting names) misses
# them: signatures of pre-signed and SAS URLs, API keys.
_URI_SECRET_NAMES = re.compile(r"(?i)sig|signature|x-amz-signature|key|api[_-]?key|access[_-]key|auth|pass|pwd")

# The authority's userinfo: "scheme://user:password@". The password runs to the authority's last
# "@" (an unencoded "@" in a password is common enough), never past its end ("/", "?", "#").
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s'\"]*):[^/?#\s'\"]*@")
# A query or matrix parameter "name=value" after "?", "&" or ";".
_PARAMETER = re.compile(r"(?P<head>[?&;](?P<name>[^=&;#?\s'\"/]+)=)[^&;#\s'\"]*")


def _parameter(match: re.Match[str]) -> str:
    name = match.group("name")
    secret = REDACTION_PATTERN.search(name) or _URI_SECRET_NAMES.fullmatch(name)
    return match.group("head") + REDACTED if secret else match.group(0)


def redact_uri(text: str) -> str:
    """``text`` with the password of every URI's userinfo and every secret-looking parameter value replaced by ``***``.

    A parameter looks secret when its name matches :data:`REDACTION_PATTERN` (Spark's), or is
    one of the names URIs carry secrets in (``sig``, ``signature``, ``key``, ``api_key``,
    ``access_key``, ``auth``, ``pass``, ``pwd``, any case).

    Works on a bare URI and on any text that contains URIs (an error message, a traceback):
    ``s3a://KEY:SECRET@bucket/x`` becomes ``s3a://KEY:***@bucket/x`` and
    ``https://h/x?X-Amz-Security-Token=abc&part=1`` becomes ``https://h/x?X-Amz-Security-Token=***&part=1``.
    A user name without a password is kept, as are paths and other parameters. Text without
    ``@`` or ``=`` is returned as it is, at the cost of two scans.
    """
    if "@" in text:
        text = _USERINFO.sub(rf"\g<head>:{REDACTED}@", text)
    if "=" in text:
        text = _PARAMETER.sub(_parameter, text)
    return text


def redacted_traceback(exc: BaseException) -> str:
    """``exc`` formatted with its traceback and causes (``traceback.format_exception``), credentials redacted."""
    return redact_uri("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
