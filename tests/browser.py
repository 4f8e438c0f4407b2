"""Driving the course the way a student and an instructor see it: JupyterLab started as `make lab` starts it, in
headless Chromium (Debian's `chromium` and `chromium-driver`, through Selenium; nothing is downloaded)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from autograder.publish import build

SHOTS = build.ROOT / "docs" / "screenshots"


def missing() -> str | None:
    """Why the browser tests cannot run here, in one line, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (make test installs it from constraints.txt)"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "no chromium on this machine (Debian: apt-get install chromium chromium-driver; make test does it as root)"
    if not shutil.which("chromedriver"):
        return "no chromedriver on this machine (Debian: apt-get install chromium-driver)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def lab(folder: Path, private: Path, timeout: float = 90):
    """JupyterLab on `folder` (a copy of course/), started by `make lab` itself (a free port, a token, no browser
    of its own); yields (base URL, token). Jupyter's and IPython's settings, workspaces and runtime files go to
    `private`, so that nothing in the home folder changes (grade-class, tested alongside, watches it). The server
    and everything it started are ended afterwards; its log is private/lab.log."""
    port, token = free_port(), secrets.token_hex(16)
    args = f"--no-browser --port={port} --ServerApp.ip=127.0.0.1 --IdentityProvider.token={token}"
    env = build.tool_env()
    # (JUPYTER_DATA_DIR too: saving a notebook signs it in nbsignatures.db there; the course's kernel and lab
    # extensions are in the environment's own share/jupyter, which stays on the path.)
    for var, name in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                      ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
                      ("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "matplotlib")):
        env[var] = str(private / name)
    # Every cell in the page (JupyterLab otherwise renders only those near the view), and no news pop-up.
    for plugin, values in (("notebook-extension/tracker", {"windowingMode": "none"}),
                           ("apputils-extension/notification", {"fetchNews": "false"})):
        path = private / "settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    log = private / "lab.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["make", "-s", "lab", f"LAB_DIR={folder}", f"LAB_ARGS={args}"], cwd=build.ROOT,
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield base, token
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)


def api(base: str, token: str, path: str):
    with urllib.request.urlopen(f"{base}{path}?token={token}", timeout=10) as r:
        return json.loads(r.read())


def chrome(width: int = 1400, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                "--disable-gpu", "--no-first-run"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)


def wait_for(condition, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(every)
