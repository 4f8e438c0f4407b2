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
