"""A real headless browser for the HTML page tests: Debian's ``chromium`` driven by Playwright.

Playwright's Python package brings its own driver but no browser here: it launches the system
chromium (``executable_path``), so nothing is downloaded. Tests skip only when no chromium is
installed; a missing ``playwright`` package is an error (it is in the ``test`` extra).
"""

from __future__ import annotations

import shutil
from typing import Any, Iterator

import pytest

VIEWPORT = {"width": 1400, "height": 900}


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def launch() -> Iterator[Any]:
    """Yields a Playwright Browser (for a fixture); skips the test when there is no chromium."""
    path = chromium_path()
    if path is None:
        pytest.skip("no chromium browser found: `apt-get install -y chromium` to run the HTML browser tests")
    from playwright.sync_api import sync_playwright  # in the test extra: an ImportError is a setup bug

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser: Any, path: str) -> Any:
    """A fresh page showing the file at ``path``, once its script said it is ready; script errors
    fail the test."""
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto("file://" + path)
    page.wait_for_selector("body[data-ready]", timeout=30_000)
    assert errors == [], errors
    page.errors = errors  # checked again by tests that click around
    return page


def visible(page: Any, element_ids: list[str]) -> list[str]:
    """Those of the elements whose box lies wholly inside the graph view's box on screen."""
    return page.evaluate(
        """ids => ids.filter(function (id) {
          var e = document.getElementById(id), v = document.getElementById('view');
          if (!e) { return false; }
          var r = e.getBoundingClientRect(), w = v.getBoundingClientRect();
          return r.width > 0 && r.left >= w.left && r.right <= w.right && r.top >= w.top && r.bottom <= w.bottom;
        })""",
        list(element_ids),
    )


def in_view(page: Any, element_id: str) -> bool:
    """Whether the element's box lies inside the graph view's box on screen."""
    return visible(page, [element_id]) == [element_id]
