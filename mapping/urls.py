"""What a person should know about a URL before consenting to open it. Pure (ada-url parses, nothing is fetched).

The spec asks clients to show the full URL and its host, and to warn about ambiguous hosts. A card must show
what a browser would open, so the URL is parsed as browsers parse it (the WHATWG URL standard, by ada-url),
never by hand: `https://evil.com\\@good.com/` goes to `evil.com`, `https://2130706433/` to `127.0.0.1`,
`https://good。com/` to `good.com`. What a card shows is the parser's serialisation (`href`): it is ASCII
only (everything else is percent-encoded, hosts are Punycode), so nothing in it can be invisible or turn
the text around. A URL that is not a web address (`javascript:`, `file:`, `data:`, ...) is never offered as a
link at all, and one too long to show whole is never a button either.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

import ada_url

WEB_SCHEMES: Final = frozenset({"https", "http"})

MAX_SHOWN_URL: Final = 1000
"""The longest URL (as a browser serialises it) that a card shows whole and so may offer as a link.

A card is one Telegram message of at most 4,096 characters and also carries the server's name, its
message (clipped to 1,000 characters on a link card) and the warnings; 1,000 characters of URL is about
25 lines on a phone, still something a person can look over, and more than sign-in links need (an OAuth
authorization URL with PKCE, state, scopes and a resource is a few hundred characters)."""
MAX_HOST: Final = 253
"""The longest host name DNS allows; a longer host cannot be shown whole either."""
_SHOWN_HEAD: Final = 400
_SHOWN_TAIL: Final = 200
"""How much of the start and of the end of a too-long URL a card shows."""

_C0_AND_SPACE: Final = "".join(map(chr, range(0x21)))
"""What browsers strip from both ends of a URL before parsing it."""
_BIDI_CONTROLS: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Characters that change the direction text is laid out in (ALM, LRM, RLM, embeddings, overrides, isolates)."""
_INVISIBLE_EXTRA: Final = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u2800\u3164\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
"""Characters that show as nothing but are not format characters (category Cf): the default-ignorable
combining grapheme joiner, Khmer vowels and variation selectors, the Hangul fillers, and the blank braille
pattern."""
_INVISIBLE_CATEGORIES: Final = frozenset({"Cf", "Cn", "Co", "Cs"})
"""Format characters (zero-width spaces and joiners, soft hyphen, word joiner, tags, ...), and code points
that are unassigned, private-use or lone surrogates: none of them shows reliably."""
_SPACE_CATEGORIES: Final = frozenset({"Cc", "Zs", "Zl", "Zp"})
"""Controls (tab, line feed, ...) and spaces of any width: browsers drop tabs and line breaks silently."""
_NAMED: Final = 3
"""How many distinct suspicious characters a warning names."""


@dataclass(frozen=True, slots=True)
class UrlCheck:
    """A URL as a consent card presents it."""

    url: str
    """As the server sent it."""
    href: str
    """What a browser opens: the URL as the WHATWG parser serialises it (ASCII only); "" when it is not a
    valid URL. Links and buttons carry this, so every client opens exactly what the card shows."""
    scheme: str
    """Lowercase, without the colon; "" when the URL is not valid."""
    host: str
    """The host the browser connects to: after IDNA (Punycode kept) and IPv4 normalisation (dotted decimal),
    IPv6 in brackets; "" when there is none."""
    display_host: str
    """The host decoded from Punycode, for the warning; equals `host` otherwise."""
    openable: bool
    """A valid http(s) URL with a host: it may be shown on a card (and, unless too long, consented to)."""
    too_long: bool
    """Too long to show whole (`MAX_SHOWN_URL`, `MAX_HOST`): shown cut, never a button."""
    warnings: tuple[str, ...]
    """Each names one reason to be careful, in words a person can act on."""

    @property
    def consentable(self) -> bool:
        """Whether a card may offer to open it: a web address shown whole."""
        return self.openable and not self.too_long

    @property
    def shown(self) -> str:
        """The URL as a card shows it: `href` whole, or its start and end around " … " when too long (the
        "…" cannot be part of an `href`, which is ASCII). An invalid URL shows with its invisible and
        control characters written as <U+XXXX>."""
        text = self.href or _visible(self.url.strip(_C0_AND_SPACE))
        if len(text) <= MAX_SHOWN_URL:
            return text
        return f"{text[:_SHOWN_HEAD]} … {text[-_SHOWN_TAIL:]}"


