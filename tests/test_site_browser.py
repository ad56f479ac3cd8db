"""The built notebooks site, in a real browser with the network off (issue 41, item 1).

Chromium (driven by Playwright) opens every page of the site, served from 127.0.0.1, with every other request
aborted, and checks what a reader sees: no raw `$...$` or `\\(...\\)` left in the text (MathJax, bundled into the
site, typeset it), every <img> loaded (naturalWidth > 0), no error on the console, no page error, no request
that tried to leave the machine.

    pytest -m browser                                  # builds the site from the committed notebooks (seconds)
    FA_SITE_DIR=site pytest -m browser                 # checks a site already built

Skipped when Playwright or a Chromium is absent — unless CI is set (.ci/run sets it): there a missing browser
fails. Playwright's own browser download is not needed: the system's chromium is used (`apt-get install chromium`).
"""
from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# text a reader sees, outside code: an inline `$x$` / `$$x$$` or `\(x\)` / `\[x\]` that MathJax did not typeset
RAW_MATH = re.compile(r"\$\$?[^$\s][^$\n]*?\$|\\\(.+?\\\)|\\\[.+?\\\]", re.S)
VISIBLE_TEXT_JS = """() => {
  const root = document.querySelector('article') || document.body;
  const copy = root.cloneNode(true);
  copy.querySelectorAll('pre, code, script, style, .jp-CodeCell .jp-InputArea, .highlight, .MathJax_Preview, mjx-container, '
                        + '.MathJax, .MathJax_Display, .MathJax_SVG, .MathJax_CHTML, .katex').forEach(e => e.remove());
  return copy.textContent;
}"""
MATH_DONE_JS = """() => new Promise(resolve => {
  if (!window.MathJax || !window.MathJax.Hub) { resolve('no MathJax'); return; }
  window.MathJax.Hub.Queue(() => resolve('typeset'));
})"""


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the browser test must run here, not skip)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium():
    if importlib.util.find_spec("playwright") is None:
        _missing("playwright is not installed (pip install playwright)")
    path = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    if not path:
        _missing("no chromium on PATH (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory):
    given = os.environ.get("FA_SITE_DIR")
    if given:
        return Path(given).resolve()
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "notebooks" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_site(module.HERE, tmp_path_factory.mktemp("site") / "site")  # the committed outputs


@pytest.fixture(scope="module")
def server(site_dir):
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _pages(site_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(site_dir)) for p in site_dir.rglob("*.html"))


def test_every_page_renders_offline(chromium, site_dir, server):
    pages = _pages(site_dir)
    assert "index.html" in pages and len(pages) > 2, pages
    problems: list[str] = []
    context = chromium.new_context()
    blocked: list[str] = []

    def route(r):
        if r.request.url.startswith(server + "/") or r.request.url.startswith("data:"):
            r.continue_()
        else:  # the network is off: nothing but the local site
            blocked.append(r.request.url)
            r.abort("internetdisconnected")

    context.route("**/*", route)
    for name in pages:
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m, errors=errors: m.type == "error" and errors.append(f"console: {m.text}"))
        page.on("pageerror", lambda e, errors=errors: errors.append(f"page error: {e}"))
        page.on("requestfailed", lambda r, errors=errors: errors.append(f"request failed: {r.url} {r.failure}"))
        page.goto(f"{server}/{name}", wait_until="load")
        state = page.evaluate(MATH_DONE_JS)
        raw = RAW_MATH.findall(page.evaluate(VISIBLE_TEXT_JS))
        if raw:
            problems.append(f"{name}: {len(raw)} raw maths ({state}), e.g. {raw[:3]}")
        broken = page.evaluate("() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                               ".map(i => (i.getAttribute('src') || '').slice(0, 80))")
        if broken:
            problems.append(f"{name}: {len(broken)} images not loaded: {broken[:3]}")
        problems += [f"{name}: {e}" for e in errors]
        page.close()
    context.close()
    problems += [f"tried to leave the machine: {u}" for u in sorted(set(blocked))]
    print("\n".join(problems))  # the whole list, which the assertion message truncates
    assert not problems, "\n".join(problems)


def test_no_page_points_off_site(site_dir):
    """No script, stylesheet or image in the built HTML loads from another host (a link a reader follows may)."""
    tags = re.compile(r"<(?:script|img|link|iframe)\b[^>]*>", re.I)
    url = re.compile(r"\b(?:src|href)=[\"']?((?:https?:)?//[^\"' >]+)", re.I)
    external = set()
    for name in _pages(site_dir):
        for tag in tags.findall((site_dir / name).read_text()):
            if re.search(r"rel=[\"']?canonical", tag):  # names the page, loads nothing
                continue
            external.update(f"{name}: {u}" for u in url.findall(tag))
    assert not external, sorted(external)[:10]
