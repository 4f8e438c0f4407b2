"""Driving the course the way a student and an instructor see it: JupyterLab started as `make lab` starts it, in
headless Chromium (Debian's `chromium` and `chromium-driver`, through Selenium; nothing is downloaded).
Student drives one notebook cell by cell; onramp() is a new student's journey through notebook 01, shared by
tests/notebooks/test_browser.py (which checks each step) and bench/onramp.py (which times it)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import textwrap
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


def diagrams(drv) -> dict[str, int]:
    """{alt text: width in pixels the browser decoded} of each picture in the open notebook's markdown cells; 0
    for one it could not draw (JupyterLab leaves an SVG cell attachment without a source, for one)."""
    from selenium.webdriver.common.by import By

    return {" ".join((img.get_attribute("alt") or "").split()): drv.execute_script("return arguments[0].naturalWidth",
                                                                                    img)
            for img in drv.find_elements(By.CSS_SELECTOR, ".jp-MarkdownOutput img")}


# ------------------------------------------------------------------------------------------ a student's notebook
_PROMPT = r"\[(\d+)\]:"


class Student:
    """A notebook open in JupyterLab, in the browser, driven as a student drives it: cells found by their nbgrader
    grade_id (read from the notebook's file, in the page's order), answers typed into a cell's editor, cells run
    with Shift+Enter, each run waited for by its execution count ("[*]" turning into a new number)."""

    def __init__(self, drv, base: str, token: str, path: Path, folder: Path):
        import nbformat

        self.drv, self.base, self.token = drv, base, token
        self.stubs = nbformat.read(path, as_version=4).cells
        self.index = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(self.stubs)}
        self.url = f"{base}/lab/tree/{path.relative_to(folder).as_posix()}?token={token}"
        self.kernel_id: str | None = None

    def open(self, timeout: float = 120) -> str:
        """Opens the notebook and waits for its cells and its kernel; returns the kernel's name."""
        from selenium.webdriver.common.by import By

        self.drv.get(self.url)
        wait_for(lambda: len(self.drv.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")) == len(self.stubs),
                 timeout, "the notebook's cells to show")
        kernels = wait_for(lambda: [s["kernel"] for s in api(self.base, self.token, "/api/sessions")
                                    if s["kernel"].get("execution_state") == "idle"], timeout, "its kernel to start")
        self.kernel_id = kernels[0]["id"]
        return kernels[0]["name"]

    def cell(self, grade_id: str):
        from selenium.webdriver.common.by import By

        if grade_id not in self.index:
            raise KeyError(f"the notebook has no cell {grade_id!r}")
        return self.drv.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")[self.index[grade_id]]

    def answer(self, grade_id: str, *bodies: str) -> str:
        """Types the stub's source with each `# YOUR CODE HERE` + `raise NotImplementedError()` replaced by the
        next of bodies (indented as the marker was), as a student's answer: the editor's text selected and
        replaced by the new text in one input, as a paste does (key by key, the editor's auto-indent and
        bracket closing would change Python's indentation). Returns the typed source."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        stub = self.stubs[self.index[grade_id]].source
        marker = re.compile(r"^( *)# YOUR CODE HERE\n\1raise NotImplementedError\(\)$", re.MULTILINE)
        found = marker.findall(stub)
        if len(found) != len(bodies):
            raise ValueError(f"{grade_id}: the stub has {len(found)} places to fill, {len(bodies)} bodies given")
        parts = iter(bodies)
        source = marker.sub(lambda m: textwrap.indent(textwrap.dedent(next(parts)).strip("\n"), m[1]), stub)
        cell = self.cell(grade_id)
        self.drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", cell)
        editor = cell.find_element(By.CSS_SELECTOR, ".cm-content")
        editor.click()
        editor.send_keys(Keys.CONTROL, "a")
        self.drv.execute_cdp_cmd("Input.insertText", {"text": source})
        wait_for(lambda: self.drv.execute_script(
            "return Array.from(arguments[0].querySelectorAll('.cm-line'), l => l.textContent).join('\\n');",
            editor) == source, 10, f"the editor of {grade_id} to hold the typed answer", every=0.2)
        return source

    def run(self, grade_id: str, timeout: float = 600) -> str:
        """Runs one cell (selected by a click on its prompt, then Shift+Enter) and waits until its prompt shows a
        new execution count; returns the text of its outputs."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        cell = self.cell(grade_id)
        prompt = cell.find_element(By.CSS_SELECTOR, ".jp-InputArea-prompt")
        before = prompt.text.strip()
        self.drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", cell)
        prompt.click()  # selects the cell, in command mode
        self.drv.switch_to.active_element.send_keys(Keys.SHIFT, Keys.ENTER)

        def done():
            if dialogs := self.dialogs():  # "the kernel appears to have died": no count will come
                raise RuntimeError(f"running cell {grade_id}, the page showed a dialog: {' | '.join(dialogs)}")
            return re.fullmatch(_PROMPT, p := prompt.text.strip()) and p != before

        wait_for(done, timeout, f"cell {grade_id} to run", every=0.2)
        return "\n".join(o.text for o in cell.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output"))

    def count(self, grade_id: str) -> int | None:
        """The execution count a cell's prompt shows, None before it has run."""
        from selenium.webdriver.common.by import By

        prompt = self.cell(grade_id).find_element(By.CSS_SELECTOR, ".jp-InputArea-prompt")
        m = re.fullmatch(_PROMPT, prompt.text.strip())
        return int(m[1]) if m else None

    def dialogs(self) -> list[str]:
        """The text of every dialog on the page (JupyterLab's "kernel died" and "kernel restarting" are dialogs)."""
        from selenium.webdriver.common.by import By

        return [d.text for d in self.drv.find_elements(By.CSS_SELECTOR, ".jp-Dialog")]

    def kernel(self) -> dict:
        """The notebook's kernel as the server sees it now (id, name, execution_state)."""
        return next(s["kernel"] for s in api(self.base, self.token, "/api/sessions"))


# The journey of a student new to Triton through notebook 01 (tests/notebooks/test_browser.py drives it with
# assertions, bench/onramp.py times it): the answers below fill the stubs' `# YOUR CODE HERE` places, in order.
ONRAMP_NOTEBOOK = "01_hbm_cost_model"
COPY_KERNEL = """
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
"""
COPY_LAUNCH = """
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
"""
ADD_ROW_KERNEL = """
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    v = tl.load(v_ptr + cols, mask=cols < N)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, x + v[None, :], mask=mask)
"""
ADD_ROW_LAUNCH = """
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 64))
    _add_row_kernel[grid](x, v, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK_M=16, BLOCK_N=64)
    return y
"""
FUSED_STORE = "tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, y.to(y_ptr.dtype.element_ty)"
FUSED_KERNEL = f"""
    tiles_per_row = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    rows = ((pid // tiles_per_row) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = (pid % tiles_per_row) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=cols < N).to(tl.float32)
    z = x + b[None, :]
    y = alpha * z * tl.sigmoid(z)
    {FUSED_STORE}, mask=mask)
"""
# The first try: the store's mask forgotten, so the last tiles write past the end of y.
FUSED_KERNEL_NO_MASK = FUSED_KERNEL.replace(f"{FUSED_STORE}, mask=mask)", f"{FUSED_STORE})")
FUSED_LAUNCH = """
    M, N = x.shape
    assert bias.shape == (N,), f"bias must have shape ({N},), not {tuple(bias.shape)}"
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    BLOCK_N = min(2048, triton.next_power_of_2(N))
    BLOCK_M = 2048 // BLOCK_N
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _fused_chain_kernel[grid](x, bias, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), alpha,
                              BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=4)
    return y
"""
FUSED_GRADED = [f"test_fused_chain_{c}" for c in ("correctness", "precision", "performance", "fusion")]
STEPS = ("open the notebook", "set-up cell", "worked example", "01.warmup_copy", "01.warmup_broadcast",
         "01.fused_chain, store mask forgotten", "01.fused_chain, mask put back, graded")


def onramp(student: Student):
    """The journey, one step at a time: yields (step, {grade_id: the text its run showed}) after each step, with
    the browser still open, for the caller to check or time. Raises TimeoutError where a cell never finishes."""
    assert FUSED_KERNEL_NO_MASK != FUSED_KERNEL
    opening, setup, worked, copy, broadcast, no_mask, fixed = STEPS
    yield opening, {"kernel": student.open()}
    yield setup, {"setup": student.run("setup")}
    yield worked, {"worked-kernel": student.run("worked-kernel"), "worked-run": student.run("worked-run")}
    student.answer("block_copy", COPY_KERNEL, COPY_LAUNCH)
    yield copy, {"block_copy": student.run("block_copy"), "test_warmup_copy": student.run("test_warmup_copy")}
    student.answer("add_row", ADD_ROW_KERNEL, ADD_ROW_LAUNCH)
    yield broadcast, {"add_row": student.run("add_row"), "test_warmup_broadcast": student.run("test_warmup_broadcast")}
    student.answer("fused_chain", FUSED_KERNEL_NO_MASK, FUSED_LAUNCH)
    shown = {"fused_chain": student.run("fused_chain"), "try": student.run("try")}
    shown["test_fused_chain_correctness"] = student.run("test_fused_chain_correctness")  # the next cell
    yield no_mask, shown
    student.answer("fused_chain", FUSED_KERNEL, FUSED_LAUNCH)
    shown = {"fused_chain": student.run("fused_chain")}
    shown.update((g, student.run(g)) for g in FUSED_GRADED)
    yield fixed, shown


@contextlib.contextmanager
def student_in_lab(tmp: Path, notebook: str = ONRAMP_NOTEBOOK):
    """A fresh copy of course/<notebook>/ under tmp, JupyterLab on it (lab()) and a browser; yields a Student on
    the notebook, not opened yet."""
    folder = tmp / "lab"
    shutil.copytree(build.ROOT / "course" / notebook, folder / notebook)
    private = tmp / "private"
    private.mkdir()
    with lab(folder, private) as (base, token):
        drv = chrome()
        try:
            yield Student(drv, base, token, folder / notebook / f"{notebook}.ipynb", folder)
        finally:
            drv.quit()
