"""What in an HTML page would run or load something, parsed the way a browser parses it.

The page is read with html5lib (the HTML5 parsing algorithm browsers implement; bleach,
which nbconvert depends on, ships it), not with the parser ``autograder.feedback`` rebuilds
pages with, so that the check does not share that parser's blind spots. A page may load nothing and
run nothing: its head holds a charset, a title, the grader's Content-Security-Policy and the grader's
own stylesheet (``autograder.feedback.STYLESHEET``), and no script at all (maths are MathML).
"""

from __future__ import annotations

import re

from bleach._vendor import html5lib

from autograder.feedback import POLICY, STYLESHEET

# MathML is drawn, not run; but maction acts on clicks, annotation-xml holds HTML and mglyph loads an image.
_LIVE_TAGS = {"script", "style", "iframe", "frame", "frameset", "object", "embed", "applet", "link", "meta", "base",
              "form", "svg", "audio", "video", "source", "track", "picture", "template", "portal",
              "maction", "annotation-xml", "mglyph"}
_URL_ATTRS = {"href", "src", "action", "formaction", "background", "poster", "srcset", "data", "xlink:href",
              "ping", "cite", "longdesc", "lowsrc", "dynsrc"}
_NOISE = re.compile(r"[\x00-\x20\x7f]+")


def _local(tag) -> str:
    return str(tag).rsplit("}", 1)[-1].lower()


def _grader_head(el) -> bool:
    """Whether a head element is one the grader writes: charset, title, its policy, its stylesheet."""
    tag = _local(el.tag)
    if tag == "meta":
        return set(el.attrib) == {"charset"} or (el.get("http-equiv") == "Content-Security-Policy"
                                                 and el.get("content") == POLICY)
    return tag in ("head", "title") or (tag == "style" and not el.attrib and el.text == STYLESHEET)


def live_markup(page: str) -> list[str]:
    """Every element or attribute of ``page``'s body that runs code or loads a resource; and anything in
    its head but a charset, a title and the grader's policy and stylesheet."""
    doc = html5lib.parse(page, namespaceHTMLElements=False)
    problems = []
    head, body = doc.find("head"), doc.find("body")
    for el in head.iter() if head is not None else []:
        if not _grader_head(el):
            problems.append(f"head: <{_local(el.tag)} {dict(el.attrib)}>")
    for el in body.iter() if body is not None else []:
        tag = _local(el.tag)
        if tag in _LIVE_TAGS:
            problems.append(f"<{tag}>")
        for name, value in el.attrib.items():
            name = _local(name)
            url = _NOISE.sub("", value or "").lower()
            if name.startswith("on"):
                problems.append(f"<{tag} {name}=...>")
            elif name == "style" and re.search(r"url|expression|import", url):
                problems.append(f"<{tag} style={value[:60]!r}>")
            elif name in _URL_ATTRS and name != "href" and not url.startswith("data:image/"):
                problems.append(f"<{tag} {name}={value[:60]!r}>: loads from outside the page")
            elif name == "href" and (tag != "a" or not re.match(r"(#|https?:|mailto:)", url)):
                problems.append(f"<{tag} href={value[:60]!r}>")  # on MathML, href makes a link of any element
    return problems
