"""uv's words on a failed install, read in one place (each pattern is tested against what the real uv writes:
tests/integration/dependencies/test_uv_messages_uv.py): the packages without a wheel it may install, a source
distribution it could not build (with the build's own reason), and its first-index rule's hint (a version only a
later index has). Also whether an install holds a wheel built on this machine with native code."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

# A requirement as uv writes it: a name, then a version specifier or several (`antlr4-python3-runtime==4.9.3`,
# `foo>=1,<2`); not a version alone (`4.9.3` after `==` is no package).
_OPERATOR = r"(?:===|==|~=|!=|<=|>=|<|>)"
_REQUIREMENT = rf"(?<![\w.=<>!~*-])([A-Za-z0-9][A-Za-z0-9._-]*)(?:{_OPERATOR}[^\s,]+(?:,\s*{_OPERATOR}[^\s,]+)*)?"
# `X==1 has no usable wheels`, `X has no wheels with a matching platform tag (e.g., ...)`
_NO_WHEELS = re.compile(rf"{_REQUIREMENT} has no (?:usable )?wheels")
# `hint: Wheels are required for `X` because building from source is disabled ...`
_WHEELS_REQUIRED = re.compile(r"Wheels are required for `([^`]+)`")
# `error: Failed to build `X==1`` / `error: Failed to download and build `X==1``
_FAILED_BUILD = re.compile(r"Failed to (?:download and )?build `([A-Za-z0-9][A-Za-z0-9._-]*)")
# `hint: `X` was found on URL, but not at the requested version (X==2). A compatible version may be available on a
# subsequent index (e.g., URL). By default, uv will only consider versions that are published on the first index ...`
_FIRST_INDEX = re.compile(
    r"`([^`]+)` was found on (\S+?),? but not at the requested version \((.+?)\)\."
    r"(?: A compatible version may be available on a subsequent index \(e\.g\., (\S+?)\))?"
)
_MAX_REASON_LINES = 6
# uv's own advice after a wheel it built that does not fit the target: vdk's fix says what to do instead
_UV_ADVICE = re.compile(r"\s*Consider using `--no-build[^`]*` to disable building wheels\.")


@dataclass(frozen=True)
class FailedBuild:
    package: str  # canonical name
    reason: str  # the build's own words (its stderr's last lines, uv's hint), else uv's causes


@dataclass(frozen=True)
class FirstIndex:
    package: str
    index: str  # the first index that has the package, without the version asked for
    requested: str  # `timmy==2.0`
    later_index: str | None  # an index uv did not search for it


def packages_without_wheels(stderr: str) -> list[str]:
    """The canonical names of the packages uv found no wheel of that it may install (sorted)."""
    names = _WHEELS_REQUIRED.findall(stderr) + _NO_WHEELS.findall(stderr)
    return sorted(dict.fromkeys(canonicalize_name(n) for n in names))


def failed_build(stderr: str) -> FailedBuild | None:
    """The source distribution uv could not build into a wheel, and why (None when uv built none that failed)."""
    found = _FAILED_BUILD.search(stderr)
    if found is None:
        return None
    lines = [line.strip() for line in stderr[found.end() :].splitlines() if line.strip()]
    hints = [line.removeprefix("hint:").strip() for line in lines if line.startswith("hint:")]
    if "[stderr]" in lines:  # the build backend's own output: its last lines say why
        said = [line for line in lines[lines.index("[stderr]") + 1 :] if not line.startswith("hint:")]
    else:
        said = [line.removeprefix("cause:").strip() for line in lines if line.startswith("cause:")]
    reason = _UV_ADVICE.sub("", "\n".join([*said[-_MAX_REASON_LINES:], *hints]))
    return FailedBuild(canonicalize_name(found.group(1).split("=")[0]), reason or "uv gave no reason")


def first_index_hint(stderr: str) -> FirstIndex | None:
    """uv's hint that a version asked for may be on an index after the first that has the package."""
    found = _FIRST_INDEX.search(stderr)
    if found is None:
        return None
    return FirstIndex(canonicalize_name(found.group(1)), found.group(2), found.group(3), found.group(4))


def built_native(target_dir: Path) -> dict[str, str]:
    """canonical name -> wheel tag of each distribution in `target_dir` whose wheel was built on this machine with
    native code: a tag of the bare `linux_*` platform, which no package index serves (they serve manylinux and
    musllinux wheels, portable across Linux distributions) and which only fits this machine."""
    out: dict[str, str] = {}
    for wheel in sorted(target_dir.glob("*.dist-info/WHEEL")):
        try:
            text = wheel.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        tags = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]
        if tags and all(tag.rsplit("-", 1)[-1].startswith("linux_") for tag in tags):
            name = wheel.parent.name.removesuffix(".dist-info").rsplit("-", 1)[0]
            out[canonicalize_name(name)] = tags[0]
    return out
