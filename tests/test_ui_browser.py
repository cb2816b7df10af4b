"""The web page in a real browser: Debian's headless Chromium, driven by Selenium through
Debian's chromedriver (the same version: no driver download, no internet).

A word count runs on the session's Ray with its page served, each split task on one of the
session's GPUs. The page's spout counter grows; each task's row shows its state, node,
resources, GPU ids and host as ``task_metrics()`` gives them; Kill asks first, and dismissing
the question changes nothing; Deactivate asks, and once accepted the page shows the topology
inactive and the spout's emitted count stops. On the way the page is photographed into the
test's temporary directory and the picture checked (a PNG as wide as the window, drawn, not
blank); the tests change no file of the repository. A chained task's row (no Ray) names the
task whose process it runs in. A page with a token (no Ray) asks for it, forgets a wrong one,
keeps the right one, and never puts it in the address. To retake the README's
``docs/images/ui.png``, name it in ``RAYFLOW_UI_SCREENSHOT``:

    RAYFLOW_UI_SCREENSHOT=docs/images/ui.png python -m pytest -m browser
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from rayflow import Config, TopologyHandle, submit_topology
from rayflow._metrics import TaskMetrics
from rayflow._ui import UiServer

from .conftest import eventually
from .ui_helpers import FakeHandle, task, wordcount

webdriver = pytest.importorskip("selenium.webdriver", reason="Selenium is not installed (the dev extra has it)")
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = pytest.mark.browser

DEADLINE = 30.0
WINDOW = (1400, 1700)
HISTORY_POINTS = 12
"""Seconds of plot in the screenshot (a point per second)."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("no headless Chromium: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    window = "--window-size={},{}".format(*WINDOW)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", window):
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


def settled_value(browser: Any, selector: str, attribute: str = "data-value") -> str | None:
    """``page_value`` read again until the element is there (a redraw can take it away under
    one read), ``None`` only if it never is within the deadline."""
    found: list[str | None] = [None]

    def read() -> bool:
        found[0] = page_value(browser, selector, attribute)
        return found[0] is not None

    eventually(read, timeout=DEADLINE)
    return found[0]


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


def alert_up(browser: Any) -> bool:
    try:
        browser.switch_to.alert  # noqa: B018 (raises until the dialog is up)
    except NoAlertPresentException:
        return False
    return True


def answer_confirm(browser: Any, accept: bool) -> str:
    assert eventually(lambda: alert_up(browser), timeout=DEADLINE)
    alert = browser.switch_to.alert
    question: str = alert.text
    alert.accept() if accept else alert.dismiss()
    return question


def answer_prompt(browser: Any, text: str) -> None:
    """Type ``text`` into the page's question (``window.prompt``) and accept it."""
    assert eventually(lambda: alert_up(browser), timeout=DEADLINE)
    alert = browser.switch_to.alert
    alert.send_keys(text)
    alert.accept()


