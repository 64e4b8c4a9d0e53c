"""The files the real-GPU check carries to the GPU machine, and the exact call that runs it there
(`make gpu-check-prepare`):

1. the project's own wheel (built here, pure Python);
2. what it needs that the machine lacks (machine-packages.txt lists what it has): the project's requirements
   resolved for the machine's Python (3.12, x86-64 Linux) by uv, each package the machine lacks downloaded as a
   wheel for that Python (pip download), or built here when it has no wheel (vdk-core: a pure-Python sdist);
   setuptools is always carried, at the version the project pins (vdk-core needs pkg_resources, gone in 81);
3. their size, with the working tree's: together they travel with the call, 64 MiB at most;
4. the call: the command, the carry list and the timeout.

They go to `.gpu-carry/wheels/` (ignored by git: the device call's `carry` takes ignored paths). The downloaded
dependencies are kept while the requirements, the machine's list and the constraints stay as they are (a
stamp); the project's wheel is built anew each time.

    .venv/bin/python -m functional_tests.gpu.prepare [--into .gpu-carry]
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MACHINE = Path(__file__).with_name("machine-packages.txt")
LIMIT = 64 * 1024 * 1024  # what travels with one call: the working tree and the carried paths
PYTHON = "3.12"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PLATFORMS += ["manylinux1_x86_64", "linux_x86_64"]
ALWAYS = {"setuptools"}  # carried even though the machine has it: the project pins a version it may not have
BUDGET_SECONDS = 480  # the whole call's time on the machine (run-on-gpu.sh's VDK_GPU_CHECK_SECONDS)
TIMEOUT_SECONDS = 540  # the device call's timeout: the budget and a minute to spare
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_packages(path: Path = MACHINE) -> set[str]:
    """The normalized names of the machine's packages."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(normalize(re.split(r"[=<>!~ ]", line, maxsplit=1)[0]))
    return names


def requirements(setup_cfg: Path = ROOT / "setup.cfg") -> list[str]:
    """The project's own requirements (setup.cfg's install_requires), without comments."""
    config = configparser.ConfigParser()
    config.read(setup_cfg)
    lines = config["options"]["install_requires"].splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def pinned(compiled: str) -> list[tuple[str, str]]:
    """(name, version) of every line `name==version` of uv's compiled requirements."""
    return [(m.group(1), m.group(2)) for m in map(_NAME.match, compiled.splitlines()) if m]


def to_carry(closure: list[tuple[str, str]], machine: set[str]) -> list[tuple[str, str]]:
    """What of `closure` the machine lacks, and what is always carried."""
    return [(n, v) for n, v in closure if normalize(n) not in machine or normalize(n) in ALWAYS]


def uncovered(closure: list[tuple[str, str]], carried_files: list[str], machine: set[str]) -> list[str]:
    """Packages of the closure neither carried (a wheel of that name) nor on the machine: nothing may be."""
    carried = {normalize(f.split("-", 1)[0]) for f in carried_files}
    return [f"{n}=={v}" for n, v in closure if normalize(n) not in carried and normalize(n) not in machine]


def tree_bytes(root: Path = ROOT) -> int:
    """The bytes of the working tree that travel with a call: tracked, and untracked but not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for name in filter(None, listed.split(b"\0")):
        path = root / name.decode()
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def call(into: Path) -> str:
    """The device call that runs the check, as it is typed."""
    carry = into.resolve().relative_to(ROOT).as_posix() if into.resolve().is_relative_to(ROOT) else str(into)
    command = f"VDK_GPU_CHECK_SECONDS={BUDGET_SECONDS} bash functional_tests/gpu/run-on-gpu.sh"
    return (
        "run(\n"
        f'  command="{command}",\n'
        f'  carry=["{carry}"],\n'
        f"  timeout_s={TIMEOUT_SECONDS},\n"
        ")\n"
        "The report comes back in $OUT: gpu-report.txt (the table), gpu-report.json (every figure), setup.log, "
        "check.log."
    )


def _pip_options() -> list[str]:
    """pip's configured sources here (find-links, extra indexes), for uv."""
    out = []
    for key, flag in (("global.find-links", "--find-links"), ("global.extra-index-url", "--extra-index-url")):
        found = subprocess.run([sys.executable, "-m", "pip", "config", "get", key], capture_output=True, text=True)
        for value in found.stdout.split() if found.returncode == 0 else []:
            out += [flag, value]
    return out


