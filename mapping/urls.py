"""What a person should know about a URL before consenting to open it. Pure.

The spec asks clients to show the full URL and its host, and to warn about ambiguous hosts; a URL that is
not a web address (`javascript:`, `file:`, `data:`, ...) is never offered as a link at all.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

WEB_SCHEMES: Final = frozenset({"https", "http"})


@dataclass(frozen=True, slots=True)
class UrlCheck:
    """A URL as a consent card presents it."""

    url: str
    scheme: str
    host: str
    """The host as written (lowercase, Punycode kept), or "" when there is none."""
    display_host: str
    """The host decoded from Punycode, for the warning; equals `host` otherwise."""
    openable: bool
    """Only http(s) URLs with a host may become a button."""
    warnings: tuple[str, ...]


def check_url(url: str) -> UrlCheck:
    """Inspect `url` without fetching anything; never raises."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
        scheme = parts.scheme.lower()
    except ValueError:
        return UrlCheck(url, "", "", "", False, ("this is not a valid URL",))
    warnings: list[str] = []
    openable = scheme in WEB_SCHEMES and bool(host) and not any(c.isspace() for c in url.strip())
    if scheme not in WEB_SCHEMES:
        warnings.append(f"not a web address ({scheme or 'no'} scheme); it will not be opened")
    elif scheme == "http":
        warnings.append("not encrypted (http, not https)")
    if scheme in WEB_SCHEMES and not host:
        warnings.append("the URL has no host")
    if any(c.isspace() for c in url.strip()):
        warnings.append("the URL contains spaces")
    display_host = host
    if any(label.startswith("xn--") for label in host.split(".")):
        try:
            display_host = host.encode("ascii").decode("idna")
        except UnicodeError:
            display_host = host
        warnings.append(
            f"the host is Punycode; it displays as {display_host!r}, which may imitate another site"
        )
    elif host and not host.isascii():
        warnings.append("the host contains non-ASCII characters, which may imitate another site")
    if host and _is_ip(host):
        warnings.append("the host is a bare IP address, not a domain name")
    if parts.username or parts.password:
        warnings.append("the URL carries a user name before the host, a common way to disguise where it goes")
    return UrlCheck(url, scheme, host, display_host, openable, tuple(warnings))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
