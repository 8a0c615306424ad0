"""Feedback pages are safe to open: nothing a submission wrote runs or loads, and a page has a size cap.
They read the same offline: maths as MathML, tables and layout from the grader's own stylesheet; and
the hidden tests' lines are out of the notebook the feedback is made from."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import time

import nbformat
from nbconvert import HTMLExporter

from autograder.feedback import (
    FORMULAS_MAX,
    HIDDEN_NOTE,
    POLICY,
    STYLESHEET,
    TEX_FORMULA_MAX,
    formulas,
    hide_hidden_tests,
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
    """The notebook as nbconvert's classic template renders it (nbgrader's feedback template extends it)."""
    body, _ = HTMLExporter(template_name="classic").from_notebook_node(hostile_notebook())
    return body


def test_the_checker_sees_what_a_raw_page_would_run():
    found = "\n".join(live_markup(rendered()))
    for live in ("<script>", "onerror=", "javascript:", "evil.example", "<iframe>", "<svg>", "<form>", "<style>"):
        assert live in found, f"the page check misses {live}: it could never fail"


def test_a_sanitized_page_runs_and_loads_nothing_and_keeps_the_course():
    page = sanitize_page(rendered())
    assert live_markup(page) == []
    for kept in ("<details>", "<summary>Hint 1</summary>", "<table>", "<td>1</td>", 'id="Part-A', 'href="#Part-A',
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
