"""Library logging: quiet until the host configures the standard logging tree, then one record per event."""

from __future__ import annotations

import logging

import pytest

from scheduler._logging import LOGGER_ROOT, event_fields, library_logger
from tests.crash import run_python


def test_events_reach_the_hosts_handlers_with_their_fields(caplog: pytest.LogCaptureFixture) -> None:
    """An event becomes one record: 'event key=value ...' as the message, the fields as record.aiodstream."""
    log = library_logger("aiodstream.test", component="Thing").bind(name="a b")
    with caplog.at_level(logging.INFO, logger=LOGGER_ROOT):
        log.info("batch completed", batch_time=1000, total_delay_ms=5)
        log.debug("not emitted at INFO")
    [record] = caplog.records
    assert record.name == "aiodstream.test" and record.levelno == logging.INFO
    assert record.getMessage() == "batch completed component=Thing name='a b' batch_time=1000 total_delay_ms=5"
    assert event_fields(record) == {"event": "batch completed", "component": "Thing", "name": "a b",
                                    "batch_time": 1000, "total_delay_ms": 5}


def test_an_exception_travels_as_exc_info(caplog: pytest.LogCaptureFixture) -> None:
    """log.exception() and exc_info= hand the exception to the standard record, so handlers print its traceback."""
    log = library_logger("aiodstream.test")
    with caplog.at_level(logging.ERROR, logger=LOGGER_ROOT):
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("job failed", job="j")
    [record] = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is ValueError
    assert record.getMessage() == "job failed job=j"


def test_disabled_levels_run_no_processor() -> None:
    """A level the standard logger does not emit returns before any processor runs."""
    calls: list[str] = []
    log = library_logger("aiodstream.test.quiet")
    log._processors = [lambda *a: calls.append("ran")]  # type: ignore[attr-defined]
    logging.getLogger("aiodstream.test.quiet").setLevel(logging.WARNING)
    try:
        log.debug("x")
        log.info("y")
        assert calls == []
    finally:
        logging.getLogger("aiodstream.test.quiet").setLevel(logging.NOTSET)


def test_names_outside_the_tree_are_refused() -> None:
    """A logger outside 'aiodstream' would bypass the NullHandler: refused with the rule and a fix."""
    with pytest.raises(ValueError, match=r"^library loggers live under 'aiodstream', got 'other'; pass e\.g\. 'aiodstream\.scheduler'$"):
        library_logger("other")


def test_nothing_is_printed_unless_the_host_configures_logging() -> None:
    """In a fresh process, warnings and errors of aiodstream loggers print nothing; after basicConfig they do."""
    code = (
        "import logging\n"
        "from scheduler._logging import library_logger\n"
        "log = library_logger('aiodstream.x', component='C')\n"
        "log.warning('quiet warning'); log.error('quiet error')\n"
        "print('program output')\n"
        "logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s %(message)s')\n"
        "log.info('now heard', n=1); log.debug('still quiet')\n"
    )
    result = run_python(["-c", code], timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "program output\n"
    assert result.stderr == "INFO aiodstream.x now heard component=C n=1\n"
