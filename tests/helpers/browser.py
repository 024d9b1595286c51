"""Headless Chromium for the tests that use a page as a person would (Debian's chromium and chromium-driver, driven by
Selenium). Where they are not installed the tests skip, saying what to install; under CI (``CI=true``), which installs
them (.ci/run), a missing one fails the run instead, so that a skip never hides a browser test that did not run."""

from __future__ import annotations

import importlib
import os
import shutil

import pytest

REQUIRED = os.environ.get("CI", "").lower() == "true"


def needed(module: str, install: str):
    """``module`` imported; else a skip naming ``install`` (a failure under CI)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed ({install})"
        if REQUIRED:
            pytest.fail(f"CI installs it: {message}", pytrace=False)
        pytest.skip(message, allow_module_level=True)


def chromium_paths() -> tuple[str, str]:
    """The browser and its driver; else a skip (a failure under CI)."""
    driver = shutil.which("chromedriver")
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if driver is None or browser is None:
        message = "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        if REQUIRED:
            pytest.fail(f"CI installs them: {message}", pytrace=False)
        pytest.skip(message)
    return browser, driver


def headless_chromium(window: str = "1400,1000", *, local_only: bool = False):
    """A Selenium driver of headless Chromium, its driver's path given (Selenium Manager, which would download a
    driver, is never called); root-safe (CI runs as root, where Chromium's sandbox refuses to start) and
    small-/dev/shm-safe (containers). ``local_only``: the browser resolves no host name but 127.0.0.1."""
    webdriver = needed("selenium.webdriver", "pip install selenium")
    binary, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    arguments = [
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={window}",
    ]
    if local_only:
        arguments.append("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1")
    for argument in arguments:
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
