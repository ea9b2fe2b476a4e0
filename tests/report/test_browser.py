"""The report in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``; ``.ci/run`` installs
them): it opens from file:// with no console error and no request, every chart is drawn, and the worst
answers are there — including one whose text holds ``<script>`` and ``</svg>``, shown as text."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from PIL import Image

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.report import build_report
from tests.report.test_report import GOLDEN, HOSTILE_ANSWER, HOSTILE_MODEL, HOSTILE_PASSAGE, OFFLINE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
WORST = 8

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver "
    "(.ci/run installs them when absent)",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The sample's report with one hostile answer added; returns the page and the expected worst row keys."""
    folder = tmp_path_factory.mktemp("browser")
    golden = pl.read_parquet(GOLDEN)
    evil = score_frame(pl.DataFrame({
        "conversation_id": ["evil-1"], "created_at": golden.get_column("created_at").head(1),
        "model": [HOSTILE_MODEL], "language": ["en"], "input": ["How tall?"], "output": [HOSTILE_ANSWER],
        "context": [[HOSTILE_PASSAGE]],
    }))
    scored = pl.concat([golden, evil.select(golden.columns)])
    scored.write_parquet(folder / "scored.parquet")
    expected = (
        scored.filter(pl.col("hallucination_score") > 0)
        .sort(["hallucination_score", "faithfulness_score", "row_key"], descending=[True, False, False])
        .get_column("row_key").head(WORST).to_list()
    )
    assert "evil-1" in expected
    path, _ = build_report(str(folder / "scored.parquet"), folder / "report.html", baseline_judges=OFFLINE,
                           worst=WORST)
    return path, expected


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,1000", f"--user-data-dir={tmp_path / 'profile'}",
                     "--no-first-run", "--disable-background-networking", "--disable-component-update"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # An explicit driver path: Selenium Manager (which would download one) never runs.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(DRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def _requests(driver: Any) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _drawn_share(png: Path) -> float:
    """Share of the pixels that are not (near) white."""
    image = Image.open(png).convert("L")
    histogram = image.histogram()
    return 1 - sum(histogram[245:]) / (image.width * image.height)


def test_the_report_opens_offline_with_every_chart_drawn(
    browser: Any, report: tuple[Path, list[str]], tmp_path: Path
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    path, expected = report
    url = path.as_uri()
    browser.get("about:blank")
    browser.get_log("performance")  # what the browser's own start page loaded is not the report's
    browser.get_log("browser")
    browser.get(url)
    assert browser.execute_script("return document.readyState") == "complete"

    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []
    requested = _requests(browser)
    assert requested and all(u == url for u in requested), requested  # the file itself, nothing else

    # every chart drawn: present, sized, with marks, and not blank on screen
    charts = browser.find_elements(By.CSS_SELECTOR, "svg[data-chart]")
    assert sorted(c.get_attribute("data-chart") for c in charts) == ["claims", "distribution", "trend", "verdicts"]
    for chart in charts:
        name = chart.get_attribute("data-chart")
        assert chart.size["width"] > 500 and chart.size["height"] > 100, name
        assert len(chart.find_elements(By.CSS_SELECTOR, "path, use, rect")) > 10, name
        browser.execute_script("arguments[0].scrollIntoView()", chart)
        shot = tmp_path / f"chart-{name}.png"
        assert chart.screenshot(str(shot))
        assert _drawn_share(shot) > 0.02, name
    page_shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(page_shot)) and _drawn_share(page_shot) > 0.02

    # the worst answers, in order, with marked claims; the hostile one as text, nothing run
    rows = browser.find_elements(By.CSS_SELECTOR, "#worst article.answer")
    assert [r.get_attribute("data-row-key") for r in rows] == expected
    assert browser.find_elements(By.CSS_SELECTOR, "#worst .claim.mark-contradicted .badge")
    evil = browser.find_element(By.CSS_SELECTOR, 'article[data-row-key="evil-1"]')
    assert HOSTILE_ANSWER in evil.text and "<script>alert('passage')</script>" in evil.text
    assert browser.execute_script("return document.scripts.length") == 0
    assert browser.find_elements(By.CSS_SELECTOR, "#worst img") == []
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it is the check
    assert browser.find_element(By.ID, "baseline-warning").is_displayed()