def png_size(picture: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header (its IHDR chunk comes first)."""
    assert picture[:8] == b"\x89PNG\r\n\x1a\n" and picture[12:16] == b"IHDR"
    width, height = struct.unpack(">II", picture[16:24])
    return int(width), int(height)


def screenshot(browser: Any, tmp_path: Path) -> None:
    """The page as the README shows it, into ``tmp_path`` and checked; copied to
    ``RAYFLOW_UI_SCREENSHOT`` only when that names a file (a deliberate retake)."""
    shot = tmp_path / "ui.png"
    assert browser.save_screenshot(str(shot))
    picture = shot.read_bytes()
    width, height = png_size(picture)
    assert width == WINDOW[0] and WINDOW[1] / 2 < height <= WINDOW[1]  # the window less its frame
    assert len(picture) > 50_000  # tables, plots and the error list drawn; a blank page is a few KB
    wanted = os.environ.get("RAYFLOW_UI_SCREENSHOT")
    if wanted:
        Path(wanted).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, wanted)


def test_the_page_watches_a_word_count_and_deactivates_it(ray_cluster: str, browser: Any, tmp_path: Path) -> None:
    topology = wordcount(rate=300, raise_every=400, split_resources={"num_gpus": 1})
    handle = submit_topology("wordcount", Config(message_timeout_secs=10, max_spout_pending=300), topology)
    page = UiServer()
    try:
        browser.get(page.serve(handle, topology).url)
        assert eventually(lambda: (emitted(browser) or 0) > 0, timeout=DEADLINE)
        first = emitted(browser)
        assert eventually(lambda: (emitted(browser) or 0) > (first or 0), timeout=DEADLINE)
        assert browser.find_element(By.ID, "state").text == "active"

        # Each task's state, node, resources and GPUs, as task_metrics() says them.
        placed = handle.task_metrics()
        for task, m in placed.items():
            row = f'#tasks tr[data-task="{task}"]'
            assert settled_value(browser, f'{row} td[data-field="state"]') == "running"
            assert settled_value(browser, f'{row} td[data-field="node"]') == m["node_ip"]
            assert json.loads(settled_value(browser, f'{row} td[data-field="resources"]') or "") == m["resources"]
            assert settled_value(browser, f'{row} td[data-field="gpu_ids"]') == ", ".join(map(str, m["gpu_ids"]))
            assert settled_value(browser, f'{row} td[data-field="host"]') == str(m["host"]) == str(task)  # none chained
        split = [t for t, m in placed.items() if m["component"] == "split"]
        shown = settled_value(browser, f'#tasks tr[data-task="{split[0]}"] td[data-field="resources"]', "textContent")
        assert shown is not None and "GPU 1" in shown

        # Enough history for the plots, and an error in the list, for the screenshot.
        assert eventually(lambda: browser.execute_script("return points.length") >= HISTORY_POINTS, timeout=DEADLINE)
        an_error = '#errors tr td[data-field="time"]'
        assert eventually(lambda: page_value(browser, an_error) is not None, timeout=DEADLINE)
        screenshot(browser, tmp_path)

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
        page.close()


def test_a_chained_task_says_whose_process_it_runs_in(browser: Any) -> None:
    """No Ray: a ``FakeHandle`` whose task 2 is chained to task 1 (``host``). Its row says
    "in task 1"; task 1's row, its own process, says nothing."""
    handle = FakeHandle("chained")
    handle.tasks = {
        1: {**task(TaskMetrics("sentences", "spout"), 1, pending=0, exhausted=False), "host": 1},
        2: {**task(TaskMetrics("split", "bolt"), 2, pending=0), "host": 1},
    }
    page = UiServer(ray_metrics=False).serve(cast(TopologyHandle, handle))
    try:
        browser.get(page.url)
        chained = '#tasks tr[data-task="2"] td[data-field="host"]'
        assert eventually(lambda: page_value(browser, chained, "textContent") == "in task 1", timeout=DEADLINE)
        assert page_value(browser, chained) == "1"
        assert page_value(browser, '#tasks tr[data-task="1"] td[data-field="host"]', "textContent") == ""
    finally:
        page.close()


def test_with_a_token_the_page_asks_for_it_and_keeps_it_out_of_the_url(browser: Any) -> None:
    """No Ray: a page of a ``FakeHandle`` with a token. A wrong token is refused and asked for
    again; the right one acts and is kept for the tab; the address never holds it."""
    handle = FakeHandle("guarded")
    page = UiServer(token="s3cret", ray_metrics=False).serve(cast(TopologyHandle, handle))
    try:
        browser.get(page.url)
        assert eventually(lambda: browser.find_element(By.ID, "state").text == "active", timeout=DEADLINE)
        browser.find_element(By.ID, "deactivate").click()
        answer_confirm(browser, accept=True)
        answer_prompt(browser, "guess")
        assert "refused" in answer_confirm(browser, accept=True)  # the alert saying so
        assert handle.active

        browser.find_element(By.ID, "deactivate").click()
        answer_confirm(browser, accept=True)
        answer_prompt(browser, "s3cret")  # asked again: the wrong one was forgotten
        assert eventually(lambda: browser.find_element(By.ID, "state").text == "inactive", timeout=DEADLINE)
        assert not handle.active

        browser.find_element(By.ID, "activate").click()
        answer_confirm(browser, accept=True)  # and no question: the token was kept
        assert eventually(lambda: browser.find_element(By.ID, "state").text == "active", timeout=DEADLINE)
        assert "s3cret" not in browser.current_url
    finally:
        page.close()
