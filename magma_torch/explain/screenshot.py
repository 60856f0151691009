"""PNG screenshots of an explanation page with headless chromium (Debian package ``chromium``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TIMEOUT_S = 120


class ScreenshotError(RuntimeError):
    """No browser, or the browser did not produce the screenshot; the message says which."""


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def screenshot(html: Path, png: Path, width: int, height: int) -> None:
    """Render the local page ``html`` at ``width`` x ``height`` CSS pixels into ``png``."""
    browser = find_browser()
    if browser is None:
        raise ScreenshotError(f"--png needs headless chromium; none of {', '.join(BROWSERS)} is on PATH "
                              "(Debian: apt-get install chromium)")
    png = png.resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)   # so a stale file is never taken for this run's screenshot
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
