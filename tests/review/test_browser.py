"""The review page in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``), against the
``review serve`` command on a free port: two reviewers at once, each in a browser of their own, labelling with
the keyboard; blind until each has labelled (the judge's words in neither the page nor the JSON the browser
received before, both after); another reviewer's label never shown; a reload mid-review continuing where the
reviewer was; undo taking the label out of the store; every answer's text, in en, zh and ko, rendered whole
with its language; and the labels then correcting the figures with ``estimate --labels STORE``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from faithfulness_pipeline.review.store import LabelStore
from faithfulness_pipeline.testing.processes import death_signal, free_port, stop
from tests.cli.test_cli import ROOT, run_cli
from tests.review.conftest import HOSTILE_ANSWER, HOSTILE_PASSAGE, Reviewed

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver "
    "(.ci/run installs them when absent)",
)


@dataclass(frozen=True)
class Served:
    url: str
    store: Path
    process: subprocess.Popen[str]


@pytest.fixture(scope="module")
def served(reviewed: Reviewed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``review serve`` of the queue of every answer, as a user starts it, on a free port of 127.0.0.1."""
    store = tmp_path_factory.mktemp("browser-review") / "labels.sqlite"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "faithfulness_pipeline.cli", "review", "serve", str(reviewed.queue), "--scored",
         str(reviewed.scored), "--store", str(store), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, preexec_fn=death_signal())
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the review page did not start"
            time.sleep(0.1)
        yield Served(url, store, process)
    finally:
        stop(process)


@pytest.fixture
def browsers(tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Makes browsers, each with a profile of its own (its own cookies: its own reviewer); all quit at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    made: list[Any] = []

    def make() -> Any:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1100,1000", f"--user-data-dir={tmp_path / f'profile-{len(made)}'}",
                         "--no-first-run", "--disable-background-networking", "--disable-component-update"):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        driver = webdriver.Chrome(options=options, service=Service(executable_path=str(DRIVER)))
        made.append(driver)
        return driver

    try:
        yield make
    finally:
        for driver in made:
            driver.quit()


# ------------------------------------------------------------------------------------------- helpers


def _settled(driver: Any) -> None:
    """Waits until every action the keys started has its answer on the page."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 15).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && document.body.dataset.pending === '0'"))


def _keys(driver: Any, *keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    for key in keys:
        ActionChains(driver).send_keys(key).perform()
        _settled(driver)


def _state(driver: Any) -> dict[str, Any]:
    from selenium.webdriver.common.by import By

    item = driver.find_element(By.ID, "item")
    return {"row_key": item.get_attribute("data-row-key"), "index": int(item.get_attribute("data-index")),
            "judge_shown": driver.find_element(By.ID, "judge").is_displayed(),
            "progress": driver.find_element(By.ID, "progress").text,
            "agreement": driver.find_element(By.ID, "agreement").text,
            "label": driver.find_element(By.ID, "your-label").text}


def _received(driver: Any) -> str:
    """Every body the browser has received from the server since the last call: the pages and their JSON."""
    bodies = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.loadingFinished":
            try:
                found = driver.execute_cdp_cmd("Network.getResponseBody",
                                               {"requestId": message["params"]["requestId"]})
            except Exception:  # a redirect has no body to give
                continue
            bodies.append(found["body"])
    return "\n".join(bodies)


def _requested(driver: Any) -> list[str]:
    return [json.loads(e["message"])["message"]["params"]["request"]["url"] for e in driver.get_log("performance")
            if json.loads(e["message"])["message"]["method"] == "Network.requestWillBeSent"]


def _judge_words(reviewed: Reviewed, row_key: str) -> list[str]:
    """What the judge said of an answer: its reason and each claim's, word for word."""
    row = reviewed.rows.filter(pl.col("row_key") == row_key).row(0, named=True)
    return [t for t in (row["hallucination_reason"], *(v["reason"] for v in row["verdicts"] or [])) if t]


def _open(make: Callable[[], Any], served: Served, reviewer: str) -> Any:
    driver = make()
    driver.get("about:blank")
    driver.get_log("performance")  # what the browser's own start page loaded is not the review's
    driver.get_log("browser")
    driver.get(f"{served.url}?reviewer={reviewer}")
    _settled(driver)
    return driver


# ------------------------------------------------------------------------------------------- tests


