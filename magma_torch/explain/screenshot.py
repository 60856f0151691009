"""PNG screenshots of an explanation page with headless chromium (Debian package ``chromium``).

Headless chromium shoots its window, not the page, so the window starts at the page's
estimated height and doubles until the page's closing rule (``html_view.END_RULE``) is in
the shot; the PNG is then cut just below that rule."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from magma_torch.errors import MagmaError
from magma_torch.explain.html_view import END_RULE

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TIMEOUT_S = 120
MAX_HEIGHT_PX = 16384        # the tallest window tried
RULE_X, RULE_SPAN = 30, 200  # the closing rule is found by this run of pixels (inside the page's margins)
BOTTOM_PX = 20               # kept below the rule


class ScreenshotError(MagmaError, RuntimeError):
    """No browser, or the browser did not produce the screenshot; the message says which."""


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def screenshot(html: Path, png: Path, width: int, height: int) -> None:
    """Render the whole local page ``html`` into ``png``, ``width`` CSS pixels wide; ``height``
    is the first window height tried (at most ``MAX_HEIGHT_PX``, so whether a page is refused does not
    depend on it)."""
    png = png.resolve()
    try:   # a folder, or a path below a file, is refused before chromium runs
        png.parent.mkdir(parents=True, exist_ok=True)
        png.unlink(missing_ok=True)
    except OSError as err:
        raise ScreenshotError(f"cannot write {png}: {err.strerror}") from None
    browser = find_browser()
    if browser is None:
        raise ScreenshotError(f"--png needs headless chromium; none of {', '.join(BROWSERS)} is on PATH "
                              "(Debian: apt-get install chromium)")
    height = min(height, MAX_HEIGHT_PX)
    while True:
        _shoot(browser, html, png, width, height)
        with Image.open(png) as img:
            shot = img.convert("RGB")
        end = _end_of_page(shot)
        if end is not None:
            shot.crop((0, 0, shot.width, min(shot.height, end + BOTTOM_PX))).save(png)
            return
        if height >= MAX_HEIGHT_PX:
            png.unlink()
            raise ScreenshotError(f"the page is taller than {MAX_HEIGHT_PX} px; lower --top, --expansions "
                                  "or --budget-tokens")
        height = min(2 * height, MAX_HEIGHT_PX)


def _end_of_page(shot: Image.Image) -> int | None:
    """The row below the page's closing rule; None when the rule is not in the shot."""
    rule = np.array([int(END_RULE[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)
    pixels = np.asarray(shot)[:, RULE_X:RULE_X + RULE_SPAN]
    rows = np.flatnonzero((pixels == rule).all(axis=(1, 2)))
    return int(rows[-1]) + 1 if rows.size else None


def _shoot(browser: str, html: Path, png: Path, width: int, height: int) -> None:
    png.unlink(missing_ok=True)   # so a stale file is never taken for this shot
    with tempfile.TemporaryDirectory(prefix="magma-explain-profile-") as profile:
        cmd = [browser, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-background-networking", "--force-device-scale-factor=1", f"--user-data-dir={profile}",
               f"--window-size={width},{height}", f"--screenshot={png}", html.resolve().as_uri()]
        if os.geteuid() == 0:
            cmd.insert(1, "--no-sandbox")   # chromium refuses to run its sandbox as root
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ScreenshotError(f"{browser} did not finish the screenshot within {TIMEOUT_S} s") from None
    if not png.is_file() or png.read_bytes()[:8] != PNG_MAGIC:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScreenshotError(f"{browser} wrote no PNG to {png} (exit {done.returncode}: {last})")
