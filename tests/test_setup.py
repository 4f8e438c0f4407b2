"""The set-up files agree with each other: pins, conda environment, pyproject, Makefile, CI entry, README."""

import re
import tomllib

import pytest


def _pins(root):
    pins = {}
    for line in (root / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def _requirement_names(reqs):
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in reqs}


def test_environment_yml_lists_exactly_the_pins(root):
    text = (root / "environment.yml").read_text()
    pip_lines = re.findall(r"^\s+- ([A-Za-z0-9_.\-]+)==([^\s]+)\s*$", text, re.M)
    assert pip_lines, "environment.yml has no pinned pip packages"
    assert {n.lower(): v for n, v in pip_lines} == _pins(root)
    assert "-e .[course,test,bench]" in text, "environment.yml must install the project itself"
    py = re.search(r"^\s+- python=(\d+\.\d+)", text, re.M)
    requires = tomllib.loads((root / "pyproject.toml").read_text())["project"]["requires-python"]
    assert py and requires == ">=3.11" and tuple(map(int, py.group(1).split("."))) >= (3, 11)


def test_every_pin_is_a_dependency_of_the_project(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared |= _requirement_names(extra)
    assert set(_pins(root)) <= declared, f"pinned but not declared: {set(_pins(root)) - declared}"
    needed = {"torch", "triton", "matplotlib", "jupyterlab", "nbgrader", "pytest", "ipykernel", "jupytext", "tqdm"}
    assert needed <= set(_pins(root)), f"not pinned: {needed - set(_pins(root))}"


def test_pinned_torch_and_triton_are_a_pair(root):
    # torch 2.13.0's CUDA wheels require exactly triton 3.7.1 (their Requires-Dist).
    pins = _pins(root)
    assert (pins["torch"], pins["triton"]) == ("2.13.0", "3.7.1")


def test_pins_fall_in_the_supported_ranges(root):
    from packaging.requirements import Requirement

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    pins = _pins(root)
    for req in reqs:
        if req.name.lower() in pins:
            assert req.specifier.contains(pins[req.name.lower()]), f"{req} excludes the pin {pins[req.name.lower()]}"


def test_ci_runs_exactly_make_test(root):
    script = (root / ".ci" / "run").read_text()
    commands = [l.strip() for l in script.splitlines() if l.strip() and not l.strip().startswith("#")]
    assert commands[-1] == "exec make test"


@pytest.mark.parametrize("target", ["lab", "test", "course", "bench", "grade", "check"])
def test_makefile_has_target(root, target):
    assert re.search(rf"^{target}:", (root / "Makefile").read_text(), re.M)


def test_readme_gives_the_two_commands_first(root):
    text = (root / "README.md").read_text()
    first_code = text.index("```")
    block = text[first_code : text.index("```", first_code + 3)]
    assert "make lab" in block and "make test" in block


def _dry_run(root, tmp_path, path_dirs, *args):
    """The commands `make` would run to build a fresh venv in tmp_path (make -n: nothing is run)."""
    import os
    import shutil
    import subprocess

    bin_dirs = [str(d) for d in path_dirs] + [os.path.dirname(shutil.which("make")), "/usr/bin", "/bin"]
    env = dict(os.environ, PATH=os.pathsep.join(bin_dirs))
    venv = tmp_path / "venv"
    stamp = f"{venv}/.installed-{1 if 'SYSTEM_TORCH=1' in args else 0}"
    out = subprocess.run(["make", "-n", f"VENV={venv}", *args, stamp], cwd=root, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu 'torch==2.13.0'"


def test_without_an_nvidia_driver_make_takes_torchs_cpu_build(root, tmp_path):
    assert CPU_INDEX in _dry_run(root, tmp_path, [])
    fake = tmp_path / "driver"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (fake / "nvidia-smi").chmod(0o755)
    with_driver = _dry_run(root, tmp_path, [fake])
    assert "--index-url" not in with_driver and "-c " in with_driver  # PyPI's CUDA build, pinned
    assert CPU_INDEX in _dry_run(root, tmp_path, [fake], "TORCH_INDEX=cpu")
    assert "--index-url" not in _dry_run(root, tmp_path, [], "TORCH_INDEX=pypi")
    other = "https://example.org/simple"
    assert f"--index-url {other}" in _dry_run(root, tmp_path, [], f"TORCH_INDEX={other}")
    assert "--index-url" not in _dry_run(root, tmp_path, [], "SYSTEM_TORCH=1")  # the system's torch is kept


def test_the_docs_say_linux_and_why_not_macos(root):
    for page in ("README.md", "docs/index.md", "docs/students.md"):
        text = " ".join((root / page).read_text().split())
        assert "Linux or macOS" not in text, page
        assert "WSL2" in text and "macOS is not supported" in text, page
    students = (root / "docs" / "students.md").read_text()
    assert "download.pytorch.org/whl/cpu" in students and "--only" in students
