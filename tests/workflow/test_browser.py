"""The report in a real headless browser: videos load, play and last as long as their frames.

Debian's Chromium (`/usr/bin/chromium`) is driven through Selenium and Debian's chromedriver
(`/usr/bin/chromedriver`); `.ci/run` installs both (packages `chromium`, `chromium-driver`).
Pages come from a real run of `.test/config.yaml` (the session's `test_config_run`), served
by a local HTTP server:

- `results/{tag}/video_page/index.html`: every `<video>` loads, plays (its `currentTime`
  advances) and has the duration of its mp4 (frames / fps, read from the file), and every
  poster image loads;
- the unzipped `snakemake --report`: the report's own page shows every figure of
  `FIGURE_NAMES` as a loaded image (`naturalWidth > 0`) when its row is opened, and its video
  page plays every video the same way inside the report.
"""

from __future__ import annotations

import functools
import http.server
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import imageio_ffmpeg
import pytest

from src.analysis.figures import FIGURE_NAMES
from tests.workflow.conftest import TEST_CONFIG, WorkflowRun

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# The machine has no network but package registries: nothing may try to reach the internet.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
    "--autoplay-policy=no-user-gesture-required",
    "--mute-audio",
)
TIMEOUT = 30.0  # seconds for a page, an image or a video to load


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A headless Chromium under chromedriver; skipped where they are not installed."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not installed (Debian packages chromium and "
            "chromium-driver; .ci/run installs them)"
        )
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    # An explicit driver path: Selenium Manager (which would download drivers) is not used.
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(TIMEOUT)
    driver.set_script_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[functools.partial]:
    """`serve(folder)` starts an HTTP server on 127.0.0.1 for `folder`; returns its base URL."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(folder: Path) -> str:
        handler = functools.partial(_QuietHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield functools.partial(start)
    for server in servers:
        server.shutdown()
        server.server_close()


def _ok_run(run: WorkflowRun) -> WorkflowRun:
    assert run.done.returncode == 0, run.done.stdout[-5000:] + run.done.stderr[-5000:]
    return run


def _mp4_duration(path: Path) -> tuple[float, float]:
    """(frames / fps, fps) of an mp4, frames counted by decoding it."""
    reader = imageio_ffmpeg.read_frames(str(path))
    fps = float(next(reader)["fps"])
    reader.close()
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(path))
    assert frames > 0, f"{path} holds no frame"
    return frames / fps, fps


def _local_file(url: str, base: str, root: Path) -> Path:
    """The file under `root` that the server at `base` sends for `url`."""
    assert url.startswith(base), f"{url} is not served from {base}"
    return root / unquote(urlparse(url).path).lstrip("/")


_WAIT_FOR_METADATA = """
const [video, done] = [arguments[0], arguments[arguments.length - 1]];
const report = () => done({
    src: video.currentSrc, ready: video.readyState, duration: video.duration,
    error: video.error ? video.error.code : null, width: video.videoWidth});
if (video.readyState >= 1 || video.error) { report(); }
else {
    video.addEventListener("loadedmetadata", report, {once: true});
    video.addEventListener("error", report, {once: true});
    video.load();
}
"""

_PLAY = """
const [video, done] = [arguments[0], arguments[arguments.length - 1]];
video.muted = true;
const start = video.currentTime;
video.play().then(
    () => setTimeout(() => { const t = video.currentTime; video.pause();
                             done({start: start, now: t, error: null}); }, 800),
    (error) => done({start: start, now: video.currentTime, error: String(error)}));
