"""`check_url`: the host a browser would open and the warnings a person needs, for tricky URLs."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mapping.urls import MAX_HOST, MAX_SHOWN_URL, check_url

WARNING_KINDS = {
    "scheme": "not a web address",
    "http": "not encrypted",
    "invalid": "not a valid URL",
    "ip": "bare IP address",
    "written": "the host is written",
    "punycode": "Punycode",
    "dot": "ends with a dot",
    "userinfo": "user name",
    "backslash": "backslash",
    "bidi": "text-direction controls",
    "invisible": "invisible characters",
    "spaces": "spaces or control characters",
}


def kinds(warnings: tuple[str, ...]) -> set[str]:
    """The kind of each warning (by the words it must contain); a warning of no known kind fails the test."""
    found = set()
    for warning in warnings:
        (kind,) = [k for k, words in WARNING_KINDS.items() if words in warning]
        found.add(kind)
    return found


# (url, host a browser connects to, warning kinds, may be shown with a consent button)
TABLE = [
    ("https://evil.com\\@good.com/", "evil.com", {"backslash"}, True),
    ("https://0x7f.0.0.1/", "127.0.0.1", {"ip", "written"}, True),
    ("https://2130706433/", "127.0.0.1", {"ip", "written"}, True),
    ("https://0177.0.0.1/", "127.0.0.1", {"ip", "written"}, True),
    ("https://0x7f.1/", "127.0.0.1", {"ip", "written"}, True),
    ("https://[::1]/", "[::1]", {"ip"}, True),
    ("https://[::ffff:127.0.0.1]/", "[::ffff:7f00:1]", {"ip", "written"}, True),
    ("http://192.168.1.1/login", "192.168.1.1", {"ip", "http"}, True),
    ("https://good.com@evil.com", "evil.com", {"userinfo"}, True),
    ("https://evil.com%2F@good.com", "good.com", {"userinfo"}, True),
    ("https://user:pass@good.com/", "good.com", {"userinfo"}, True),
    ("https://go\tod.com/", "good.com", {"written", "spaces"}, True),
    ("https://good.com/a\nb", "good.com", {"spaces"}, True),
    ("https://good.com/a b", "good.com", {"spaces"}, True),
    ("HTTPS://GOOD.COM/", "good.com", set(), True),
    ("javascript:alert(1)", "", {"scheme"}, False),
    ("JaVaScRiPt:alert(1)", "", {"scheme"}, False),
    ("data:text/html,<script>alert(1)</script>", "", {"scheme"}, False),
    ("file:///etc/passwd", "", {"scheme"}, False),
    ("ftp://good.com/", "good.com", {"scheme"}, False),
    ("https://good.com./", "good.com.", {"dot"}, True),
    ("https://good。com/", "good.com", {"written"}, True),
    ("https://ｇｏｏｄ.com/", "good.com", {"written"}, True),
    ("https://ⓖood.com/", "good.com", {"written"}, True),
    ("https://%65vil.com/", "evil.com", {"written"}, True),
    ("https://аpple.com/", "xn--pple-43d.com", {"punycode"}, True),  # Cyrillic а: an IDN homograph
    ("https://xn--80ak6aa92e.com/", "xn--80ak6aa92e.com", {"punycode"}, True),
    ("https://good.com/\u202egnp.exe", "good.com", {"bidi"}, True),
    ("https://good.com/?q=\u2067x", "good.com", {"bidi"}, True),
    ("https://good.com/#x\u200f", "good.com", {"bidi"}, True),
    ("https://a\u202e@good.com/", "good.com", {"bidi", "userinfo"}, True),
    ("https://good.com/%E2%80%AE", "good.com", {"bidi"}, True),
    ("https://\u200bgood.com/", "good.com", {"written", "invisible"}, True),
    ("https://go\u00adod.com/", "good.com", {"written", "invisible"}, True),
    ("https://good.com/\ufeffx", "good.com", {"invisible"}, True),
    ("https://good.com/\u3164", "good.com", {"invisible"}, True),
    ("https://exa mple.com/", "", {"invalid", "spaces"}, False),
    ("https://good.com\ud800/", "", {"invalid", "invisible"}, False),
    ("http://good.com/", "good.com", {"http"}, True),
    ("https://good.com:8443/x?scope=openid%20email&state=a+b", "good.com", set(), True),
    ("  https://good.com/  ", "good.com", set(), True),
]


@pytest.mark.parametrize(
    ("url", "host", "warnings", "consentable"), TABLE, ids=[repr(row[0]) for row in TABLE]
)
def test_each_tricky_url_shows_the_host_a_browser_opens_and_says_why_to_be_careful(
    url: str, host: str, warnings: set[str], consentable: bool
) -> None:
    """The host is the one a browser connects to; the warnings are exactly the ones the URL deserves."""
    check = check_url(url)
    assert check.host == host
    assert kinds(check.warnings) == warnings, check.warnings
    assert check.openable is consentable
    assert (check.openable and not check.too_long) is consentable


def test_the_link_is_what_the_browser_opens() -> None:
    """A button carries the parser's serialisation, so no client can read the URL differently."""
    check = check_url("https://evil.com\\@good.com/")
    assert check.href == "https://evil.com/@good.com/" and check.shown == check.href
    assert check_url("https://good.com/\u202egnp.exe").href == "https://good.com/%E2%80%AEgnp.exe"


