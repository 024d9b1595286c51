"""The attention explorer page in a real browser: headless Chromium driven by Selenium opens the page from file://,
picks a kind, layer and head, hovers a query token and reads the weights the page shows, which must be the model's.

Needs selenium (pip) and Debian's chromium and chromium-driver; skipped, saying so, where they are not installed
(CI installs them)."""

from pathlib import Path

import pytest
import torch

from hf_transformer import TransformerForConditionalGeneration
from hf_transformer.attention_view import attention_data, render_page
from tests.helpers.browser import headless_chromium, needed
from tests.helpers.models import tiny_config

needed("selenium.webdriver", "pip install selenium")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

pytestmark = pytest.mark.browser

SENTENCE, TARGET = 'a man <rides> "a" red bike . 정말', "ein mann fährt ein rotes fahrrad ."
TEXTS = ["a man rides a red bike .", "two dogs play in the snow .", "ein mann fährt ein rotes fahrrad ."] * 3


@pytest.fixture(scope="module")
def browser():
    driver = headless_chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    from hf_transformer.tokenization import train_tokenizer

    tokenizer = train_tokenizer(TEXTS, vocab_size=80, model_type="bpe", model_max_length=32, show_progress=False)
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tokenizer), max_position_embeddings=32, num_attention_heads=2, encoder_layers=2, decoder_layers=3
    )
    model = TransformerForConditionalGeneration(config).eval()
    folder = tmp_path_factory.mktemp("explorer")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    data = attention_data(folder, SENTENCE, target=TARGET)
    page = folder / "attention.html"
    page.write_text(render_page(data), encoding="utf-8")
    source_ids = tokenizer(SENTENCE)["input_ids"]
    labels = tokenizer(text_target=TARGET)["input_ids"]
    with torch.no_grad():
        output = model(
            input_ids=torch.tensor([source_ids]),
            decoder_input_ids=torch.tensor([[config.decoder_start_token_id, *labels]]),
            output_attentions=True,
        )
    expected = {"encoder": output.encoder_attentions, "decoder": output.decoder_attentions}
    expected["cross"] = output.cross_attentions
    return {"page": page, "data": data, "expected": expected}


def open_page(driver, page: Path):
    driver.get(page.as_uri())
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))


def choose(driver, kind: str, layer: int, head: int):
    for name, value in (("kind", kind), ("layer", layer), ("head", head)):
        Select(driver.find_element(By.ID, name)).select_by_value(str(value))


def hover_query(driver, index: int):
    token = driver.find_element(By.CSS_SELECTOR, f'#queries .token.query[data-index="{index}"]')
    ActionChains(driver).move_to_element(token).perform()
    return token


def shown_weights(driver, query: int) -> tuple[list[float], list[str]]:
    weights = driver.find_elements(By.CSS_SELECTOR, "#keys .weight[data-key]")
    assert [int(w.get_attribute("data-key")) for w in weights] == list(range(len(weights)))
    assert {w.get_attribute("data-query") for w in weights} == {str(query)}
    return [float(w.get_attribute("data-weight")) for w in weights], [w.text for w in weights]


def alpha(element) -> float:
    colour = element.value_of_css_property("background-color")  # rgba(37, 99, 235, 0.5), or rgb(...) for 1
    parts = colour[colour.index("(") + 1 : -1].split(",")
    return float(parts[3]) if len(parts) == 4 else 1.0


def test_hovering_a_query_shows_the_models_weights(browser, translator):
    open_page(browser, translator["page"])
    data = translator["data"]
    chips = browser.find_elements(By.CSS_SELECTOR, "#source-tokens .chip")
    assert [chip.get_attribute("textContent") for chip in chips] == data["source_tokens"]  # escaped, as split
    assert browser.title == f"Attention: {SENTENCE}"

    choose(browser, "cross", 1, 1)
    query = 3
    token = hover_query(browser, query)
    assert "active" in token.get_attribute("class")
    weights, texts = shown_weights(browser, query)
    expected = translator["expected"]["cross"][1][0, 1, query]
    assert len(weights) == len(data["source_tokens"])
    torch.testing.assert_close(torch.tensor(weights), expected, atol=6e-5, rtol=0)
    assert texts == [f"{w:.3f}" for w in weights]  # the weight as a number
    rows = browser.find_elements(By.CSS_SELECTOR, "#keys .key-row")
    order = sorted(range(len(weights)), key=weights.__getitem__)
    strongest, weakest = order[-1], order[0]
    assert alpha(rows[strongest]) > alpha(rows[weakest])  # and as colour intensity

    other = 5  # hovering another query changes what is shown
    hover_query(browser, other)
    weights, _ = shown_weights(browser, other)
    torch.testing.assert_close(
        torch.tensor(weights), translator["expected"]["cross"][1][0, 1, other], atol=6e-5, rtol=0
    )


def test_the_look_ahead_mask_is_marked(browser, translator):
    open_page(browser, translator["page"])
    choose(browser, "decoder", 2, 0)
    length = len(translator["data"]["target_tokens"])
    query = 2
    hover_query(browser, query)
    weights, texts = shown_weights(browser, query)
    torch.testing.assert_close(
        torch.tensor(weights), translator["expected"]["decoder"][2][0, 0, query], atol=6e-5, rtol=0
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "#keys .key-row")
    later = [j for j, row in enumerate(rows) if "masked-ahead" in row.get_attribute("class")]
    assert later == list(range(query + 1, length)) and all(texts[j] == "masked" for j in later)
    hatched = browser.find_elements(By.CSS_SELECTOR, "#matrix td.cell.masked-ahead")
    assert len(hatched) == length * (length - 1) // 2  # the upper triangle
    assert all(int(c.get_attribute("data-key")) > int(c.get_attribute("data-query")) for c in hatched)
    assert browser.find_element(By.ID, "legend-ahead").is_displayed()


def test_all_heads_shows_one_matrix_per_layer_and_head(browser, translator, tmp_path):
    open_page(browser, translator["page"])
    data = translator["data"]
    for kind in ("encoder", "cross"):
        Select(browser.find_element(By.ID, "kind")).select_by_value(kind)
        browser.find_element(By.ID, "all-heads").click()
        cells = browser.find_elements(By.CSS_SELECTOR, "#grid .head-cell")
        assert len(cells) == data["layers"][kind] * data["heads"]
        assert browser.find_element(By.ID, "grid").is_displayed()
        assert not browser.find_element(By.ID, "main").is_displayed()
    screenshot = tmp_path / "attention-explorer-all-heads.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes().startswith(b"\x89PNG")

    # A click on a head opens it.
    browser.find_element(By.CSS_SELECTOR, '#grid .head-cell[data-layer="2"][data-head="1"]').click()
    assert browser.find_element(By.ID, "main").is_displayed()
    assert Select(browser.find_element(By.ID, "layer")).first_selected_option.get_attribute("value") == "2"
    assert Select(browser.find_element(By.ID, "head")).first_selected_option.get_attribute("value") == "1"
    hover_query(browser, 0)
    weights, _ = shown_weights(browser, 0)
    torch.testing.assert_close(torch.tensor(weights), translator["expected"]["cross"][2][0, 1, 0], atol=6e-5, rtol=0)
    screenshot = tmp_path / "attention-explorer.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000
