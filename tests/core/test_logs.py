"""`bot.logs`: secrets are gone from every record before any handler sees it (message, traceback, stack)."""

from __future__ import annotations

import io
import logging

import pytest

from bot.logs import setup_logging

TOKEN = "123456:SECRET-token-in-a-log"


def another_handler(logger: str = "") -> io.StringIO:
    """A handler the bot did not set up: a file an operator adds to the root logger, or a library's own."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.getLogger(logger).addHandler(handler)
    return stream


def fail_with_token() -> None:
    raise RuntimeError(f"request to https://api.telegram.org/bot{TOKEN}/getMe failed")


@pytest.mark.usefixtures("restored_logging")
def test_neither_a_second_root_handler_nor_a_librarys_own_handler_sees_the_token() -> None:
    """Message arguments and a traceback carrying the token reach other handlers redacted, text intact (a
    library's handler runs before the root logger's)."""
    setup_logging("INFO", (TOKEN,))
    log = logging.getLogger("some.library")
    seen = [another_handler(), another_handler("some.library")]
    log.info("calling %s", f"/bot{TOKEN}/getMe")
    try:
        fail_with_token()
    except RuntimeError:
        log.exception("the call failed")
    for stream in seen:
        text = stream.getvalue()
        assert TOKEN not in text
        assert "calling /bot<redacted>/getMe" in text and "RuntimeError: request to" in text
        assert "fail_with_token" in text  # the traceback is still there


@pytest.mark.usefixtures("restored_logging")
def test_stack_info_never_carries_the_token() -> None:
    """`stack_info=True` renders the caller's stack; a line of it holding the token is redacted."""
    setup_logging("INFO", (TOKEN,))
    seen = another_handler()
    log = logging.getLogger("bot.test")
    log.warning("where am I", stack_info=True, extra={"to": "/bot123456:SECRET-token-in-a-log/getMe"})
    text = seen.getvalue()
    assert "Stack (most recent call last)" in text and "<redacted>" in text
    assert TOKEN not in text
