"""Render the audit's HTML report in headless Chromium and save a screenshot to look at.

    python bench/report_screenshot.py     # writes bench/results/audit.html and audit.png

Needs Debian's chromium (apt-get install chromium); prints where the PNG is.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, RESULTS, write_result  # noqa: E402


def main() -> None:
    browser = (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )
    if not browser:
        raise SystemExit("chromium not found: apt-get install chromium")
    RESULTS.mkdir(parents=True, exist_ok=True)
    html, png = RESULTS / "audit.html", RESULTS / "audit.png"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "kbase.cli",
            "audit",
            "--no-run",
            "--fail-on",
            "never",
            "--json",
            "--html",
            str(html),
            "--root",
            str(REPO),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                "--window-size=1400,2200",
                f"--screenshot={png}",
                html.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    write_result(
        "report_screenshot", {"html": str(html), "png": str(png), "png_bytes": png.stat().st_size}
    )
    print(png)


if __name__ == "__main__":
    main()
