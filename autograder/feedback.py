"""nbgrader's feedback pages, rebuilt from an allowlist before anyone opens them, and bounded in size.

Why: ``generate_feedback`` passes a student's raw HTML in Markdown cells through, and nbconvert's
template writes some output fields into attributes unescaped, so a ``<script>``, an ``onerror`` or
a remote image would run in the browser of whoever opens the page, the instructor included. What a
page keeps, how the student's content is marked (``prepare_for_feedback``) and confined, and how its
TeX becomes MathML: docs/grading.md, "Output" (``feedback/<student>/ASSIGNMENT.html``).

Limitations: TeX that latex2mathml cannot convert (an unknown command, a syntax error), or past the
per-formula and per-page budgets, stays as its TeX text. ``\\$`` is lost to nbconvert's Markdown, so
an inline ``$…$`` has no space after its opening dollar and no digit after its closing one (as in
pandoc): "$5 and $10" stays text.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import html
import re
import secrets
from html.parser import HTMLParser
from pathlib import Path

import nbformat
from latex2mathml.converter import convert_to_element

from . import contract

MiB = 1 << 20
FEEDBACK_MAX = 8 * MiB  # one feedback page, in bytes
TRUNCATED = "Feedback truncated by the grader: this page passed {mib} MiB."

# The page's only styles, fixed here: nothing the page carries (nbconvert's, nbgrader's, a student's) is kept.
# No url() and no @import, so it loads nothing. The class names are those nbconvert's classic template and
# nbgrader's feedback template write.
STYLESHEET = """
body { margin: 0; padding: 1em; color: #222; background: #fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", sans-serif; }
.container { max-width: 62em; margin: 0 auto; }
#notebook-container { max-width: none; }
h1, h2, h3, h4 { line-height: 1.25; margin: 1.2em 0 .5em; }
a { color: #1a5fa8; }
a.anchor-link { visibility: hidden; margin-left: .3em; text-decoration: none; }
h1:hover a.anchor-link, h2:hover a.anchor-link, h3:hover a.anchor-link, h4:hover a.anchor-link { visibility: visible; }
img { max-width: 100%; height: auto; }
code, kbd, pre, samp, tt { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; }
code { font-size: 90%; background: #f3f3f3; padding: 0 .25em; border-radius: 3px; }
pre { font-size: 13px; line-height: 1.4; margin: 0; padding: .5em .7em; overflow-x: auto; white-space: pre; }
pre code { background: none; padding: 0; }
table { border-collapse: collapse; margin: .8em 0; }
th, td { border: 1px solid #c8c8c8; padding: .3em .7em; text-align: left; vertical-align: top; }
thead th { background: #f0f0f0; }
tbody tr:nth-child(even) { background: #fafafa; }
details { margin: .4em 0; padding: .2em .7em; border-left: 3px solid #c8c8c8; }
summary { cursor: pointer; font-weight: 600; }
blockquote { margin: .5em 0; padding-left: 1em; border-left: 3px solid #ddd; color: #555; }
math { font-size: 1.1em; }
math[display="block"] { margin: .6em 0; overflow-x: auto; }
menclose[notation~="box"] { border: 1px solid currentColor; padding: .2em .3em; }
mtext[mathvariant="monospace"] { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
mtext[mathvariant="bold"], mtext[mathvariant="bold-italic"] { font-weight: bold; }
mtext[mathvariant="italic"], mtext[mathvariant="bold-italic"] { font-style: italic; }
.cell { display: flex; margin: .6em 0; }
.cell > .input, .output_area { display: flex; }
.cell > .input { flex: 1; min-width: 0; }
.code_cell { flex-direction: column; }
.prompt { flex: 0 0 7ex; padding-right: .6em; text-align: right; color: #999; font: 12px/2 monospace; }
.inner_cell, .nbgrader_cell, .output_subarea { flex: 1; min-width: 0; }
.input_area { background: #f7f7f7; border: 1px solid #e0e0e0; border-radius: 3px; }
.output_subarea pre { padding: .3em .7em; }
.output_stderr pre, .output_error pre { background: #fdecea; border-left: 3px solid #d2413a; }
.panel { border: 1px solid #d0d0d0; border-radius: 4px; margin-bottom: 1em; }
.panel-heading { padding: .5em .8em; background: #f5f5f5; border-bottom: 1px solid #d0d0d0; }
.panel-heading h4 { margin: 0 0 .3em; font-size: 1.15em; }
.panel-body { padding: .5em .8em; }
.panel-primary { border-color: #337ab7; }
.panel-primary > .panel-heading { background: #337ab7; color: #fff; }
.panel-primary > .panel-heading a { color: #dde8f3; }
.panel-primary > .panel-heading code { background: none; color: inherit; }
.nbgrader_cell .panel-body { padding: 0; }
.nbgrader_cell .input_area { border: none; }
.pull-right { float: right; }
.late-penalty { color: #d2413a; }
.student-content { contain: paint; overflow-x: auto; }
.alert-warning { margin: 1em 0; padding: .6em .8em; background: #fcf8e3; border: 1px solid #faebcc; }
.highlight .k, .highlight .kc, .highlight .kd, .highlight .kn, .highlight .kr, .highlight .nb { color: #008000; font-weight: 600; }
.highlight .s, .highlight .s1, .highlight .s2, .highlight .sa, .highlight .si, .highlight .se { color: #ba2121; }
.highlight .sd, .highlight .c, .highlight .c1, .highlight .cm { color: #3d7b7b; font-style: italic; }
.highlight .m, .highlight .mi, .highlight .mf, .highlight .o { color: #666; }
.highlight .ow { color: #a2f; font-weight: 600; }
.highlight .nf, .highlight .nc, .highlight .nn { color: #00f; }
@media print { .cell, .output_wrapper { break-inside: avoid; } }
"""
# What the browser may do with the page at all, should anything live slip past the allowlist: no script, no
# connection, images only from data: URLs, and no style but the stylesheet above (by its hash: a style attribute
# or another <style> does nothing).
_STYLESHEET_HASH = base64.b64encode(hashlib.sha256(STYLESHEET.encode()).digest()).decode()
POLICY = f"default-src 'none'; img-src data:; style-src 'sha256-{_STYLESHEET_HASH}'"
_HEAD_EXTRAS = f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n<style>{STYLESHEET}</style>\n'

_TAGS = frozenset("""
    a abbr article b blockquote body br caption center cite code col colgroup dd del details dfn div dl dt em
    figcaption figure footer h1 h2 h3 h4 h5 h6 header hr i img ins kbd li main mark nav ol p pre q s samp
    section small span strong sub summary sup table tbody td tfoot th thead tr tt u ul var wbr
""".split())
_VOID = frozenset({"br", "col", "hr", "img", "wbr"})
_RAW = frozenset({"script", "style"})  # their content is code, never text: dropped with the tag
# No style attribute: the templates write none that the page needs (their iframe's goes with it), and STYLESHEET is
# the page's styling.
_ATTRS = frozenset({"class", "id", "name", "title", "alt", "align", "colspan", "rowspan", "width", "height",
                    "start", "open", "href", "src", "tabindex"})
_NAME = re.compile(r"\S{1,300}")  # ids of headings and cells, anchors the page links to (escaped on the way out)
_NUMBER = re.compile(r"-?\d{1,6}%?")
# The classes the grader's elements keep: those STYLESHEET styles. Student content keeps the highlighter's (colours)
# and nbconvert's heading anchors' (hidden until hovered) only: no panel, score box, alert or float of the grader's.
_CLASSES = frozenset(re.findall(r"\.([A-Za-z_][\w-]*)", STYLESHEET))
_STUDENT_CLASSES = frozenset({"anchor-link"} | set(
    re.findall(r"\.([A-Za-z_][\w-]*)", "".join(line for line in STYLESHEET.splitlines() if line.startswith(".highlight")))))
_CELL_TAG = "celltag_"  # nbconvert appends a cell's tags (the student's metadata) to its class: "celltag_x panel-primary"
STUDENT_ID_PREFIX = "student:"  # a student's ids and #links: no grade id, cell id or id of the template's has a ':'
_LINK = re.compile(r"(#|https?:|mailto:)", re.I)
_HEAD = frozenset({"html", "head", "meta", "title", "style", "script", "link", "base", "noscript"})
_IMAGE = re.compile(r"data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]+", re.I)
_URL_NOISE = re.compile(r"[\x00-\x20\x7f]+")  # browsers drop these inside and around a URL's scheme

# MathML Core's presentation elements, and latex2mathml's menclose (\boxed; drawn by STYLESHEET). Not maction
# (its actions), annotation-xml (it holds HTML) or mglyph (it loads an image).
_MATH_TAGS = frozenset("""
    math mi mn mo ms mtext mspace mrow mfrac msqrt mroot mstyle merror mpadded mphantom msub msup msubsup
    munder mover munderover mmultiscripts mprescripts none mtable mtr mtd semantics annotation menclose
""".split())
# Presentation attributes only: no href, xlink:href, src, actiontype, definitionURL, style, class or event handler,
# and no mathbackground (it paints a box: `\colorbox`, `\rule`).
_MATH_ATTRS = frozenset("""
    display mathvariant displaystyle scriptlevel stretchy fence separator form lspace rspace minsize maxsize
    largeop movablelimits symmetric accent accentunder linethickness columnalign rowalign columnspan rowspan
    columnlines rowlines columnspacing rowspacing frame framespacing notation width height depth voffset
    mathcolor mathsize
""".split())
_MATH_VALUE = re.compile(r"[\w\s#%.,+\-]{0,100}")  # lengths, colours, keywords: no ':', '/' or '(' a URL needs
# The lengths that size or move what is drawn (mspace, mpadded's voffset, an operator's size): in em, ex, mu or px, or a
# named space, and at most MATH_LENGTH_MAX em either way, so that formulas cannot draw a box or move far from where they
# are (the course's largest: 2em, \qquad; \Huge is 2.49em). Nested ones add up, but only inside .student-content.
_MATH_LENGTHS = frozenset("width height depth voffset lspace rspace minsize maxsize mathsize linethickness".split())
_MATH_LENGTH = re.compile(r"([+-]?(?:\d{1,4}(?:\.\d{0,4})?|\.\d{1,4}))(em|ex|mu|px)?")
_MATH_SPACE = re.compile(r"(negative)?(veryverythin|verythin|thin|medium|thick|verythick|veryverythick)mathspace")
_EM = {None: 1.0, "em": 1.0, "ex": 0.5, "mu": 1 / 18, "px": 1 / 16}
MATH_LENGTH_MAX = 3.0
_NO_TEX = frozenset({"pre", "code", "kbd", "samp", "tt", "math"})  # code shows as written; MathML is maths already
# TeX as Jupyter's MathJax finds it (formulas): where a formula may open, and the closing delimiter of each opening
# one. A backslash and the character after it are an escape (\$ is a dollar sign), and open nothing.
_OPENER = re.compile(r"\$\$|\$|\\\[|\\\(|\\.", re.S)
_CLOSER = {"$$": "$$", "$": "$", "\\[": "\\]", "\\(": "\\)"}
_TEXT_WITH_MATH = re.compile(r"\\text\{([^{}$]*)\$([^{}$]*)\$([^{}$]*)\}")  # \text{… $x$ …}, which MathJax allows
_UNKNOWN = re.compile(r"\\[A-Za-z]+")  # a command latex2mathml did not know, left in the output as text
TEX_FORMULA_MAX = 1000  # characters of one formula: a longer one stays TeX (the course's longest: 341)
TEX_PAGE_MAX = 100_000  # characters of TeX converted in one page (the course's most: 7,491 in 601 formulas)
FORMULAS_MAX = 5000  # formulas converted in one page

# The two marks around what a student wrote, from the rendered page's point of view (``prepare_for_feedback``): empty
# divs, which Markdown passes on as HTML blocks, with a secret of this process that a notebook cannot know, so that
# no student can write one.
_SECRET = secrets.token_hex(16)
_BEGIN_ID, _END_ID = f"student-content-begins-{_SECRET}", f"student-content-ends-{_SECRET}"
STUDENT_BEGIN, STUDENT_END = f'<div id="{_BEGIN_ID}"></div>', f'<div id="{_END_ID}"></div>'

# nbgrader's ClearHiddenTests delimiters, matched as it matches them (anywhere in a line).
HIDDEN_BEGIN, HIDDEN_END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
HIDDEN_NOTE = "# hidden tests ran here"


def _attribute(tag: str, name: str, value: str | None, student: bool = False) -> str | None:
    """The value to keep for one attribute, or None to drop it; ``student``: of an element the student wrote."""
    value = value or ""
    if name not in _ATTRS or name.startswith("on") or (student and name == "align"):
        return None
    if name == "href":
        url = _URL_NOISE.sub("", value)
        if tag != "a" or not _LINK.match(url):
            return None
        url = value.strip()
        return "#" + STUDENT_ID_PREFIX + url[1:] if student and url.startswith("#") and len(url) > 1 else url
    if name == "src":
        return value if tag == "img" and _IMAGE.fullmatch(value.strip()) else None
    if name in ("id", "name"):
        if not _NAME.fullmatch(value) or value.lower().startswith("mathjax"):
            return None
        return STUDENT_ID_PREFIX + value if student else value
    if name in ("width", "height", "colspan", "rowspan", "start", "tabindex"):
        return value if _NUMBER.fullmatch(value.strip()) else None
    if name == "open":
        return ""
    if name == "class":
        words = value.split()
        if not student and any(w.startswith(_CELL_TAG) for w in words):
            words = words[:next(i for i, w in enumerate(words) if w.startswith(_CELL_TAG))]
        return " ".join(w for w in words if w in (_STUDENT_CLASSES if student else _CLASSES)) or None
    return value[:2000]


def _math_length(value: str) -> bool:
    """Whether a MathML length is one the page keeps: small, in a unit relative to the text (MATH_LENGTH_MAX)."""
    value = value.strip()
    if _MATH_SPACE.fullmatch(value):
        return True
    m = _MATH_LENGTH.fullmatch(value)
    return bool(m) and abs(float(m.group(1))) * _EM[m.group(2)] <= MATH_LENGTH_MAX


def _math_attributes(attrs) -> str:
    """The attributes a MathML element keeps, written out."""
    return "".join(f' {name}="{html.escape(value, quote=True)}"' for name, value in attrs
                   if name in _MATH_ATTRS and _MATH_VALUE.fullmatch(value or "")
                   and (name not in _MATH_LENGTHS or _math_length(value or "")))


def formulas(text: str) -> list[tuple[int, int, str, bool]]:
    """Each formula in ``text``: where it starts and ends (delimiters included), its TeX, whether it is displayed.

    ``$$…$$`` and ``\\[…\\]`` are displayed, ``$…$`` and ``\\(…\\)`` inline; each ends at the first closing
    delimiter after at least one character. An inline ``$`` opens before no space and closes before no digit (as
    in pandoc, less its rule on a space before the closing ``$``, which the course writes: "$0/0 = $ NaN"), so that
    "$5 and $10" stays text. Every closing delimiter's places are listed once, so that a text full of openings
    that never close costs n log n, not n²."""
    places: dict[str, list[int]] = {}

    def closing(delimiter: str, after: int) -> int:
        if delimiter not in places:
            pattern = r"(?<!\\)\$" if delimiter == "$" else "(?=" + re.escape(delimiter) + ")"  # \$ closes nothing
            places[delimiter] = [m.start() for m in re.finditer(pattern, text)]
        found = places[delimiter]
        k = bisect.bisect_left(found, after)
        return found[k] if k < len(found) else -1

    found, at = [], 0
    while m := _OPENER.search(text, at):
        opening = m.group()
        at = m.end() if opening not in _CLOSER else m.start() + 1  # an escape is skipped; an opening tried once
        if opening == "$" and (m.end() == len(text) or text[m.end()].isspace()):
            continue
        end = closing(_CLOSER[opening], m.end() + 1) if opening in _CLOSER else -1
        if end < 0 or (opening == "$" and text[end + 1:end + 2].isdigit()):
            continue
        found.append((m.start(), end + len(_CLOSER[opening]), text[m.end():end], opening in ("$$", "\\[")))
        at = end + len(_CLOSER[opening])
    return found


def tex_to_mathml(tex: str, display: bool) -> str | None:
    """``tex`` (without its delimiters) as one ``<math>`` element built from the MathML allowlist, or None
    where latex2mathml cannot convert it all."""
    tex = _TEXT_WITH_MATH.sub(r"\\text{\1}\2\\text{\3}", tex)
    try:
        root = convert_to_element(tex, display="block" if display else "inline")
    except Exception:  # latex2mathml's errors share no base class; deep nesting is a RecursionError
        return None
    out: list[str] = []
    stack: list = [root]  # elements to write, and (tag, tail) of those to close
    while stack:  # a loop, not recursion: the tree is as deep as the TeX's braces
        item = stack.pop()
        if isinstance(item, tuple):
            out.append(f"</{item[0]}>{html.escape(html.unescape(item[1] or ''), quote=False)}")
            continue
        text = html.unescape(item.text or "")  # latex2mathml writes characters as entities: decoded, escaped below
        if _UNKNOWN.fullmatch(text):
            return None  # the TeX reads better than a formula with a command spelled out in it
        tag = item.tag if item.tag in _MATH_TAGS else "mrow"
        out.append(f"<{tag}{_math_attributes(item.attrib.items())}>{html.escape(text, quote=False)}")
        stack.append((tag, item.tail))
        stack.extend(reversed(list(item)))
    return "".join(out)


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
        self.drop = False  # inside a <script> or <style>: its content is dropped
        self.text: list[str] = []  # body text not yet written: TeX is found in a whole run of text
        self.tex_left = TEX_PAGE_MAX
        self.formulas_left = FORMULAS_MAX
        self.student: int | None = None  # inside student content: where its box is in self.open
        self.mark_open = False  # a mark's <div> was just read: its </div> is the mark's too

    def _emit(self, text: str) -> None:
        if self.full:
            return
        n = len(text.encode("utf-8", "replace"))
        if self.size + n > self.limit:
            self.full = True
            return
        self.out.append(text)
        self.size += n

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs, closed=True)

    def handle_starttag(self, tag: str, attrs, closed: bool = False) -> None:
        self._flush_text()
        self.mark_open = False
        if self.in_head and (tag == "body" or tag not in _HEAD):
            self._end_head()
        if self.in_head:
            self._head_start(tag, dict(attrs), closed)
            return
        if tag == "div" and (mark := dict(attrs).get("id")) in (_BEGIN_ID, _END_ID):
            self._student_content(begins=mark == _BEGIN_ID)
            self.mark_open = not closed
            return
        if tag in _RAW:
            self.drop = not closed
            return
        if tag in _MATH_TAGS and (tag == "math" or "math" in self.open):
            self._open(tag, _math_attributes(attrs), closed)
            return
        if tag not in _TAGS:
            return
        kept = []
        for name, value in attrs:
            v = _attribute(tag, name, value, student=self.student is not None)
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

    def _student_content(self, begins: bool) -> None:
        """At the mark before what the student wrote, open its box; at the mark after it, close whatever the student
        left open, and the box. A mark inside student content (its end swallowed by a comment the student left
        open, say) changes nothing: the student's content goes on until an end mark."""
        if begins and self.student is None:
            self.student = len(self.open)
            self._open("div", ' class="student-content"', closed=False)
        elif not begins and self.student is not None:
            while len(self.open) > self.student:
                self._emit(f"</{self.open.pop()}>")
            self.student = None

    def _head_start(self, tag: str, attrs: dict, closed: bool) -> None:
        """The template's head keeps its charset and title; its styles and scripts (nbconvert's CSS, the MathJax
        loader from a CDN) go: the page gets STYLESHEET instead, and MathML needs no script."""
        if tag in ("html", "head", "title"):
            self._open(tag, "", closed)
        elif tag == "meta" and "charset" in attrs:
            self._emit('<meta charset="utf-8">')
        elif tag in _RAW:
            self.drop = not closed

    def _end_head(self) -> None:
        if not self.in_head:
            return
        self.in_head = False
        self._emit(_HEAD_EXTRAS)
        if "head" in self.open:
            self._close("head")

    def handle_endtag(self, tag):
        self._flush_text()
        if self.mark_open and tag == "div":
            self.mark_open = False
            return
        self.mark_open = False
        # The student's closing tags close what the student opened, never the template's elements around it.
        opened = self.open if self.student is None else self.open[self.student + 1:]
        if tag in _RAW:
            self.drop = False
        elif tag == "head" and self.in_head:
            self._end_head()
        elif not (self.full or self.drop or tag in _VOID or tag not in opened):
            self._close(tag)

    def _close(self, tag: str) -> None:
        while self.open:
            top = self.open.pop()
            self._emit(f"</{top}>")
            if top == tag:
                break

    def handle_data(self, data):
        self.mark_open = self.mark_open and not data
        if self.drop:
            return  # a script's or a style's code, never text
        if self.in_head:
            if not data.strip() or (self.open and self.open[-1] == "title"):
                self._emit(html.escape(data, quote=False))
                return
            self._end_head()
        self.text.append(data)

    def _flush_text(self) -> None:
        """Write the body text read since the last tag, its TeX as MathML outside code."""
        if not self.text:
            return
        text, self.text = "".join(self.text), []
        if any(t in _NO_TEX for t in self.open):
            self._emit(html.escape(text, quote=False))
            return
        done = 0
        for start, end, tex, display in formulas(text):
            mathml = self._formula(tex, display)
            if mathml is not None:
                self._emit(html.escape(text[done:start], quote=False) + mathml)
                done = end
        self._emit(html.escape(text[done:], quote=False))

    def _formula(self, tex: str, display: bool) -> str | None:
        if len(tex) > min(TEX_FORMULA_MAX, self.tex_left) or self.formulas_left <= 0:
            return None
        self.tex_left -= len(tex)
        self.formulas_left -= 1
        return tex_to_mathml(tex, display)

    def handle_decl(self, decl):
        if self.in_head and decl.lower().startswith("doctype") and not self.out:
            self._emit("<!DOCTYPE html>\n")

    def handle_comment(self, data):  # comments, processing instructions: nothing a page needs from the notebook
        pass

    handle_pi = unknown_decl = handle_comment

    def finish(self, note: str) -> str:
        self.close()
        self._flush_text()
        self._end_head()
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


def hide_hidden_tests(path: Path) -> int:
    """Replace each hidden-test region in the notebook at ``path`` — from its ``### BEGIN HIDDEN TESTS`` line to
    its ``### END HIDDEN TESTS`` line, both included — with one ``# hidden tests ran here`` line, in place, so that
    the feedback nbgrader renders from it shows the visible checks only. Returns how many regions it hid."""
    nb = nbformat.read(path, as_version=4)
    hidden = _hide_hidden_tests(nb)
    if hidden:
        nbformat.write(nb, path)
    return hidden


def _hide_hidden_tests(nb: nbformat.NotebookNode) -> int:
    hidden = 0
    for cell in nb.cells:
        cell.source, regions = without_hidden_tests(cell.source)
        hidden += regions
    return hidden


def prepare_for_feedback(path: Path) -> int:
    """Make the autograded notebook at ``path`` ready for nbgrader to render its feedback from, in place: its hidden
    tests hidden (``hide_hidden_tests``) and what the student wrote marked (``mark_student_content``). Returns how
    many hidden-test regions it hid. The marks stay in the notebook: empty divs, which show as nothing."""
    nb = nbformat.read(path, as_version=4)
    hidden = _hide_hidden_tests(nb)
    for cell in nb.cells:  # the diagnosis records are the grader's to read; the page shows the error's text
        if "outputs" in cell:
            cell.outputs = [o for o in cell.outputs if contract.DIAGNOSIS_MIME not in o.get("data", {})]
    mark_student_content(nb)
    nbformat.write(nb, path)
    return hidden


def mark_student_content(nb: nbformat.NotebookNode) -> None:
    """Put STUDENT_BEGIN and STUDENT_END around each piece of the student's that nbconvert writes into the page as
    HTML (a Markdown cell, a raw cell, an output's HTML or Markdown; the grader keeps neither kind of output, but a
    page must be safe whatever the notebook holds), so that ``sanitize_page`` knows where it starts and ends."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = f"{STUDENT_BEGIN}\n\n{cell.source}\n\n{STUDENT_END}"
        elif cell.cell_type == "raw":
            cell.source = f"{STUDENT_BEGIN}{cell.source}{STUDENT_END}"  # bleach, which nbconvert passes it through, keeps a div's id
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            for kind, gap in (("text/html", ""), ("text/markdown", "\n\n")):
                if kind in data:
                    text = "".join(map(str, data[kind])) if isinstance(data[kind], list) else str(data[kind])
                    data[kind] = f"{STUDENT_BEGIN}{gap}{text}{gap}{STUDENT_END}"


def without_hidden_tests(source: str) -> tuple[str, int]:
    """``source`` with each hidden-test region replaced by HIDDEN_NOTE (indented as its BEGIN line), and how
    many there were. A region with no END runs to the end of the cell: hidden rather than shown."""
    kept, regions, inside = [], 0, False
    for line in source.split("\n"):
        if inside:
            inside = HIDDEN_END not in line
        elif HIDDEN_BEGIN in line:
            inside, regions = True, regions + 1
            kept.append(line[:len(line) - len(line.lstrip())] + HIDDEN_NOTE)
        else:
            kept.append(line)
    return "\n".join(kept), regions
