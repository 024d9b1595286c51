"""The demo app in a real browser: ``python -m hf_transformer.app FOLDER`` serves a small trained translator on a
free localhost port, and headless Chromium (Selenium, Debian's chromium and chromium-driver) types a sentence,
reads the translation shown, finds the attention explorer, and gets the message for an empty sentence. Nothing is
fetched from anywhere but 127.0.0.1: the browser resolves no other host name.

Set ``UPDATE_SCREENSHOTS=1`` to write docs/images/demo-app.png (written when it is missing too)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from transformers import DataCollatorForSeq2Seq

from hf_transformer import Predictor, TransformerForConditionalGeneration
from hf_transformer.tokenization import train_tokenizer
from tests.helpers.browser import headless_chromium, needed
from tests.helpers.models import tiny_config

needed("gradio", 'pip install -e ".[demo]"')
needed("selenium.webdriver", "pip install selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO / "docs" / "images" / "demo-app.png"
PAIRS = [
    ("a dog runs", "ein hund läuft"),
    ("a cat sleeps", "eine katze schläft"),
    ("a man sits", "ein mann sitzt"),
    ("a woman runs", "eine frau läuft"),
    ("a dog sleeps", "ein hund schläft"),
]
SENTENCE = "a dog runs"
WAIT = 60  # seconds, for the server to start and for each answer in the page


def train_folder(folder: Path) -> Path:
    """A tiny translator that has learnt PAIRS (a second or two of training), saved with its tokenizer."""
    torch.manual_seed(0)
    tokenizer = train_tokenizer([text for pair in PAIRS for text in pair] * 20, vocab_size=60, show_progress=False)
    config = tiny_config(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = TransformerForConditionalGeneration(config)
    batch = DataCollatorForSeq2Seq(tokenizer)([tokenizer(source, text_target=target) for source, target in PAIRS])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The command serving a trained folder: (url, folder); stopped after the module's tests."""
    folder = train_folder(tmp_path_factory.mktemp("browser") / "translator")
    port = free_port()
    log = (tmp_path_factory.getbasetemp() / "app.log").open("w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "hf_transformer.app", str(folder), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + WAIT
        while True:
            if server.poll() is not None:
                log.seek(0)
                pytest.fail(f"the app stopped with {server.returncode}:\n{log.read()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the app did not answer at {url} within {WAIT} s")
            time.sleep(0.3)
        yield url, folder
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser():
    driver = headless_chromium(local_only=True)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


def textarea(driver, elem_id: str):
    return driver.find_element(By.CSS_SELECTOR, f"#{elem_id} textarea")


def test_the_page_translates_shows_attention_and_refuses_empty_input(served, browser):
    url, folder = served
    expected = Predictor.from_pretrained(folder).translate([SENTENCE])[0]
    wait = WebDriverWait(browser, WAIT)
    browser.get(url)
    source = wait.until(lambda driver: textarea(driver, "source"))
    source.send_keys(SENTENCE)
    browser.find_element(By.ID, "run").click()
    shown = wait.until(lambda driver: textarea(driver, "output").get_attribute("value"))
    assert shown == expected and expected, (shown, expected)

    # The attention explorer of that sentence, a page of its own inside an iframe, running its script.
    frame = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "#attention iframe.attention-explorer"))
    browser.switch_to.frame(frame)
    try:
        wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, ".token.query"))
        assert driver_text(browser)
    finally:
        browser.switch_to.default_content()
    time.sleep(0.5)  # the iframe's layout settles
    saved = Path(os.environ.get("PYTEST_SCREENSHOT_DIR", folder.parent)) / "demo-app.png"
    browser.save_screenshot(str(saved))
    if os.environ.get("UPDATE_SCREENSHOTS") == "1" or not SCREENSHOT.exists():
        save_small(saved, SCREENSHOT)

    # Everything the page loaded came from the app itself.
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(entry => entry.name)")
    assert loaded and all(name.startswith(("http://127.0.0.1", "data:", "blob:")) for name in loaded), loaded

    # An empty sentence: a message in the page, no stack trace.
    source.send_keys(Keys.CONTROL, "a")
    source.send_keys(Keys.DELETE)
    browser.find_element(By.ID, "run").click()
    wait.until(lambda driver: "the input is empty" in driver_text(driver))
    assert "Traceback" not in driver_text(browser)

    # The batch tab: one output line per pasted line, a blank one for a blank one.
    lines = ["a cat sleeps", "", "a man sits"]
    (tab,) = [tab for tab in browser.find_elements(By.CSS_SELECTOR, "[role=tab]") if tab.text == "Batch"]
    tab.click()
    wait.until(lambda driver: textarea(driver, "batch-source").is_displayed())
    textarea(browser, "batch-source").send_keys("\n".join(lines))
    browser.find_element(By.ID, "batch-run").click()
    shown = wait.until(lambda driver: textarea(driver, "batch-output").get_attribute("value"))
    assert shown.split("\n") == Predictor.from_pretrained(folder).translate(lines)


def save_small(screenshot: Path, target: Path) -> None:
    """The screenshot in 64 colours, under the 40 KB a file of docs/ may take (tests/test_layout.py)."""
    from PIL import Image

    target.parent.mkdir(parents=True, exist_ok=True)
    image = Image.open(screenshot).convert("RGB")
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(target, optimize=True)


def driver_text(driver) -> str:
    return driver.find_element(By.TAG_NAME, "body").text
