"""Telegram's message-text rules: HTML parse_mode to plain text + entities, length limits, /command entities.

Pure. Stricter than Telegram in one way, on purpose: a bare "&" or an unknown named entity is an error here
(Telegram's docs require escaping them; its server tolerates some), so unescaped text fails in tests.
"""

from __future__ import annotations

import html
import re
from typing import Final

from .model import JSON, ApiReject, bad_request

MAX_TEXT: Final = 4096
"""Characters after entity parsing; counted in code points (one live measurement, see telegram.md §2)."""

_ENTITY_TYPE: Final = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline", "ins": "underline",
    "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough", "span": "spoiler",
    "tg-spoiler": "spoiler", "a": "text_link", "code": "code", "pre": "pre", "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}  # fmt: skip
_NAMED: Final = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_SPECIAL = re.compile(r"[<&]")
_CHAR_REF = re.compile(r"&(?:#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6})|([a-zA-Z][a-zA-Z0-9]*));")
_TAG_NAME = re.compile(r"[a-zA-Z0-9-]*")
_ATTRS_AND_CLOSE = re.compile(r"""((?:\s+[a-zA-Z-]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'>]+))?)*)\s*/?>""")
_ATTR = re.compile(r"""([a-zA-Z-]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")
_END_TAG = re.compile(r"</([a-zA-Z0-9-]*)\s*>")
_COMMAND = re.compile(r"(?<![\w/])/[a-zA-Z0-9_]{1,64}(?:@[a-zA-Z0-9_]{3,32})?")


def utf16_len(s: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's entity offsets."""
    return len(s.encode("utf-16-le")) // 2


def message_text(text: object, parse_mode: object) -> tuple[str, str, tuple[JSON, ...]]:
    """Validate a sendMessage/editMessageText `text` the way Telegram does.

    Returns (plain text, raw HTML, entities).

    Raises:
        ApiReject: 400 with Telegram's description (empty, too long, can't parse entities).
    """
    if not isinstance(text, str) or not text.strip():
        raise bad_request("message text is empty")
    mode = str(parse_mode or "").lower()
    if mode == "html":
        plain, entities = parse_html(text)
        source = text
    elif mode == "":
        plain, entities, source = text, (), html.escape(text, quote=False)
    elif mode in ("markdown", "markdownv2"):
        raise bad_request(f"the fake Telegram server does not implement parse_mode {parse_mode}")
    else:
        raise bad_request(f"unsupported parse_mode {parse_mode}")
    if not plain.strip():
        raise bad_request("message text is empty")
    if len(plain) > MAX_TEXT:
        raise bad_request("message is too long")
    return plain, source, entities


def parse_html(source: str) -> tuple[str, tuple[JSON, ...]]:
    """HTML parse_mode → (plain text, entities), with tdlib's error wording.

    Raises:
        ApiReject: "can't parse entities: ..." for unsupported or unbalanced tags and bad entities.
    """
    out: list[str] = []
    offset = 0  # UTF-16 offset of the next plain character
    open_tags: list[tuple[str, int, JSON]] = []  # (tag, start offset, extra entity fields)
    entities: list[JSON] = []
    pos = 0
    for special in _SPECIAL.finditer(source):
        if special.start() < pos:
            continue  # inside a tag or entity already consumed
        chunk = source[pos : special.start()]
        out.append(chunk)
        offset += utf16_len(chunk)
        at = special.start()
        if source[at] == "&":
            char, pos = _char_ref(source, at)
            out.append(char)
            offset += utf16_len(char)
        elif source.startswith("</", at):
            pos = _close_tag(source, at, offset, open_tags, entities)
        else:
            pos = _open_tag(source, at, offset, open_tags)
    tail = source[pos:]
    out.append(tail)
    if open_tags:
        raise _cant_parse(f'Can\'t find end tag corresponding to start tag "{open_tags[-1][0]}"')
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(out), tuple(entities)


def command_entities(text: str) -> tuple[JSON, ...]:
    """The bot_command entities Telegram attaches to a user's message (PTB's CommandHandler needs them)."""
    return tuple(
        {"type": "bot_command", "offset": utf16_len(text[: m.start()]), "length": utf16_len(m.group())}
        for m in _COMMAND.finditer(text)
    )


def _cant_parse(detail: str) -> ApiReject:
    return bad_request(f"can't parse entities: {detail}")


def _byte_offset(source: str, index: int) -> int:
    return len(source[:index].encode("utf-8"))


def _char_ref(source: str, at: int) -> tuple[str, int]:
    m = _CHAR_REF.match(source, at)
    if m is None or (m[3] is not None and m[3] not in _NAMED):
        where = _byte_offset(source, at)
        raise _cant_parse(
            f'Character "&" must be escaped as "&amp;" (unsupported entity at byte offset {where})'
        )
    if m[3] is not None:
        return _NAMED[m[3]], m.end()
    code = int(m[1]) if m[1] is not None else int(m[2], 16)
    if not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise _cant_parse(f"Invalid numeric entity at byte offset {_byte_offset(source, at)}")
    return chr(code), m.end()


def _open_tag(source: str, at: int, offset: int, open_tags: list[tuple[str, int, JSON]]) -> int:
    where = _byte_offset(source, at)
    name_match = _TAG_NAME.match(source, at + 1)
    assert name_match is not None  # the pattern accepts the empty string
    name = name_match.group().lower()
    if name not in _ENTITY_TYPE:
        raise _cant_parse(f'Unsupported start tag "{name}" at byte offset {where}')
    rest = _ATTRS_AND_CLOSE.match(source, name_match.end())
    if rest is None:
        raise _cant_parse(f"Unclosed start tag at byte offset {where}")
    attrs = {a[1].lower(): html.unescape(a[2] or a[3] or a[4] or "") for a in _ATTR.finditer(rest.group(1))}
    extra: JSON = {}
    if name == "span" and attrs.get("class") != "tg-spoiler":
        raise _cant_parse(f'Tag "span" must have class "tg-spoiler" at byte offset {where}')
    if name == "a" and attrs.get("href"):
        extra["url"] = attrs["href"]
    if name == "tg-emoji":
        if not attrs.get("emoji-id", "").isdigit():
            raise _cant_parse("Custom emoji entity must contain a valid custom emoji identifier")
        extra["custom_emoji_id"] = attrs["emoji-id"]
    if name == "code" and attrs.get("class", "").startswith("language-"):
        extra["language"] = attrs["class"].removeprefix("language-")
    if name == "blockquote" and "expandable" in attrs:
        extra["expandable"] = True
    open_tags.append((name, offset, extra))
    return rest.end()


def _close_tag(
    source: str, at: int, offset: int, open_tags: list[tuple[str, int, JSON]], entities: list[JSON]
) -> int:
    where = _byte_offset(source, at)
    m = _END_TAG.match(source, at)
    if m is None:
        raise _cant_parse(f"Unclosed end tag at byte offset {where}")
    name = m[1].lower()
    if not open_tags:
        raise _cant_parse(f"Unexpected end tag at byte offset {where}")
    tag, start, extra = open_tags.pop()
    if tag != name:
        raise _cant_parse(f'Unmatched end tag at byte offset {where}, expected "</{tag}>", found "</{name}>"')
    language = extra.pop("language", None) if tag == "code" else None
    if language and open_tags and open_tags[-1][0] == "pre":
        open_tags[-1][2]["language"] = language  # <pre><code class="language-x"> is one pre entity
    elif offset > start and (tag != "a" or "url" in extra):
        kind = _ENTITY_TYPE[tag]
        if extra.pop("expandable", False):
            kind = "expandable_blockquote"
        entities.append({"type": kind, "offset": start, "length": offset - start, **extra})
    return m.end()
