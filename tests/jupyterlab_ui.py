"""Driving JupyterLab in headless Chromium as a learner does, one step at a time: each step waits for the state it
leads to (Playwright's auto-waiting locators and `expect`) before the next key goes in, so that a slow machine
only makes a test slower, never sends a key to whatever happens to hold the focus."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As the machine notes say: root needs --no-sandbox; the closed network needs background networking off.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NOTEBOOK = ".jp-NotebookPanel-notebook:visible"  # the notebook of the tab in front
STEP = 60_000  # ms: a deadline for one key's effect, far above its time on a loaded machine (never waited out)


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium for the whole run: Playwright's sync API runs one event loop per process, so a second
    `sync_playwright()` while the first is open fails ('using Playwright Sync API inside the asyncio loop')."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("Chromium is not installed (make test installs it as root: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def patient(page):
    """PAGE with STEP as the deadline of every action and check that names none (Playwright's are 30 s and 5 s)."""
    from playwright.sync_api import expect

    page.set_default_timeout(STEP)
    expect.set_options(timeout=STEP)
    return page


def code_cell(page, text: str):
    """The notebook's code cell whose source contains TEXT."""
    return page.locator(".jp-CodeCell").filter(has_text=text).first


def run_cell(page, text: str):
    """Run the code cell holding TEXT (its editor clicked, then Shift+Enter, as a learner runs it); the cell."""
    from playwright.sync_api import expect

    cell = code_cell(page, text)
    cell.locator(".jp-InputArea-editor").click()
    expect(cell).to_have_class(_has("jp-mod-active"), timeout=STEP)
    expect(page.locator(NOTEBOOK)).to_have_class(_has("jp-mod-editMode"), timeout=STEP)
    page.keyboard.press("Shift+Enter")
    return cell


def add_cell_and_run(page, source: str) -> None:
    """A new code cell below the active one, SOURCE typed into it and run: command mode, B, Enter, type,
    Shift+Enter, each step once the notebook shows the previous one done."""
    from playwright.sync_api import expect

    notebook = page.locator(NOTEBOOK)
    cells = notebook.locator(".jp-Cell")
    before = cells.count()
    page.keyboard.press("Escape")
    expect(notebook).to_have_class(_has("jp-mod-commandMode"), timeout=STEP)
    page.keyboard.press("b")
    expect(cells).to_have_count(before + 1, timeout=STEP)
    page.keyboard.press("Enter")
    expect(notebook).to_have_class(_has("jp-mod-editMode"), timeout=STEP)
    page.keyboard.type(source)
    expect(notebook.locator(".jp-Cell.jp-mod-active")).to_contain_text(source, timeout=STEP)
    page.keyboard.press("Shift+Enter")


def _has(name: str):
    """A class attribute that holds NAME among others (for expect(...).to_have_class)."""
    import re

    return re.compile(rf"(^|\s){re.escape(name)}(\s|$)")