def test_warnings_name_the_hidden_characters_and_the_disguised_host() -> None:
    """A warning says which character it found and which host the browser reads."""
    (bidi,) = check_url("https://good.com/\u202egnp.exe").warnings
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in bidi
    written, ip = check_url("https://0x7f.0.0.1/").warnings
    assert "127.0.0.1" in written and "this device" in ip
    (userinfo,) = check_url("https://good.com@evil.com").warnings
    assert "'good.com'" in userinfo
    (punycode,) = check_url("https://аpple.com/").warnings
    assert "'аpple.com'" in punycode


def test_a_url_of_the_limit_is_shown_whole_and_one_longer_is_cut() -> None:
    """Up to MAX_SHOWN_URL characters a link is shown whole; beyond, only its start and end, never a button."""
    base = "https://good.com/"
    whole = check_url(base + "a" * (MAX_SHOWN_URL - len(base)))
    assert not whole.too_long and whole.consentable and whole.shown == whole.href
    cut = check_url(base + "a" * (MAX_SHOWN_URL - len(base)) + "b" * 200 + "END")
    assert cut.too_long and cut.openable and not cut.consentable
    assert cut.host == "good.com"
    assert cut.shown.startswith(base) and cut.shown.endswith("END") and " … " in cut.shown
    assert len(cut.shown) < MAX_SHOWN_URL


def test_a_host_longer_than_dns_allows_is_never_a_button() -> None:
    """A host that cannot be shown whole makes the URL too long even when the URL itself is short enough."""
    label = "a" * 60
    check = check_url(f"https://{'.'.join([label] * 5)}.com/")
    assert len(check.host) > MAX_HOST and len(check.href) <= MAX_SHOWN_URL
    assert check.too_long and not check.consentable


def test_an_invalid_url_shows_its_hidden_characters() -> None:
    """What cannot be parsed is shown with its invisible characters written out."""
    check = check_url("https://exa\u200dmple .com/")
    assert not check.openable and "<U+200D>" in check.shown


def _hidden(c: str) -> bool:
    return unicodedata.category(c) in {"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"}


@given(st.text() | st.builds(lambda s: "https://" + s, st.text()))
def test_any_text_is_checked_without_raising_and_what_is_shown_hides_nothing(url: str) -> None:
    """Any string: no exception; a shown URL has no invisible characters and fits a card."""
    check = check_url(url)
    assert not any(_hidden(c) for c in check.shown)
    assert len(check.shown) <= MAX_SHOWN_URL or check.too_long
    if check.openable:
        assert check.href.isascii() and check.scheme in ("http", "https") and check.host


@given(st.builds(lambda host, path: f"https://{host}/{path}", st.text(min_size=1, max_size=30), st.text()))
def test_the_link_goes_where_the_card_says(url: str) -> None:
    """Opening the shown link (parsing it again, as the browser does) reaches the same host."""
    check = check_url(url)
    if check.openable:
        again = check_url(check.href)
        assert again.host == check.host and again.href == check.href
