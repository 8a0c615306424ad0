"""What in an HTML page would run or load something, parsed the way a browser parses it.

The page is read with html5lib (the HTML5 parsing algorithm browsers implement; bleach,
which nbconvert depends on, ships it), not with the parser ``autograder.feedback`` rebuilds
pages with, so that the check does not share that parser's blind spots.
"""

from __future__ import annotations

import re

from bleach._vendor import html5lib

# What nbgrader's feedback template itself puts in the head: the MathJax loader and its configuration.
TEMPLATE_SCRIPTS = re.compile(r"https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/")
_LIVE_TAGS = {"script", "style", "iframe", "frame", "frameset", "object", "embed", "applet", "link", "meta", "base",
              "form", "svg", "math", "audio", "video", "source", "track", "picture", "template", "portal"}
_URL_ATTRS = {"href", "src", "action", "formaction", "background", "poster", "srcset", "data", "xlink:href",
              "ping", "cite", "longdesc", "lowsrc", "dynsrc"}
_NOISE = re.compile(r"[\x00-\x20\x7f]+")


def _local(tag) -> str:
    return str(tag).rsplit("}", 1)[-1].lower()


def live_markup(page: str) -> list[str]:
    """Every element or attribute of ``page``'s body that runs code or loads a resource; and head
    scripts other than the template's MathJax."""
    doc = html5lib.parse(page, namespaceHTMLElements=False)
    problems = []
    head, body = doc.find("head"), doc.find("body")
    for el in head.iter() if head is not None else []:
        if _local(el.tag) == "script" and not (TEMPLATE_SCRIPTS.match(el.get("src", ""))
                                               or el.get("type") == "text/x-mathjax-config"):
            problems.append(f"head: <script {dict(el.attrib)}>")
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
            elif name == "href" and not re.match(r"(#|https?:|mailto:)", url):
                problems.append(f"<{tag} href={value[:60]!r}>")
    return problems
