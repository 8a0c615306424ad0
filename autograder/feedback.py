"""nbgrader's feedback pages, rebuilt from an allowlist before anyone opens them, and bounded in size.

Why: ``generate_feedback`` passes a student's raw HTML in Markdown cells through, and nbconvert's
template writes some output fields into attributes unescaped, so a ``<script>``, an ``onerror`` or
a remote image would run in the browser of whoever opens the page, the instructor included. What
is kept: docs/grading.md, "Output" (``feedback/<student>/ASSIGNMENT.html``).
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

MiB = 1 << 20
FEEDBACK_MAX = 8 * MiB  # one feedback page, in bytes
TRUNCATED = "Feedback truncated by the grader: this page passed {mib} MiB."

_TAGS = frozenset("""
    a abbr article b blockquote body br caption center cite code col colgroup dd del details dfn div dl dt em
    figcaption figure footer h1 h2 h3 h4 h5 h6 header hr i img ins kbd li main mark nav ol p pre q s samp
    section small span strong sub summary sup table tbody td tfoot th thead tr tt u ul var wbr
""".split())
_VOID = frozenset({"br", "col", "hr", "img", "wbr"})
_RAW = frozenset({"script", "style"})  # their content is code, never text: dropped with the tag
_ATTRS = frozenset({"class", "id", "name", "title", "alt", "align", "colspan", "rowspan", "width", "height",
                    "start", "open", "style", "href", "src", "tabindex"})
_NAME = re.compile(r"\S{1,300}")  # ids of headings and cells, anchors the page links to (escaped on the way out)
_NUMBER = re.compile(r"-?\d{1,6}%?")
_STYLE = re.compile(r"[\w\s#%.,:;()\-]{0,500}")
_STYLE_DANGER = re.compile(r"url|expression|image|import|javascript|behavior|binding|var\(|attr\(", re.I)
_LINK = re.compile(r"(#|https?:|mailto:)", re.I)
_HEAD = frozenset({"html", "head", "meta", "title", "style", "script", "link", "base", "noscript"})
_MATHJAX = re.compile(r"mathjax", re.I)
_IMAGE = re.compile(r"data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]+", re.I)
_URL_NOISE = re.compile(r"[\x00-\x20\x7f]+")  # browsers drop these inside and around a URL's scheme


def _attribute(tag: str, name: str, value: str | None) -> str | None:
    """The value to keep for one attribute, or None to drop it."""
    value = value or ""
    if name not in _ATTRS or name.startswith("on"):
        return None
    if name == "href":
        url = _URL_NOISE.sub("", value)
        return value.strip() if tag == "a" and _LINK.match(url) else None
    if name == "src":
        return value if tag == "img" and _IMAGE.fullmatch(value.strip()) else None
    if name in ("id", "name"):
        return value if _NAME.fullmatch(value) and not value.lower().startswith("mathjax") else None
    if name in ("width", "height", "colspan", "rowspan", "start", "tabindex"):
        return value if _NUMBER.fullmatch(value.strip()) else None
    if name == "style":
        return value if _STYLE.fullmatch(value) and not _STYLE_DANGER.search(value) else None
    if name == "open":
        return ""
    return value[:2000]


class _Page(HTMLParser):
    """Rebuilds a page from the allowlist; stops at ``limit`` bytes of output."""

    def __init__(self, limit: int):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.size = 0
        self.limit = limit
        self.full = False
        self.in_head = True  # until </head>, <body> or the first thing that can only be body
        self.open: list[str] = []  # the tags opened and not yet closed
        self.raw = ""  # inside <script> or <style>: "keep" (the template's, in the head) or "drop"

    def _emit(self, text: str) -> None:
        if self.full:
            return
        n = len(text.encode("utf-8", "replace"))
        if self.size + n > self.limit:
            self.full = True
            return
        self.out.append(text)
        self.size += n

    def handle_starttag(self, tag, attrs):
        self._start(tag, attrs, closed=False)

    def handle_startendtag(self, tag, attrs):
        self._start(tag, attrs, closed=True)

    def _start(self, tag: str, attrs, closed: bool) -> None:
        if self.in_head and (tag == "body" or tag not in _HEAD):
            self._end_head()
        if self.in_head:
            self._head_start(tag, dict(attrs), closed)
            return
        if tag in _RAW:
            self.raw = "" if closed else "drop"
            return
        if tag not in _TAGS:
            return
        kept = []
        for name, value in attrs:
            v = _attribute(tag, name, value)
            if v is not None:
                kept.append(f' {name}="{html.escape(v, quote=True)}"' if v or name != "open" else f" {name}")
        if tag == "img" and not any(k.startswith(" src=") for k in kept):
            return  # an image from anywhere but the page itself loads nothing
        if tag == "a" and any(k.startswith(" href=") and not k.startswith(' href="#') for k in kept):
            kept.append(' rel="noopener noreferrer nofollow"')
        self._open(tag, "".join(kept), closed)

    def _open(self, tag: str, attrs: str, closed: bool) -> None:
        self._emit(f"<{tag}{attrs}>")
        if tag in _VOID:
            return
        if closed:  # <div/> opens a div in HTML: written as the empty element it meant
            self._emit(f"</{tag}>")
        elif not self.full:
            self.open.append(tag)

    def _head_start(self, tag: str, attrs: dict, closed: bool) -> None:
        if tag in ("html", "head"):
            self._open(tag, "", closed)
        elif tag == "meta" and "charset" in attrs:
            self._emit('<meta charset="utf-8">')
        elif tag == "title":
            self._open(tag, "", closed)
        elif tag in _RAW:
            template = tag == "style" or attrs.get("type") == "text/x-mathjax-config" or \
                _MATHJAX.search(attrs.get("src") or "")
            self.raw = "" if closed else ("keep" if template else "drop")
            if template:
                kept = "".join(f' {k}="{html.escape(attrs[k] or "", quote=True)}"'
                               for k in ("src", "type") if k in attrs)
                self._open(tag, kept, closed)

    def _end_head(self) -> None:
        self.in_head = False
        if "head" in self.open:
            self.handle_endtag("head")

    def handle_endtag(self, tag):
        if tag in _RAW:
            if self.raw == "keep":
                self.raw = ""
            elif self.raw == "drop":
                self.raw = ""
                return
        if self.full or self.raw or tag in _VOID or tag not in self.open:
            return
        while self.open:
            top = self.open.pop()
            self._emit(f"</{top}>")
            if top == tag:
                break
        if tag == "head":
            self.in_head = False

    def handle_data(self, data):
        if self.raw == "keep":
            self._emit(data)  # the template's own CSS or MathJax configuration, as written
        elif not self.raw:
            if self.in_head and data.strip() and (not self.open or self.open[-1] != "title"):
                self._end_head()
            self._emit(html.escape(data, quote=False))

    def handle_decl(self, decl):
        if self.in_head and decl.lower().startswith("doctype") and not self.out:
            self._emit("<!DOCTYPE html>\n")

    def handle_comment(self, data):  # comments, processing instructions: nothing a page needs from the notebook
        pass

    handle_pi = unknown_decl = handle_comment

    def finish(self, note: str) -> str:
        self.close()
        tail = []
        if self.full:
            tail.append(f'<div class="alert alert-warning"><strong>{html.escape(note)}</strong></div>')
        tail += [f"</{t}>" for t in reversed(self.open)]
        return "".join(self.out) + "".join(tail) + "\n"


def sanitize_page(page: str, limit: int = FEEDBACK_MAX) -> str:
    """The feedback page ``page`` rebuilt from the allowlist, at most ``limit`` bytes."""
    parser = _Page(max(0, limit - 4096))  # room for the note and the closing tags
    step = 1 << 16
    for i in range(0, len(page), step):  # fed in pieces, so that a huge page stops being read at the cap
        parser.feed(page[i:i + step])
        if parser.full:
            break
    return parser.finish(TRUNCATED.format(mib=max(1, limit // MiB)))


def sanitize_folder(folder: Path, limit: int = FEEDBACK_MAX) -> int:
    """Rewrite every ``.html`` page under ``folder`` in place, sanitized; a link is removed, never followed. Returns the pages."""
    pages = 0
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            path.unlink()
        elif path.is_file() and path.suffix.lower() in (".html", ".htm"):
            with open(path, "rb") as f:
                raw = f.read(4 * limit)  # a few times the cap at most
            path.write_bytes(sanitize_page(raw.decode("utf-8", "replace"), limit).encode("utf-8", "replace"))
            pages += 1
    return pages
