"""Feedback pages are safe to open: nothing a submission wrote runs or loads, and a page has a size cap.
They read the same offline: maths as MathML, tables and layout from the grader's own stylesheet; and
the hidden tests' lines are out of the notebook the feedback is made from. Nothing a student wrote can
cover or imitate the grader's score or layout: it keeps no style, no layout class, no id of the grader's,
and stays inside its own box (checked in headless Chromium where the machine has it)."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import nbgrader
import pytest
from bleach._vendor import html5lib
from nbconvert import HTMLExporter
from traitlets.config import Config

from autograder.feedback import (
    FORMULAS_MAX,
    HIDDEN_NOTE,
    MATH_LENGTH_MAX,
    POLICY,
    STUDENT_BEGIN,
    STUDENT_ID_PREFIX,
    STYLESHEET,
    TEX_FORMULA_MAX,
    formulas,
    hide_hidden_tests,
    mark_student_content,
    prepare_for_feedback,
    sanitize_folder,
    sanitize_page,
    tex_to_mathml,
    without_hidden_tests,
)
from tests.grading.pagecheck import live_markup
from tools.mutants import ROOT

# What a student can put in a Markdown cell (rendered with raw HTML passed on) or in an output.
HOSTILE_MARKDOWN = """# Part A <script>document.title='pwned-md-script'</script>

