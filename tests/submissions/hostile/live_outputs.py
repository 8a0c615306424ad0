# Hostile: outputs made to run in the browser of whoever opens the feedback page, the instructor included: HTML with
# <script> and <img onerror>, Javascript, an SVG with onload, Markdown with raw HTML, a javascript: link and a remote
# image, LaTeX with \href, a widget, and a PNG whose data breaks out of nbconvert's <img src='...'>. The answers are
# right, so full marks; the autograded notebook keeps the outputs' text and real images only, and the feedback page
# runs and loads nothing (checked in the proof).
# assignment: 01_matmul_from_shapes
# expect: * full
# %% linear_backward
import ipywidgets
from IPython.display import HTML, SVG, Javascript, Latex, Markdown, display

display(HTML("<script>document.title='pwned-script'</script><img src=x onerror=\"document.title='pwned-onerror'\">"))
display(Javascript("document.title = 'pwned-javascript'"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="document.title=\'pwned-svg\'"><circle r="4"/></svg>'))
display(Markdown("<img src=y onerror=\"document.title='pwned-md'\"> [click](javascript:alert('pwned-link')) "
                 "![t](http://evil.example/pwned.png)"))
display(Latex(r"$\href{javascript:alert('pwned-latex')}{x}$"))
display({"image/png": "iVBORw0KGgo=' onerror='document.title=\"pwned-png\"", "text/plain": "a png"}, raw=True)
display(ipywidgets.HTML("<script>document.title='pwned-widget'</script>"))
print("<script>document.title='pwned-stdout'</script>")  # text: the page shows it escaped


def linear_backward(x, w, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    return dy @ w.mT, x_rows.mT @ dy_rows