def test_two_reviewers_label_at_once_blind_with_reload_and_undo(
        served: Served, reviewed: Reviewed, browsers: Callable[[], Any]) -> None:
    from selenium.webdriver.common.keys import Keys

    ana, bora = _open(browsers, served, "ana"), _open(browsers, served, "보라")
    total = reviewed.rows.height
    first = _state(ana)
    assert first["index"] == 0 and first["progress"] == f"0 of {total} labelled" and not first["judge_shown"]
    hidden = _judge_words(reviewed, first["row_key"])
    assert hidden
    before = ana.page_source + _received(ana)
    assert not [word for word in hidden if word in before]  # blind: not on the page, not in any JSON

    _keys(ana, "1", "h")  # the first claim supported, the answer hallucinated
    labelled = _state(ana)
    assert labelled["judge_shown"] and labelled["label"] == "your label: hallucinated"
    assert all(word in ana.page_source for word in hidden) and any(word in _received(ana) for word in hidden)
    _keys(ana, Keys.ENTER, "n", Keys.ENTER, "n")  # answers 1 and 2

    # 보라 at the same time: skips answer 0, labels 1, 2 and 3
    _keys(bora, Keys.ARROW_RIGHT, "h", Keys.ENTER, "n", Keys.ENTER, "h", Keys.ENTER)
    assert _state(bora)["index"] == 4 and _state(bora)["progress"] == f"3 of {total} labelled"
    _keys(bora, Keys.ARROW_LEFT, Keys.ARROW_LEFT, Keys.ARROW_LEFT, Keys.ARROW_LEFT)
    theirs = _state(bora)  # answer 0, which only ana labelled: blind for 보라
    assert theirs["index"] == 0 and not theirs["judge_shown"] and theirs["label"] == "not labelled yet"
    assert not [word for word in hidden if word in bora.page_source]

    keys = [item["row_key"] for item in _queue(reviewed)]
    store = LabelStore(str(served.store), create=False)
    assert set(store.of_reviewer("ana")) == set(keys[:3]) and set(store.of_reviewer("보라")) == set(keys[1:4])
    mine = store.of_reviewer("ana")[keys[0]]
    assert mine.label_hallucinated is True and mine.label_faithfulness == 1.0
    assert mine.claim_labels[0]["verdict"] == "supported" and mine.judge_model == "offline-lexical-v1"

    ana.refresh()  # mid-review: back where ana was, the first answer left to do
    _settled(ana)
    assert _state(ana)["index"] == 3 and _state(ana)["progress"] == f"3 of {total} labelled"
    assert "with 보라 1 of 2 answers" in _state(ana)["agreement"]  # they split on answer 1, agree on 2

    _keys(ana, "u")  # takes back ana's latest label, answer 2: blind again, and gone from the store
    undone = _state(ana)
    assert undone["index"] == 2 and not undone["judge_shown"] and undone["progress"] == f"2 of {total} labelled"
    assert set(store.of_reviewer("ana")) == set(keys[:2])
    store.close()

    for driver in (ana, bora):
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        assert errors == []
        requested = _requested(driver)
        assert all(url.startswith(served.url) for url in requested), requested  # nothing from anywhere else

    # the labels correct the figures: estimate reads the store itself
    done = run_cli("estimate", str(reviewed.scored), "--labels", str(served.store), "--by", "", "--min-labels", "2")
    assert done.returncode == 0, done.stderr
    assert "4 of 4 labelled answer(s) correct the figures" in done.stderr


def _queue(reviewed: Reviewed) -> list[dict[str, Any]]:
    """The queue's answers in its order, with their texts from the scored table."""
    queue = pl.read_parquet(reviewed.queue).select("row_key", "language")
    return queue.join(reviewed.rows.select("row_key", "input", "output", "context"), on="row_key",
                      maintain_order="left").to_dicts()


def test_every_answer_renders_whole_in_its_language(served: Served, reviewed: Reviewed,
                                                    browsers: Callable[[], Any]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    chen = _open(browsers, served, "陈")
    queue = _queue(reviewed)
    assert {"en", "zh-CN", "zh-TW", "ko"} <= {item["language"] for item in queue}
    for position, expected in enumerate(queue):
        state = _state(chen)
        assert state["index"] == position and state["row_key"] == expected["row_key"]
        for element, text in (("question", expected["input"]), ("answer", expected["output"])):
            shown = chen.find_element(By.ID, element)
            assert shown.get_attribute("textContent") == text and shown.get_attribute("lang") == expected["language"]
        passages = chen.find_elements(By.CSS_SELECTOR, "#context li")
        assert [p.get_attribute("textContent") for p in passages] == expected["context"]
        assert all(p.get_attribute("lang") == expected["language"] for p in passages)
        if position < len(queue) - 1:
            _keys(chen, Keys.ARROW_RIGHT)
    assert chen.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    assert chen.find_element(By.ID, "reviewer").text == "陈"
    # the hostile answer and passage were among those shown whole, as text: nothing they hold ran or loaded
    assert HOSTILE_ANSWER in {item["output"] for item in queue}
    assert [HOSTILE_PASSAGE] in [item["context"] for item in queue]
    assert chen.execute_script("return window.__pwned === undefined")
    assert chen.find_elements(By.CSS_SELECTOR, "#item img, #item script") == []
    assert not LabelStore(str(served.store), create=False).of_reviewer("陈")  # looking labels nothing