def check_url(url: str) -> UrlCheck:
    """Inspect `url` as a browser would parse it, without fetching anything; never raises."""
    raw = url.strip(_C0_AND_SPACE)
    try:
        parts = ada_url.parse_url(url)
    except ValueError:
        invalid = ("this is not a valid URL", *_character_warnings(raw, decoded=""))
        return UrlCheck(url, "", "", "", "", False, len(_visible(raw)) > MAX_SHOWN_URL, invalid)
    href, host = parts["href"], parts["hostname"]
    scheme = parts["protocol"].removesuffix(":")
    web = scheme in WEB_SCHEMES
    warnings: list[str] = []
    if not web:
        warnings.append(f"not a web address ({scheme} scheme); it will not be opened")
    elif scheme == "http":
        warnings.append("not encrypted (http, not https)")
    display_host = host
    if host:
        ip = _ip_address(host)
        punycode = any(label.startswith("xn--") for label in host.split("."))
        if not punycode and not _written_as_is(raw, host):
            written = {
                None: "in a disguised form (percent-escapes, look-alikes or zero-width characters)",
                4: "as a number in an unusual form (hexadecimal, octal or one number)",
                6: "as an IPv6 address in another form",
            }[ip.version if ip is not None else None]
            warnings.append(f"the host is written {written} that browsers read as {host}")
        if punycode:
            display_host = ada_url.idna_to_unicode(host) or host
            warnings.append(
                f"the host is Punycode; it displays as {_clip(display_host, 100)!r}, which may imitate another site"
            )
        if ip is not None:
            warnings.append(f"the host is a bare IP address{_ip_kind(ip)}, not a domain name")
        if host.endswith("."):
            warnings.append("the host ends with a dot, an unusual way of writing it that some filters miss")
    if parts["username"] or parts["password"]:
        credentials = "a user name and password" if parts["password"] else "a user name"
        warnings.append(
            f"the URL carries {credentials} before the host ({_clip(parts['username'], 60)!r}), a common way "
            "to disguise where it goes"
        )
    if web and "\\" in raw:
        warnings.append(f"the URL contains a backslash, which browsers read as '/'; it goes to {host}")
    # In the text as sent, and behind percent-escapes (address bars show them decoded).
    warnings += _character_warnings(raw, decoded=unquote(href, errors="replace"))
    too_long = len(href) > MAX_SHOWN_URL or len(host) > MAX_HOST
    return UrlCheck(url, href, scheme, host, display_host, web and bool(host), too_long, tuple(warnings))


def _written_as_is(raw: str, host: str) -> bool:
    """Whether the normalised host appears as written in the URL, as a whole authority-like word.

    A heuristic (the parser does not report the host as written): it spots hosts that reach their final form
    only through percent-escapes, IDNA mapping (fullwidth letters and dots) or number parsing; a host that
    also appears in the user name or the path slips past it, and the card shows the real host anyway.
    """
    pattern = r"(?:^|[/\\@:])" + re.escape(host) + r"(?:$|[/\\:?#])"
    return re.search(pattern, raw, re.IGNORECASE) is not None


def _ip_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def _ip_kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return f" ({ip}: this device itself)"
    if ip.is_private or ip.is_link_local:
        return f" ({ip}: a private network address)"
    return f" ({ip})"


def _character_warnings(raw: str, decoded: str) -> list[str]:
    """One warning per kind of character that hides or rearranges what the URL says: in `raw` (the URL as
    sent) any of them; in `decoded` (its percent-escapes decoded) the invisible and direction-changing
    ones only, since an escaped space or line break is ordinary there (`scope=openid%20email`)."""
    sent, hidden = set(raw), set(decoded)
    bidi = sorted((sent | hidden) & _BIDI_CONTROLS)
    invisible = sorted(c for c in sent | hidden if c not in _BIDI_CONTROLS and _is_invisible(c))
    spaces = sorted(c for c in sent if unicodedata.category(c) in _SPACE_CATEGORIES)
    warnings = []
    if bidi:
        warnings.append(
            f"the URL contains text-direction controls ({_names(bidi)}), which make it read differently from "
            "where it goes"
        )
    if invisible:
        warnings.append(f"the URL contains invisible characters ({_names(invisible)}), which can disguise it")
    if spaces:
        warnings.append(
            f"the URL contains spaces or control characters ({_names(spaces)}), which browsers drop or encode"
        )
    return warnings


def _is_invisible(c: str) -> bool:
    return c in _INVISIBLE_EXTRA or unicodedata.category(c) in _INVISIBLE_CATEGORIES


def _names(chars: list[str]) -> str:
    named = [_name(c) for c in chars[:_NAMED]]
    return ", ".join(named) + (f" and {len(chars) - _NAMED} more" if len(chars) > _NAMED else "")


def _name(c: str) -> str:
    name = unicodedata.name(c, "")
    return f"U+{ord(c):04X} {name}" if name else f"U+{ord(c):04X}"


def _visible(text: str) -> str:
    """`text` with every invisible, direction-changing or control character written as <U+XXXX>."""
    return "".join(
        f"<U+{ord(c):04X}>"
        if c in _BIDI_CONTROLS
        or _is_invisible(c)
        or (unicodedata.category(c) in _SPACE_CATEGORIES and c != " ")
        else c
        for c in text
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
