"""Feedback pages are safe to open: nothing a submission wrote runs or loads, and a page has a size cap."""

from __future__ import annotations

import os

import nbformat
from nbconvert import HTMLExporter

from autograder.feedback import sanitize_folder, sanitize_page
from tests.grading.pagecheck import live_markup

# What a student can put in a Markdown cell (rendered with raw HTML passed on) or in an output.
HOSTILE_MARKDOWN = """# Part A <script>document.title='pwned-md-script'</script>

<img src=x onerror="document.title='pwned-onerror'"> <a href="javascript:alert('pwned')">click</a>
<a href=" jav&#x09;ascript:alert(1)">tabbed scheme</a> ![remote](http://evil.example/pwned.png)
<iframe src="http://evil.example/"></iframe><svg onload="alert(1)"><circle r="3"/></svg>
<form action="http://evil.example/"><input name=a></form><style>body { background: url(http://evil.example/x) }</style>
<div style="background-image: url(http://evil.example/y)">styled</div><meta http-equiv="refresh" content="0;url=http://evil.example/">
<object data="http://evil.example/x.swf"></object><base href="http://evil.example/"><link rel=stylesheet href=//evil.example/c.css>
<details><summary>Hint 1</summary>The question to ask.</details>

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


def test_the_head_keeps_the_templates_styles_and_mathjax_and_nothing_else():
    mathjax = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe"
    page = sanitize_page(
        '<!DOCTYPE html>\n<html>\n<head><meta charset="utf-8" /><title>01 &amp; more</title>'
        '<style type="text/css">div > p { color: red }</style>'
        '<script src="https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.3/jquery.min.js"></script>'
        f'<script src="{mathjax}"> </script>'
        '<script type="text/x-mathjax-config">init_mathjax = function() { if (a < b) {} };</script>'
        '<link rel="stylesheet" href="https://evil.example/c.css"></head>\n'
        "<body><p>x</p><script>alert(1)</script></body>\n</html>")
    assert "<title>01 &amp; more</title>" in page and "div > p { color: red }" in page, "CSS as written"
    assert f'<script src="{mathjax.replace("&", "&amp;")}">' in page and "if (a < b) {}" in page, "maths still render"
    assert page.count("<script") == 2 and "jquery" not in page and "evil.example" not in page
    assert live_markup(page) == []


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