<img src=x onerror="document.title='pwned-onerror'"> <a href="javascript:alert('pwned')">click</a>
<a href=" jav&#x09;ascript:alert(1)">tabbed scheme</a> ![remote](http://evil.example/pwned.png)
<iframe src="http://evil.example/"></iframe><svg onload="alert(1)"><circle r="3"/></svg>
<form action="http://evil.example/"><input name=a></form><style>body { background: url(http://evil.example/x) }</style>
<div style="background-image: url(http://evil.example/y)">styled</div><meta http-equiv="refresh" content="0;url=http://evil.example/">
<object data="http://evil.example/x.swf"></object><base href="http://evil.example/"><link rel=stylesheet href=//evil.example/c.css>
<details><summary>Hint 1</summary>The question to ask.</details>
$\\href{javascript:alert('pwned-tex')}{x}$ and $\\style{background: url(http://evil.example/t)}{y}$
<math><maction actiontype="statusline"><mi>a</mi><mtext>pwned-status</mtext></maction><mrow href="javascript:alert(1)"
xlink:href="http://evil.example/" onclick="alert(2)"><mi>b</mi></mrow><mglyph src="http://evil.example/g.png"/></math>

| a | b |
|---|---|
| 1 | 2 |
"""


def hostile_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(HOSTILE_MARKDOWN))
    code = nbformat.v4.new_code_cell("print('<script>x</script>')")
    code.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="<script>document.title='pwned-stdout'</script>\n"),
        nbformat.v4.new_output("display_data", data={"text/html": "<script>alert(1)</script><img src=q onerror=alert(2)>",
                                                     "text/plain": "html"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "alert('pwned-js')", "text/plain": "js"}),
        nbformat.v4.new_output("display_data", data={"image/svg+xml": "<svg onload='alert(3)'><script>alert(4)</script></svg>"}),
        nbformat.v4.new_output("display_data", data={"text/markdown": "<img src=z onerror=alert(5)> [l](javascript:alert(6))"}),
        nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=' onerror='alert(7)", "text/plain": "png"}),
        nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
                                                                  "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
                                                     "text/plain": "a real png"}),
        nbformat.v4.new_output("error", ename="GradingFailure", evalue="diagnosis: sign — <b>bold</b>",
                               traceback=["\x1b[31mGradingFailure\x1b[0m: diagnosis: sign — <img src=e onerror=alert(8)>"]),
        nbformat.v4.new_output("stream", name="stderr", text="Grader: this part scored 0. tampering: passed in the kernel\n"),
    ]
    nb.cells.append(code)
    return nb


def rendered() -> str:
    """The notebook as nbconvert's classic template renders it (nbgrader's feedback template extends it), its student
    content marked as ``prepare_for_feedback`` marks it."""
    nb = hostile_notebook()
    mark_student_content(nb)
    body, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    return body


def test_the_checker_sees_what_a_raw_page_would_run():
    found = "\n".join(live_markup(rendered()))
    for live in ("<script>", "onerror=", "javascript:", "evil.example", "<iframe>", "<svg>", "<form>", "<style>"):
        assert live in found, f"the page check misses {live}: it could never fail"


def test_a_sanitized_page_runs_and_loads_nothing_and_keeps_the_course():
    page = sanitize_page(rendered())
    assert live_markup(page) == []
    for kept in ("<details>", "<summary>Hint 1</summary>", "<table>", "<td>1</td>", 'id="student:Part-A', 'href="#student:Part-A',
                 'src="data:image/png;base64,iVBORw0KGgoAAAAN', "Grader: this part scored 0. tampering",
                 "&lt;script&gt;document.title='pwned-stdout'&lt;/script&gt;"):  # printed text stays text
        assert kept in page, kept
    assert "pwned-js" not in page and "alert(4)" not in page, "a script's code is dropped, not shown as text"


def test_the_head_keeps_its_title_and_gets_the_graders_stylesheet_and_nothing_else():
    mathjax = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe"
    raw = ('<!DOCTYPE html>\n<html>\n<head><meta charset="utf-8" /><title>01 &amp; more</title>'
           '<style type="text/css">div > p { color: red }</style>'
           '<script src="https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.3/jquery.min.js"></script>'
           f'<script src="{mathjax}"> </script>'
           '<script type="text/x-mathjax-config">init_mathjax = function() { if (a < b) {} };</script>'
           '<link rel="stylesheet" href="https://evil.example/c.css"></head>\n'
           "<body><p>x</p><script>alert(1)</script></body>\n</html>")
    assert len(live_markup(raw)) == 6, "the check sees the head's scripts, style and link, and the body's script"
    page = sanitize_page(raw)
    assert "<title>01 &amp; more</title>" in page and page.count(STYLESHEET) == 1
    assert "color: red" not in page and "<script" not in page and "init_mathjax" not in page, "no style or script of the page's"
    assert "cdnjs" not in page and "jquery" not in page and "evil.example" not in page
    assert f'content="{POLICY}"' in page
    assert live_markup(page) == []


def test_a_page_without_a_head_still_gets_the_stylesheet_before_its_body():
    page = sanitize_page("<p>a $x$</p>")
    assert page.index(STYLESHEET) < page.index("<p>") and live_markup(page) == []


def test_the_stylesheet_loads_nothing_and_lays_out_tables_code_and_the_score_boxes():
    assert not re.search(r"url\(|@import|//|expression|</style", STYLESHEET, re.I), "the stylesheet fetches nothing"
    assert "default-src 'none'" in POLICY and "script-src" not in POLICY, "no script may run, nothing may load"
    for rule in ("th, td { border:", "pre {", ".panel-primary > .panel-heading", ".pull-right", ".output_stderr pre",
                 "max-width:", 'menclose[notation~="box"]'):
        assert rule in STYLESHEET, rule


def markdown_page(markdown: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(markdown))
    body, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    return body


MATHS = r"""# The chain $\bar x = W^\top \bar y$

Inline $\frac{\partial L}{\partial x}$, $s = \langle y, \bar y \rangle$ and $a \odot b$; costs $5 and $10;
`$not maths$` in code.

$$\bar z = \operatorname{softmax}(z) - e_t, \qquad \sum_i \bar x_i \in \mathbb{R}, \quad \text{in code: } \texttt{dx}$$

| part | formula |
|---|---|
| A | $\bar W = x^\top \bar y$ |
"""


def test_maths_become_mathml_and_the_page_loads_and_runs_nothing():
    raw = markdown_page(MATHS)
    assert re.search(r"<script[^>]*mathjax", raw, re.I), "nbconvert's page loads MathJax from a CDN"
    page = sanitize_page(raw)
    assert page.count("<math") == 6 and page.count('<math display="block">') == 1
    for mathml in ("<mover><mi>x</mi><mo", "<mo>⊤</mo>", "<mfrac>", "<mo>∂</mo>", "⟨", "<mo>⊙</mo>", "<mo>∑</mo>",
                   "<mi>ℝ</mi>", "<mo>softmax</mo>", "<mtext>in\xa0code:\xa0</mtext>", 'mathvariant="monospace"'):
        assert mathml in page, mathml
    assert "costs $5 and $10" in page and "<code>$not maths$</code>" in page, "prices and code stay text"
    assert "\\bar" not in page and "\\frac" not in page, "no TeX left over"
    assert "<td>A</td>" in page and "<td><math" in page, "the table keeps its cells, maths inside"
    assert "<script" not in page and not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert live_markup(page) == []


def test_the_other_tex_delimiters_and_what_fails_to_convert():
    page = sanitize_page(r"<p>\(a_1\) and \[b^2\] but $x^a^b$, $\nosuchcommand{x}$ and $" + "{" * 900 + "$</p>"
                         r"<pre>$$\frac{1}{2}$$</pre><kbd>$k$</kbd>")
    assert page.count("<math") == 2 and '<math display="block"><mrow><msup><mi>b' in page
    assert r"$x^a^b$, $\nosuchcommand{x}$ and ${{{" in page, "what latex2mathml cannot convert stays as its TeX"
    assert r"<pre>$$\frac{1}{2}$$</pre><kbd>$k$</kbd>" in page, "code is shown as written"


def test_hostile_tex_and_mathml_stay_inert():
    raw = (r"<p>$\href{javascript:alert(1)}{x}$ $\style{background:url(http://evil.example/s)}{y}$ "
           r"$\class{anchor-link}{z}$ $\text{&lt;img src=q onerror=alert(2)&gt;}$ $\color{red}{c}$</p>"
           '<math display="block"><maction actiontype="statusline"><mi>a</mi><mtext>pwned</mtext></maction>'
           '<mrow href="javascript:alert(3)" xlink:href="http://evil.example/" onclick="alert(4)" '
           'style="background: url(http://evil.example/r)" id="top"><mi>b</mi></mrow>'
           '<annotation-xml encoding="text/html"><img src=x onerror=alert(5)></annotation-xml>'
           '<mglyph src="http://evil.example/g.png"/><semantics><mi>c</mi></semantics><mi href="next">n</mi></math>')
    found = "\n".join(live_markup(raw))
    for live in ("<maction>", "href=", "onclick", "<annotation-xml>", "<mglyph>", "onerror"):
        assert live in found, f"the page check misses {live}: it could never fail"
    page = sanitize_page(raw)
    assert live_markup(page) == []
    body = page[page.index("</style>"):]
    for gone in ("javascript", "evil.example", "maction", "annotation-xml", "mglyph", "onclick", "alert(5)", "<img",
                 "style=", "anchor-link", 'id="top"', "href="):
        assert gone not in body, gone
    assert "<mtext>&lt;img\xa0src=q\xa0onerror=alert(2)&gt;</mtext>" in page, "a student's \\text stays text"
    assert '<mstyle mathcolor="red">' in page and "<mtext>pwned</mtext>" in page and "<semantics><mi>c</mi>" in page


def test_every_formula_of_the_courses_notebooks_becomes_mathml():
    """Each source notebook's Markdown as nbconvert renders it: no TeX is left outside code (\\bar, \\top, \\frac,
    \\sum, \\odot, \\operatorname, \\mathbb, \\text, \\partial, \\langle, \\boxed, a $ inside \\text{…}, …)."""
    for path in sorted((ROOT / "source").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        markdown = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        page = sanitize_page(markdown_page(markdown))
        text = re.sub(r"<(pre|code|style)>.*?</\1>|<math.*?</math>|<[^>]*>", " ", page, flags=re.S)
        left = re.findall(r"\$[^$]{0,60}|\\[A-Za-z]+", html.unescape(text))
        assert not left, f"{path.name}: TeX left as text: {left[:5]}"
        assert page.count("<math") > 100, path.name


def test_formulas_are_found_as_mathjax_finds_them():
    assert formulas(r"$a$ and $$b$$, \(c\) \[d\]") == [(0, 3, "a", False), (8, 13, "b", True), (15, 20, "c", False),
                                                      (21, 26, "d", True)]
    assert formulas("costs $5 and $10") == [] and formulas("a $ b$") == [], "a price, a dollar before a space"
    assert formulas(r"\$a$ b$ and $x$") == [(12, 15, "x", False)], "\\$ is a dollar sign"
    assert formulas("instead of $0/0 = $ NaN") == [(11, 19, "0/0 = ", False)], "as the course writes it"


def test_a_text_full_of_openings_that_never_close_is_read_in_linear_time():
    """A regular expression that looks for each opening's close from scratch takes minutes on this (n²)."""
    text = "\\[" * 100_000 + "\\(" * 100_000 + "$" + "$a " * 50_000
    started = time.perf_counter()
    page = sanitize_page(f"<p>{text}</p>")
    assert time.perf_counter() - started < 20, "quadratic in the text's length"
    assert page.count("<math") == FORMULAS_MAX


def test_a_formula_past_its_budget_stays_tex():
    long = "x+" * (TEX_FORMULA_MAX // 2) + "y"
    assert tex_to_mathml(long, display=False) is not None, "latex2mathml could convert it"
    assert "<math" not in sanitize_page(f"<p>${long}$</p>"), "one formula is at most TEX_FORMULA_MAX characters"
    page = sanitize_page("<p>" + "$x$ " * (FORMULAS_MAX + 1) + "</p>")
    assert page.count("<math") == FORMULAS_MAX and page.count("$x$") == 1, "a page converts at most FORMULAS_MAX"


def test_tex_to_mathml_turns_text_with_maths_inside_into_one_formula():
    assert "<mover><mi>g</mi>" in tex_to_mathml(r"\bar p = \text{$\bar g$ scattered}", display=True)
    assert tex_to_mathml(r"\boxed{\bar x}", display=False).count('<menclose notation="box">') == 1


# -- nothing a student writes covers or imitates the grader's score or layout ---------------------------------------

NBGRADER_FORMGRADER = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
# The grader's layout: every class STYLESHEET styles but the highlighter's colours and the hidden heading anchors.
LAYOUT_CLASSES = set(re.findall(r"\.([A-Za-z_][\w-]*)", STYLESHEET)) - set(
    re.findall(r"\.([A-Za-z_][\w-]*)", "".join(line for line in STYLESHEET.splitlines() if line.startswith(".highlight")))
) - {"anchor-link"}
PNG_1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
# A student's Markdown: a fake score over the page, the grader's panels and alerts by class, the template's
# containers closed to get out of its own, a guessed end mark, the grader's ids and anchors, floats and huge sizes,
# and TeX/MathML that paints a box or moves far. Each fake says "fake-".
FAKE_SCORE = f"""# Part A

<div style="position:fixed; top:0; left:0; width:100%; height:100%; z-index:99; background:#337ab7; color:#fff"
 class="panel panel-primary" id="top"><div class="panel-heading"><h4>fake-1 (Score: 3.0 / 3.0)</h4></div></div>

</div></div></div></div></div><div class="cell"><div class="panel panel-primary nbgrader_cell"><div class="panel-heading">
<span class="pull-right">fake-2 Score: 3.0 / 3.0</span></div></div></div>

<div id="student-content-ends-00112233445566778899aabbccddeeff"></div><div class="alert alert-warning">fake-3</div>

<a name="f_test"></a><p id="notebook-container" align="right" class="late-penalty">fake-4 <a href="#top">top</a></p>
<img align="left" width="4000" height="4000" class="pull-right" src="data:image/png;base64,{PNG_1x1}">
<details open><summary>fake-5</summary><table align="right" width="5000"><tr><td class="panel-heading">x</td></tr></table></details>

$\\colorbox{{blue}}{{fake-6}}\\hspace{{-40em}}x$ and $\\rule{{50cm}}{{50cm}}$ and $\\bar x$

<math><mpadded voffset="-30em" lspace="-30em"><mpadded voffset="-3em"><mtext mathbackground="#337ab7" mathsize="20em">fake-7</mtext>
</mpadded></mpadded><mspace width="-2em"/><mi>y</mi></math>

```python
return x  # the highlighter's colours stay
```
"""


def graded_notebook(markdown: str = FAKE_SCORE) -> nbformat.NotebookNode:
    """A student's notebook as nbgrader grades it: their Markdown, a solution cell whose tags try a class of the
    grader's, a test cell scored 0 of 3 with the grader's line under it and an HTML output (which the grader never
    keeps; the page must be safe whatever a notebook holds), a written answer in the grader's panel, a raw cell."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(markdown))
    solution = nbformat.v4.new_code_cell("def f(x):\n    return x")
    solution.metadata.update(tags=["x panel panel-primary"], nbgrader={
        "solution": True, "grade": False, "grade_id": "f_solution", "locked": False, "schema_version": 3})
    test = nbformat.v4.new_code_cell("assert f(1) == 1")
    test.metadata.nbgrader = {"solution": False, "grade": True, "grade_id": "f_test", "points": 3, "score": 0.0,
                              "locked": True, "schema_version": 3}
    test.outputs = [nbformat.v4.new_output("stream", name="stderr", text="Grader: this part scored 0. sign\n"),
                    nbformat.v4.new_output("display_data", data={"text/plain": "h", "text/html":
                                           '</div></div></div><div class="panel-heading">fake-8</div>'})]
    written = nbformat.v4.new_markdown_cell('Why? <span class="pull-right">fake-9 Score: 2.0 / 2.0</span></div></div>')
    written.metadata.nbgrader = {"solution": True, "grade": True, "task": False, "grade_id": "why", "points": 2,
                                 "score": 0.0, "locked": False, "schema_version": 3}
    raw = nbformat.v4.new_raw_cell('<div class="panel panel-primary"><div class="panel-heading">fake-10</div></div>')
    nb.cells += [solution, test, written, raw]
    return nb


def feedback_page(tmp_path: Path, nb: nbformat.NotebookNode) -> str:
    """``nb``'s feedback page as the grader makes it: ``prepare_for_feedback`` on the autograded notebook, nbgrader's
    feedback template (as ``generate_feedback`` configures nbconvert; the scores in the cells' metadata, as its
    GetGrades puts them), then ``sanitize_page``."""
    path = tmp_path / "01_x.ipynb"
    nbformat.write(nb, path)
    prepare_for_feedback(path)
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    config.HTMLExporter.extra_template_basedirs = [str(NBGRADER_FORMGRADER / "templates")]
    config.HTMLExporter.extra_template_paths = [str(NBGRADER_FORMGRADER / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    grades = {"notebook": "01_x", "score": 0.0, "max_score": 5.0, "late_penalty": 0}
    body, _ = HTMLExporter(config=config).from_notebook_node(nbformat.read(path, as_version=4), resources={"nbgrader": grades})
    return sanitize_page(body)


def elements(page: str):
    """Each element of ``page`` parsed as a browser parses it, and whether it is inside a student's box."""
    doc = html5lib.parse(page, namespaceHTMLElements=False)
    stack = [(doc, False)]
    while stack:
        el, inside = stack.pop()
        tag = str(el.tag).rsplit("}", 1)[-1]
        yield el, tag, inside
        inside = inside or "student-content" in el.get("class", "").split()
        stack.extend(reversed([(child, inside) for child in el]))  # in the page's order


def text_of(el) -> str:
    return "".join(el.itertext())


def test_student_content_keeps_no_layout_and_stays_in_its_box(tmp_path):
    page = feedback_page(tmp_path, graded_notebook())
    assert live_markup(page) == []
    found = list(elements(page))
    assert not [(tag, el.attrib) for el, tag, _ in found if "style" in el.attrib], "no style attribute anywhere"
    fakes = [(tag, text_of(el)[:40]) for el, tag, inside in found if not inside and "fake-" in (el.text or "")]
    assert fakes == [], f"student content outside its box: {fakes}"
    for n in range(1, 11):
        assert f"fake-{n}" in page, f"fake-{n}: the student's text is shown, as text"
    inside = [(el, tag) for el, tag, i in found if i]
    assert [tag for el, tag in inside if "align" in el.attrib] == []
    layout = [(tag, el.get("class")) for el, tag in inside if set(el.get("class", "").split()) & LAYOUT_CLASSES]
    assert layout == [], f"a class of the grader's layout in student content: {layout}"
    assert {el.get("class") for el, tag in inside if tag in ("a", "span", "div") and el.get("class")} >= {"anchor-link", "k"}
    ids = [el.get("id") or el.get("name") for el, tag in inside if el.get("id") or el.get("name")]
    assert ids and all(i.startswith(STUDENT_ID_PREFIX) for i in ids), ids
    assert f'href="#{STUDENT_ID_PREFIX}top"' in page and f'href="#{STUDENT_ID_PREFIX}Part-A"' in page, "#links to their ids"
    for el, tag in inside:
        assert "mathbackground" not in el.attrib, tag
        for name in ("width", "height", "depth", "voffset", "lspace", "rspace", "mathsize") if tag.startswith("m") else ():
            if name in el.attrib and "mathspace" not in el.attrib[name]:
                number = float(re.match(r"[+-]?[\d.]+", el.attrib[name]).group())
                assert abs(number) <= MATH_LENGTH_MAX, (tag, name, el.attrib[name])
    # The grader's own layout is whole: the page's score box, each graded cell's panel and score, the tags cut.
    grader = [(el, tag) for el, tag, i in found if not i]
    headings = [text_of(el).split() for el, tag in grader if "panel-heading" in el.get("class", "").split()]
    assert len(headings) == 4 and headings[0][:4] == ["01_x", "(Score:", "0.0", "/"], headings
    scores = [" ".join(text_of(el).split()) for el, tag in grader if el.get("class") == "pull-right"]
    assert scores == ["(Top)", "Score: 0.0 / 3.0 (Top)", "Score: 0.0 / 2.0 (Top)"], scores
    cells = [el.get("class") for el, tag in grader if el.get("id", "").startswith("cell-id=")]
    assert cells and all(c.split()[0] == "cell" and "panel" not in c for c in cells), cells
    assert STUDENT_BEGIN not in page and "student-content-begins" not in page, "the marks and their secret stay off the page"


def test_a_mark_the_student_swallows_keeps_what_follows_in_student_content(tmp_path):
    """A comment or a code fence left open swallows the end mark after it: the page is then read as the student's
    until the next end mark, so the grader's cells in between lose their layout, and nothing of the student's gets it."""
    nb = graded_notebook("Part A <!-- never closed")
    nb.cells.insert(2, nbformat.v4.new_markdown_cell('```\nnever closed\n<div class="panel-heading">fake-11</div>'))
    nb.cells.insert(3, nbformat.v4.new_markdown_cell('<div class="panel-heading">fake-12</div>'))
    page = feedback_page(tmp_path, nb)
    found = list(elements(page))
    assert not [text_of(el) for el, _, inside in found if not inside and "fake-" in (el.text or "")]
    assert not [el.get("class") for el, _, inside in found if inside and set(el.get("class", "").split()) & LAYOUT_CLASSES]
    assert live_markup(page) == []


def test_the_policy_lets_only_the_stylesheet_style_the_page():
    digest = base64.b64encode(hashlib.sha256(STYLESHEET.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in POLICY and "unsafe-inline" not in POLICY
    page = sanitize_page('<p style="position:fixed" class="panel-heading">x</p>')
    assert '<p class="panel-heading">x</p>' in page, "a page nobody marked keeps the grader's classes, never a style"


def test_prepare_for_feedback_hides_the_hidden_tests_and_marks_the_students_html(tmp_path):
    nb = graded_notebook("Part A")
    nb.cells[2].source += "\n### BEGIN HIDDEN TESTS\nassert f(2) == 2\n### END HIDDEN TESTS"
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    assert prepare_for_feedback(path) == 1
    after = nbformat.read(path, as_version=4)
    nbformat.validate(after)
    assert after.cells[0].source == f"{STUDENT_BEGIN}\n\nPart A\n\n{STUDENT_BEGIN.replace('begins', 'ends')}"
    assert after.cells[2].source == f"assert f(1) == 1\n{HIDDEN_NOTE}"
    html_output = after.cells[2].outputs[1].data["text/html"]
    assert html_output.startswith(STUDENT_BEGIN) and html_output.endswith("</div>") and "fake-8" in html_output
    assert after.cells[4].source.startswith(STUDENT_BEGIN) and "fake-10" in after.cells[4].source
    assert [c.metadata for c in after.cells] == [c.metadata for c in nb.cells]


COVERING = """() => {
    const problems = [];
    const heading = document.querySelector('.panel-primary > .panel-heading');
    if (!heading || getComputedStyle(heading).backgroundColor !== 'rgb(51, 122, 183)') problems.push('no stylesheet');
    const scores = [...document.querySelectorAll('.panel-heading > h4, .panel-heading > .pull-right')];
    const boxes = [...document.querySelectorAll('.student-content')];
    for (const score of scores) {
        score.scrollIntoView({block: 'center'});
        const r = score.getBoundingClientRect();
        const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        const name = score.textContent.trim().slice(0, 30);
        if (!score.contains(hit)) problems.push(`${name}: a click reaches ${hit && hit.outerHTML.slice(0, 60)}`);
        for (const box of boxes) {
            const b = box.getBoundingClientRect();
            if (b.left < r.right && r.left < b.right && b.top < r.bottom && r.top < b.bottom)
                problems.push(`${name}: overlapped by ${box.textContent.trim().slice(0, 30)}`);
        }
    }
    return scores.length ? problems : ['no score on the page'];
}"""


def covering(*pages: str) -> list[list[str]]:
    """For each page, in headless Chromium: each of the grader's scores (the page's heading, each cell's) that a
    click on it does not reach, or that a student's box overlaps; "no stylesheet" where STYLESHEET did not apply."""
    api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: run `make install`")
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not os.access(chromium, os.X_OK):
        pytest.skip(f"no Chromium at {chromium}: `make browser`, or set CHROMIUM=/path/to/chromium")
    with api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            found = []
            for page in pages:
                tab = browser.new_page(viewport={"width": 1000, "height": 700})
                tab.set_content(page)
                found.append(tab.evaluate(COVERING))
                tab.close()
            return found
        finally:
            browser.close()


@pytest.mark.browser
def test_in_a_browser_no_student_content_covers_a_score(tmp_path):
    """The page as the grader writes it; then, to see each guard alone, the student's fake score with its style put
    back: outside the student's box on a page without the policy (the check must see it), inside the box without the
    policy (the box clips it), and on the page with its policy but no box (the policy drops the style)."""
    page = feedback_page(tmp_path, graded_notebook())
    fake = f'<div id="{STUDENT_ID_PREFIX}top">'
    styled = fake[:-1] + ' style="position:fixed; top:0; left:0; width:100%; height:100%; z-index:99; background:#337ab7">'
    assert page.count(fake) == 1 and page.count("<body>") >= 1
    no_policy = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
    as_written, escaped, in_its_box, policy_alone = covering(
        page, no_policy.replace("<body>", f"<body>{styled}fake</div>", 1), no_policy.replace(fake, styled),
        page.replace(fake, styled).replace('<div class="student-content">', "<div>"))
    assert as_written == [], as_written
    assert len(escaped) >= 4 and "no stylesheet" not in escaped, escaped
    assert in_its_box == [] and policy_alone == [], (in_its_box, policy_alone)


def test_a_page_past_the_cap_is_cut_closed_and_says_so():
    big = "<html><head><title>t</title></head><body><div><pre>" + ("x" * 1000 + "\n") * 4000 + "</pre></div></body></html>"
    page = sanitize_page(big, limit=1 << 20)
    assert len(page.encode()) <= 1 << 20
    assert "Feedback truncated by the grader" in page
    assert page.rstrip().endswith("</html>") and page.count("<div") == page.count("</div>")


def test_a_feedback_folder_is_sanitized_in_place_and_links_are_removed(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "01.html").write_text("<html><head></head><body><img src=x onerror=alert(1)></body></html>")
    os.symlink("/etc/passwd", tmp_path / "a" / "leak.html")
    assert sanitize_folder(tmp_path) == 1
    assert not (tmp_path / "a" / "leak.html").exists() and os.path.exists("/etc/passwd")
    assert "onerror" not in (tmp_path / "a" / "01.html").read_text()


def test_hidden_tests_become_one_line_and_the_visible_lines_stay():
    source = "\n".join(['"""checks x."""', "course.selfcheck.f(f)", "    ### BEGIN HIDDEN TESTS", "import autograder.check",
                        "autograder.check.f(f)", "    ### END HIDDEN TESTS", "print('after')"])
    assert without_hidden_tests(source) == ("\n".join(['"""checks x."""', "course.selfcheck.f(f)",
                                                        f"    {HIDDEN_NOTE}", "print('after')"]), 1)
    assert without_hidden_tests("a\n# BEGIN HIDDEN TESTS\nsecret") == (f"a\n{HIDDEN_NOTE}", 1), "no END: hidden to the end"
    assert without_hidden_tests("a = 1\nb = 2") == ("a = 1\nb = 2", 0)


def test_hide_hidden_tests_in_an_instructors_notebook(tmp_path):
    """The source notebook's test cells are what nbgrader puts back into the autograded notebook it runs the hidden
    tests in (--no-trusted): the same cells, regions and markers."""
    path = tmp_path / "00_vjp_contract.ipynb"
    shutil.copy(ROOT / "source" / "00_vjp_contract" / "00_vjp_contract.ipynb", path)
    before = nbformat.read(path, as_version=4)
    regions = sum(c.source.count("BEGIN HIDDEN TESTS") for c in before.cells)
    assert regions >= 3 and "autograder.check" in json.dumps(before)
    assert hide_hidden_tests(path) == regions
    after = nbformat.read(path, as_version=4)
    nbformat.validate(after)
    assert "HIDDEN TESTS" not in json.dumps(after) and "autograder.check" not in json.dumps(after)
    for old, new in zip(before.cells, after.cells, strict=True):
        if "BEGIN HIDDEN TESTS" not in old.source:
            assert new == old
            continue
        visible = old.source[:old.source.index("### BEGIN HIDDEN TESTS")]
        assert new.source == visible + HIDDEN_NOTE and "course.selfcheck." in visible, new.source
        assert new.metadata == old.metadata and new.outputs == old.outputs
    assert hide_hidden_tests(path) == 0, "a second pass finds nothing"
