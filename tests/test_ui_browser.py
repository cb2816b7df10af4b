"""The web page in a real browser: Debian's headless Chromium, driven by Selenium through
Debian's chromedriver (the same version: no driver download, no internet).

A word count runs on the session's Ray with its page served. The page's spout counter grows;
Kill asks first, and dismissing the question changes nothing; Deactivate asks, and once
accepted the page shows the topology inactive and the spout's emitted count stops. On the way
the page is saved to ``docs/images/ui.png`` (the README shows it): running this test
regenerates it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayflow import Config, submit_topology

from .conftest import eventually
from .ui_helpers import wordcount

webdriver = pytest.importorskip("selenium.webdriver", reason="Selenium is not installed (the dev extra has it)")
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "images" / "ui.png"
DEADLINE = 30.0
HISTORY_POINTS = 12
"""Seconds of plot in the screenshot (a point per second)."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("no headless Chromium: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1700"):
        options.add_argument(argument)
    browser = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=options)
    try:
        yield browser
    finally:
        browser.quit()


def page_value(browser: Any, selector: str, attribute: str = "data-value") -> str | None:
    """An attribute of the element ``selector`` picks, ``None`` while there is none (the
    tables are re-drawn every second, so an element may go stale under the read)."""
    try:
        elements = browser.find_elements(By.CSS_SELECTOR, selector)
        return elements[0].get_attribute(attribute) if elements else None
    except StaleElementReferenceException:
        return None


def emitted(browser: Any) -> int | None:
    text = page_value(browser, '#spouts tr[data-component="sentences"] td[data-field="emitted"]')
    return None if text is None else int(text)


def refreshes(browser: Any, count: int) -> list[int | None]:
    """The spout's emitted count as the page showed it at each of its next ``count`` refreshes."""
    seen: list[int | None] = []
    times = [page_value(browser, "#uptime", "data-time")]

    def refreshed() -> bool:
        shown = page_value(browser, "#uptime", "data-time")
        if shown in (times[-1], None):
            return False
        times.append(shown)
        return True

    for _ in range(count):
        assert eventually(refreshed, timeout=DEADLINE)
        seen.append(emitted(browser))
    return seen


def answer_confirm(browser: Any, accept: bool) -> str:
    def present() -> bool:
        try:
            browser.switch_to.alert  # noqa: B018 (raises until the dialog is up)
        except NoAlertPresentException:
            return False
        return True

    assert eventually(present, timeout=DEADLINE)
    alert = browser.switch_to.alert
    question: str = alert.text
    alert.accept() if accept else alert.dismiss()
    return question


def test_the_page_watches_a_word_count_and_deactivates_it(ray_cluster: str, browser: Any) -> None:
    topology = wordcount(rate=300, raise_every=400)
    handle = submit_topology("wordcount", Config(message_timeout_secs=10, max_spout_pending=300), topology)
    try:
        browser.get(handle.serve_ui(topology=topology))
        assert eventually(lambda: (emitted(browser) or 0) > 0, timeout=DEADLINE)
        first = emitted(browser)
        assert eventually(lambda: (emitted(browser) or 0) > (first or 0), timeout=DEADLINE)
        assert browser.find_element(By.ID, "state").text == "active"

        # Enough history for the plots, and an error in the list, for the screenshot.
        assert eventually(lambda: browser.execute_script("return points.length") >= HISTORY_POINTS, timeout=DEADLINE)
        an_error = '#errors tr td[data-field="time"]'
        assert eventually(lambda: page_value(browser, an_error) is not None, timeout=DEADLINE)
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(SCREENSHOT))

        browser.find_element(By.ID, "kill").click()
        assert "Kill topology wordcount?" in answer_confirm(browser, accept=False)
        assert not handle.killed and browser.find_element(By.ID, "state").text == "active"

        browser.find_element(By.ID, "deactivate").click()
        assert "Deactivate topology wordcount?" in answer_confirm(browser, accept=True)
        assert eventually(lambda: browser.find_element(By.ID, "state").text == "inactive", timeout=DEADLINE)
        stopped = handle.metrics()["sentences"]["emitted"]
        assert eventually(lambda: emitted(browser) == stopped, timeout=DEADLINE)
        assert refreshes(browser, 3) == [stopped] * 3  # three refreshes, a second apart: it stays
    finally:
        handle.kill()