"""

_IMAGE = """
const [src, done] = [arguments[0], arguments[arguments.length - 1]];
const image = new Image();
image.onload = () => done(image.naturalWidth);
image.onerror = () => done(-1);
image.src = src;
"""


def _check_videos(driver: object, base: str, root: Path, expected: int) -> None:
    """Every <video> of the current page loads, plays and lasts frames / fps; posters load."""
    from selenium.webdriver.common.by import By

    videos = driver.find_elements(By.TAG_NAME, "video")
    assert len(videos) == expected, f"{len(videos)} videos on the page, expected {expected}"
    for video in videos:
        meta = driver.execute_async_script(_WAIT_FOR_METADATA, video)
        assert meta["error"] is None and meta["ready"] >= 1, meta
        assert meta["width"] > 0, meta
        duration, fps = _mp4_duration(_local_file(meta["src"], base, root))
        # The container's duration may differ from frames / fps by at most one frame.
        assert abs(meta["duration"] - duration) <= 1.0 / fps + 1e-6, (meta, duration)
        played = driver.execute_async_script(_PLAY, video)
        assert played["error"] is None, played
        assert played["now"] > played["start"], f"{meta['src']} did not advance: {played}"
        poster = video.get_attribute("poster")
        assert poster, f"{meta['src']} has no poster"
        assert driver.execute_async_script(_IMAGE, poster) > 0, f"poster {poster} did not load"


def test_video_page_plays_every_video(
    browser: object, test_config_run: WorkflowRun, serve: functools.partial
) -> None:
    experiment = _ok_run(test_config_run).experiment
    base = serve(experiment)
    browser.get(f"{base}/video_page/index.html")
    runs = len(TEST_CONFIG["envs"]) * len(TEST_CONFIG["algos"]) * TEST_CONFIG["num_runs"]
    _check_videos(browser, base, experiment, runs * TEST_CONFIG["render"]["episodes"])


def _open_category(driver: object, name: str) -> list:
    """Click a result category of the report's menu; return the eye buttons of its rows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    if not driver.find_elements(By.LINK_TEXT, name):
        # Inside another category: back to the list of categories first.
        driver.find_element(By.LINK_TEXT, "Results").click()
    WebDriverWait(driver, TIMEOUT).until(
        expected_conditions.element_to_be_clickable((By.LINK_TEXT, name))
    ).click()
    WebDriverWait(driver, TIMEOUT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "tbody tr a[iconname='eye']")
    )
    return driver.find_elements(By.CSS_SELECTOR, "tbody tr")


def test_report_shows_every_figure_and_plays_its_videos(
    browser: object, test_config_report: Path, tmp_path: Path, serve: functools.partial
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with zipfile.ZipFile(test_config_report) as archive:
        archive.extractall(tmp_path)
    (page,) = tmp_path.glob("*/report.html")
    root = page.parent
    base = serve(root)
    browser.get(f"{base}/report.html")

    # Figures: open each row; the report shows it as an image that loaded.
    rows = _open_category(browser, "Figures")
    shown = set()
    for index in range(len(rows)):
        row = _open_category(browser, "Figures")[index]
        name = Path(row.find_element(By.TAG_NAME, "td").text).stem
        row.find_element(By.CSS_SELECTOR, "a[iconname='eye']").click()
        image = WebDriverWait(browser, TIMEOUT).until(
            lambda d, n=name: [
                i
                for i in d.find_elements(By.TAG_NAME, "img")
                if f"/{n}.png" in (i.get_attribute("src") or "")
            ]
        )[0]
        WebDriverWait(browser, TIMEOUT).until(
            lambda d, i=image: d.execute_script("return arguments[0].complete", i)
        )
        width = browser.execute_script("return arguments[0].naturalWidth", image)
        assert width > 0, f"figure {name} did not load in the report"
        shown.add(name)
    assert shown == set(FIGURE_NAMES)

    # Videos: the report opens the video page in a frame; every video plays there.
    (row,) = _open_category(browser, "Videos")
    row.find_element(By.CSS_SELECTOR, "a[iconname='eye']").click()
    frame = WebDriverWait(browser, TIMEOUT).until(lambda d: d.find_elements(By.TAG_NAME, "iframe"))[
        0
    ]
    src = frame.get_attribute("src")
    assert src.endswith("/index.html"), src
    browser.switch_to.frame(frame)
    try:
        WebDriverWait(browser, TIMEOUT).until(lambda d: d.find_elements(By.TAG_NAME, "video"))
        runs = len(TEST_CONFIG["envs"]) * len(TEST_CONFIG["algos"]) * TEST_CONFIG["num_runs"]
        _check_videos(browser, base, root, runs * TEST_CONFIG["render"]["episodes"])
    finally:
        browser.switch_to.default_content()