def resolve(work: Path) -> str:
    """The project's requirements compiled for the machine's Python by uv (pins, one a line)."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise SystemExit("uv is not installed here: `make install` installs it into .venv")
    source = work / "requirements.in"
    source.write_text("\n".join(requirements()) + "\n")
    command = [uv, "pip", "compile", str(source), "--python-version", PYTHON]
    command += ["--python-platform", "x86_64-manylinux_2_28", "--index-strategy", "unsafe-best-match", "-q"]
    env = {**_environ(), "UV_BUILD_CONSTRAINT": str(ROOT / "constraints.txt")}
    done = subprocess.run([*command, *_pip_options()], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"uv could not resolve the project's requirements for Python {PYTHON}:\n{done.stderr}")
    return done.stdout


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


def download(wanted: list[tuple[str, str]], into: Path) -> list[str]:
    """Wheels of `wanted` for the machine's Python into `into`; a package without one is built here (it must be
    pure Python: a wheel built here is for this Python otherwise). Returns what could not be had."""
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(into), "-q"]
    base += ["--python-version", PYTHON, "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none"]
    for platform in PLATFORMS:
        base += ["--platform", platform]
    specs = [f"{n}=={v}" for n, v in wanted]
    if subprocess.run([*base, *specs], capture_output=True, text=True).returncode == 0:
        return []
    missing = []
    for spec in specs:
        if subprocess.run([*base, spec], capture_output=True, text=True).returncode == 0:
            continue
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(into), spec],
            capture_output=True,
            text=True,
            env={**_environ(), "PIP_CONSTRAINT": str(ROOT / "constraints.txt")},
        )
        names = [p.name for p in into.glob(f"{normalize(spec.split('==')[0]).replace('-', '_')}-*.whl")]
        if built.returncode != 0 or not any(n.endswith("-none-any.whl") for n in names):
            missing.append(spec)
    return missing


def build_project(into: Path) -> Path:
    for old in into.glob("vdk_ml_training-*.whl"):
        old.unlink()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(into), str(ROOT)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"the project's wheel did not build:\n{done.stdout}{done.stderr}")
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    return next(into.glob("vdk_ml_training-*.whl"))


def stamp() -> str:
    parts = [json_text(requirements()), MACHINE.read_text(), (ROOT / "constraints.txt").read_text(), PYTHON]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def json_text(values: list[str]) -> str:
    return "\n".join(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the real-GPU check's carried files, and the call that runs it")
    parser.add_argument("--into", type=Path, default=ROOT / ".gpu-carry")
    options = parser.parse_args(argv)
    wheels = options.into / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    machine = machine_packages()
    mark = options.into / "STAMP"
    closure_file = options.into / "closure.txt"
    if not (mark.exists() and mark.read_text() == stamp() and closure_file.exists()):
        for old in wheels.glob("*"):
            old.unlink()
        print(f"resolving the project's requirements for Python {PYTHON} (x86-64 Linux) ...", flush=True)
        closure_file.write_text(resolve(options.into))
        wanted = [(n, v) for n, v in to_carry(pinned(closure_file.read_text()), machine) if n != "vdk-ml-training"]
        print(f"downloading {len(wanted)} wheels the GPU machine lacks: {', '.join(n for n, _ in wanted)}", flush=True)
        missing = download(wanted, wheels)
        if missing:
            raise SystemExit(f"no wheel for Python {PYTHON} could be had for: {', '.join(missing)}")
        mark.write_text(stamp())
    project = build_project(wheels)
    files = sorted(p.name for p in wheels.glob("*.whl"))
    gaps = uncovered(pinned(closure_file.read_text()), files, machine)
    if gaps:
        raise SystemExit(f"neither carried nor on the GPU machine: {', '.join(gaps)}")
    carried = sum(p.stat().st_size for p in wheels.glob("*.whl"))
    tree = tree_bytes()
    print(f"\ncarried in {options.into}/wheels: {len(files)} wheels, {carried / 2**20:.1f} MiB")
    for name in files:
        print(f"  {name}  {(wheels / name).stat().st_size / 2**20:.2f} MiB")
    print(f"working tree that travels: {tree / 2**20:.1f} MiB; together {(carried + tree) / 2**20:.1f} MiB of 64 MiB")
    if carried + tree > LIMIT:
        print("too much to travel with one call: carry fewer wheels, or shrink the working tree", file=sys.stderr)
        return 1
    print(f"the project's wheel: {project.name}\n\nrun the check on a machine with a GPU with the device tool:\n")
    print(call(options.into))
    return 0


if __name__ == "__main__":
    sys.exit(main())
