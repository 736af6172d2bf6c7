"""Library logging: structlog-style bound loggers that write through the standard ``logging`` tree, quiet by default.

A library never configures logging. Every aiodstream logger is a structlog bound logger over a
standard-library logger under ``aiodstream``, which carries a ``NullHandler``: without a handler
configured by the host nothing is printed (not even Python's last-resort warnings); once the host
configures logging (``logging.basicConfig``, a structlog ``ProcessorFormatter``, ...) each event
reaches its handlers as one record whose message reads ``event key=value ...`` and whose
``aiodstream`` attribute holds the event's fields as a dict.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any, Mapping, MutableMapping

import structlog

from ._redaction import redact_uri

__all__ = ["LOGGER_ROOT", "LibraryLogger", "event_fields", "library_logger"]

LOGGER_ROOT = "aiodstream"
"""The standard-library logger every aiodstream logger is under."""

logging.getLogger(LOGGER_ROOT).addHandler(logging.NullHandler())

_METHOD_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
                  "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL}


def _to_record(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The last processor: the positional and keyword arguments of the standard logger's call."""
    exc_info = event_dict.pop("exc_info", None)
    fields = dict(event_dict)
    event = fields.pop("event", "")
    text = " ".join([str(event), *(f"{key}={_text(value)}" for key, value in fields.items())])
    kwargs: dict[str, Any] = {"extra": {"aiodstream": {"event": event, **fields}}}
    if exc_info:
        kwargs["exc_info"] = exc_info
    return (text,), kwargs


def _redact_fields(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Credentials out of every event: a URI's password or secret parameter in a field becomes ``***``.

    Strings are redacted in place; an exception (a field, or ``exc_info``) whose text would show a
    credential is replaced by its redacted text (for ``exc_info``: a ``traceback`` field), since
    the host's handler would format it as it is. Other values are kept as they are.
    """
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = redact_uri(value)
        elif isinstance(value, BaseException) and key != "exc_info":
            text = f"{type(value).__name__}: {value}"
            if redact_uri(text) != text:
                event_dict[key] = redact_uri(text)
    exc_info = event_dict.get("exc_info")
    if exc_info:
        exc = sys.exc_info()[1] if exc_info is True else exc_info if isinstance(exc_info, BaseException) else (
            exc_info[1] if isinstance(exc_info, tuple) else None)
        if isinstance(exc, BaseException):
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
            if redact_uri(text) != text:
                event_dict["exc_info"] = None
                event_dict["traceback"] = redact_uri(text)
    return event_dict


def _text(value: Any) -> str:
    """A field's value in the message: strings quoted only when they hold spaces, anything else as ``str``."""
    if isinstance(value, str):
        return repr(value) if not value or any(c.isspace() for c in value) else value
    return str(value)


class LibraryLogger(structlog.stdlib.BoundLogger):
    """A structlog bound logger over a standard one that skips all work for a level its logger does not emit.

    The level check (``Logger.isEnabledFor``, cached by ``logging``) comes before any processor
    runs, so a debug line in a hot path costs one call when debug is off.
    """

    def is_enabled_for(self, level: int) -> bool:
        """Whether an event at ``level`` (``logging.DEBUG``, ...) would be emitted: guard fields that cost to compute."""
        return bool(self._logger.isEnabledFor(level))

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        """Log at DEBUG, if the standard logger emits DEBUG."""
        if not self._logger.isEnabledFor(logging.DEBUG):
            return None
        return self._proxy_to_logger("debug", event, *args, **kw)

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        """Log at INFO, if the standard logger emits INFO."""
        if not self._logger.isEnabledFor(logging.INFO):
            return None
        return self._proxy_to_logger("info", event, *args, **kw)

    def warning(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        """Log at WARNING, if the standard logger emits WARNING."""
        if not self._logger.isEnabledFor(logging.WARNING):
            return None
        return self._proxy_to_logger("warning", event, *args, **kw)

    def error(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        """Log at ERROR, if the standard logger emits ERROR."""
        if not self._logger.isEnabledFor(logging.ERROR):
            return None
        return self._proxy_to_logger("error", event, *args, **kw)


def library_logger(name: str, /, **context: Any) -> LibraryLogger:
    """A logger named ``name`` (under :data:`LOGGER_ROOT`) bound to ``context``, e.g. ``component="JobScheduler"``.

    Args:
        name: the standard-library logger's name; it must be ``aiodstream`` or start with ``aiodstream.``.
        context: key-value pairs every event of this logger carries.

    Raises:
        ValueError: ``name`` is outside the ``aiodstream`` tree (its events would escape the NullHandler).
    """
    if name != LOGGER_ROOT and not name.startswith(f"{LOGGER_ROOT}."):
        raise ValueError(f"library loggers live under {LOGGER_ROOT!r}, got {name!r}; pass e.g. 'aiodstream.scheduler'")
    processors: list[Any] = [structlog.processors.StackInfoRenderer(), _redact_fields, _to_record]
    logger = LibraryLogger(logging.getLogger(name), processors=processors, context=dict(context))
    return logger


def event_fields(record: logging.LogRecord) -> Mapping[str, Any] | None:
    """The fields of an aiodstream event carried by a standard log record (``None`` for other records)."""
    fields = getattr(record, "aiodstream", None)
    return fields if isinstance(fields, Mapping) else None
