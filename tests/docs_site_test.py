"""The documentation site: it builds strictly, the front page's links hold, and it works in a browser.

Runs in the docs environment (`make test-docs`: .venv-docs, requirements/docs.txt, Debian's chromium
and chromium-driver); elsewhere it skips, saying so. The site is built into a temporary folder,
served by `python -m http.server` on 127.0.0.1 and opened in headless Chromium through Selenium:
the home and API pages render, Material's search finds a public name, and the browser reports no
error and loads nothing from outside the site. Screenshots go to `$TFRING_ARTIFACTS/docs` (default
`test-artifacts/docs` in the checkout, git-ignored); the test prints the folder.
"""

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = [pytest.mark.docs, pytest.mark.multiprocess]

try:  # the docs environment's packages: elsewhere every test here skips, saying so (make test deselects them)
    import mkdocs  # noqa: F401
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    webdriver = None


@pytest.fixture(autouse=True)
def _docs_environment():
    if webdriver is None:
        pytest.skip("needs the docs environment (.venv-docs): make test-docs")


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WAIT_SECONDS = 20


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built by `mkdocs build --strict` (a warning fails the build) into a temporary folder."""
    folder = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(folder)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-5000:]
    return folder


def test_the_site_builds_strictly_with_every_page(site):
    for page in ("index.html", "getting-started/index.html", "api/ops/index.html", "changelog/index.html",
                 "objects.inv", "search/search_index.json"):
        assert (site / page).is_file(), page
    changelog = (site / "changelog" / "index.html").read_text()
    assert "0.4 (in progress)" in changelog and "0.3" in changelog  # CHANGELOG.md, included
    assert "--8&lt;--" not in (site / "index.html").read_text()  # every snippet was included


# Links as Markdown writes them, outside code: [text](target) and ![alt](target).
_LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")


def _without_code(text):
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"``.*?``|`[^`\n]*`", "", text)


def github_anchors(markdown):
    """The anchors GitHub gives a Markdown file's headings (lowercase; punctuation but `-` and `_`
    dropped; spaces to `-`; a repeated one gets `-1`, `-2`, ...).

    Example:

    >>> sorted(github_anchors("# A `b.c` d\\n## Many hosts (emulated)\\n## Many hosts (emulated)"))
    ['a-bc-d', 'many-hosts-emulated', 'many-hosts-emulated-1']
    """
    anchors, seen = set(), {}
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md"])
def test_every_relative_link_points_to_a_file_and_its_anchor(name):
    path = os.path.join(ROOT, name)
    text = open(path, encoding="utf-8").read()
    links = [link for link in _LINK.findall(_without_code(text)) if not re.match(r"[a-z]+:", link)]
    assert name == "CHANGELOG.md" or links, "README.md links into docs/"
    broken = []
    for link in links:
        target, _, anchor = link.partition("#")
        file = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        if not os.path.exists(file):
            broken.append(f"{link}: no file {os.path.relpath(file, ROOT)}")
        elif anchor and anchor not in github_anchors(open(file, encoding="utf-8").read()):
            broken.append(f"{link}: no heading with the anchor #{anchor} in {os.path.relpath(file, ROOT)}")
    assert not broken, f"{name}:\n" + "\n".join(broken)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _served(folder):
    """`python -m http.server` serving `folder` on 127.0.0.1; yields its URL; stopped whatever happens."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + WAIT_SECONDS
        while True:
            try:
                urllib.request.urlopen(url + "/", timeout=2).close()
                break
            except OSError:
                assert server.poll() is None, f"http.server exited with {server.returncode}"
                assert time.monotonic() < deadline, f"http.server did not answer on {url} in {WAIT_SECONDS} s"
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


@contextlib.contextmanager
def _browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"needs {CHROMIUM} and {CHROMEDRIVER} (Debian's chromium and chromium-driver: make test-docs)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(WAIT_SECONDS)
        driver.set_script_timeout(WAIT_SECONDS)
        yield driver
    finally:
        driver.quit()


def _artifacts():
    folder = os.path.join(os.environ.get("TFRING_ARTIFACTS") or os.path.join(ROOT, "test-artifacts"), "docs")
    os.makedirs(folder, exist_ok=True)
    print(f"docs site screenshots: {folder}")
    return folder


def _visible_heading(driver, text):
    heading = WebDriverWait(driver, WAIT_SECONDS).until(
        expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, "article h1")))
    assert text in heading.text, heading.text
    return heading


def _loaded(driver):
    """What the page in `driver` loaded: its own URL and every resource's."""
    return driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).concat([location.href])")


def test_the_site_works_in_a_browser(site):
    artifacts = _artifacts()
    with _served(site) as url, _browser() as driver:
        step, loaded = "start", []
        try:
            step = "home"
            driver.get(url + "/")
            _visible_heading(driver, "tfring")
            assert driver.find_element(By.CSS_SELECTOR, "article pre code").is_displayed()  # the example
            driver.save_screenshot(os.path.join(artifacts, "home.png"))
            loaded += _loaded(driver)

            step = "api"
            driver.get(url + "/api/ops/")
            _visible_heading(driver, "tfring.ops")
            entry = driver.find_element(By.ID, "tfring.ops.started.allreduce_buckets")
            assert "tfring.ops.allreduce_buckets" in entry.text, entry.text
            driver.save_screenshot(os.path.join(artifacts, "api-ops.png"))
            loaded += _loaded(driver)

            step = "search"
            driver.get(url + "/")
            _visible_heading(driver, "tfring")
            driver.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-search__input").click()
            box = WebDriverWait(driver, WAIT_SECONDS).until(
                expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "input.md-search__input")))
            box.send_keys("allreduce_buckets")
            WebDriverWait(driver, WAIT_SECONDS).until(lambda d: [
                a for a in d.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")
                if "/api/ops/" in (a.get_attribute("href") or "")])
            driver.save_screenshot(os.path.join(artifacts, "search.png"))
            loaded += _loaded(driver)
            box.send_keys(Keys.ESCAPE)

            step = "resources"
            outside = [name for name in loaded if not name.startswith(url) and not name.startswith("data:")]
            assert not outside, f"the site loaded resources from outside it: {outside}"

            step = "console"
            errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
            assert not errors, f"the browser console reported errors: {errors}"
        except Exception:
            driver.save_screenshot(os.path.join(artifacts, f"failed-at-{step}.png"))
            raise
