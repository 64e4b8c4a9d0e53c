"""The placement keys of [ml-training] read and validated: which nodes a cluster run's pods may go to (`gpu_type`,
`node_selector`), which taints they tolerate (`tolerations`), the Secrets their image is pulled with
(`image_pull_secrets`) and the ServiceAccount they run as (`service_account`). Each malformed value is a
JobConfigError that names the file, the key and the fix; k8s/placement.py renders them into the pods.
"""

from __future__ import annotations

import re
from typing import Any

from vdk.plugin.ml_training.job.key_reader import KeyReader
from vdk.plugin.ml_training.job.model import Accelerators
from vdk.plugin.ml_training.job.model import Toleration
from vdk.plugin.ml_training.job.names import DNS_1123_SUBDOMAIN
from vdk.plugin.ml_training.job.names import LABEL_VALUE
from vdk.plugin.ml_training.job.names import MAX_LABEL_LENGTH
from vdk.plugin.ml_training.job.names import MAX_SUBDOMAIN_LENGTH
from vdk.plugin.ml_training.vocabulary.nvidia import GPU_PRODUCT_LABEL

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
MAX_ENTRIES = 64


def read_placement(keys: KeyReader, gpus: Accelerators) -> dict[str, Any]:
    """The MLJobSpec fields of the placement keys."""
    gpu_type = _label_value(keys, "gpu_type", keys.raw("gpu_type"))
    if gpu_type is not None and not gpus.resource_name:
        raise keys.error(
            "gpu_type",
            f"{gpu_type!r} names a GPU model, but the job asks for no GPU (gpus_per_node = 0)",
            "set gpus_per_node to the GPUs each node needs, or remove gpu_type",
        )
    label = keys.raw("gpu_type_label") or keys.key_default("gpu_type_label")
    if label_key_problem(label):
        raise keys.error(
            "gpu_type_label",
            f"{label!r} is not a label key: {label_key_problem(label)}",
            f"write it like `gpu_type_label = {GPU_PRODUCT_LABEL}` (`prefix/name`)",
        )
    return {
        "gpu_type": gpu_type,
        "gpu_type_label": label,
        "node_selector": _node_selector(keys),
        "tolerations": _tolerations(keys),
        "image_pull_secrets": _names(keys, "image_pull_secrets", "a Secret name"),
        "service_account": keys.matching("service_account", DNS_1123_SUBDOMAIN, "a ServiceAccount name"),
    }


def label_key_problem(key: str) -> str | None:
    """What makes `key` no Kubernetes label key (`prefix/name`: a DNS subdomain and a name of at most 63
    characters), or None."""
    prefix, _, name = key.rpartition("/")
    if prefix and (not DNS_1123_SUBDOMAIN.match(prefix) or len(prefix) > MAX_SUBDOMAIN_LENGTH):
        return f"its prefix {prefix!r} is not a DNS subdomain (lower-case letters, digits, '-' and '.')"
    if not _LABEL_NAME.match(name) or len(name) > MAX_LABEL_LENGTH:
        return (
            f"its name {name!r} must be at most {MAX_LABEL_LENGTH} letters, digits, '-', '_' or '.', "
            "alphanumeric at both ends"
        )
    return None


def _label_value(keys: KeyReader, key: str, text: str | None) -> str | None:
    if text is not None and (not LABEL_VALUE.match(text) or len(text) > MAX_LABEL_LENGTH):
        raise keys.error(
            key,
            f"{text!r} is not a label value (at most {MAX_LABEL_LENGTH} letters, digits, '-', '_' or '.', "
            "alphanumeric at both ends)",
            f"write it like `{key} = {keys.key_example(key)}`",
        )
    return text


def _entries(keys: KeyReader, key: str) -> list[str]:
    text = keys.raw(key)
    if text is None or text.lower() == "none":
        return []
    entries = [e.strip() for e in text.split(",")]
    if any(not e for e in entries):
        raise keys.error(key, f"{text!r} has an empty entry", f"separate entries with one comma: `{key} = ...`")
    if len(entries) > MAX_ENTRIES:
        raise keys.error(key, f"{len(entries)} entries; at most {MAX_ENTRIES}", "keep the ones the run needs")
    return entries


def _node_selector(keys: KeyReader) -> tuple[tuple[str, str], ...]:
    example = keys.key_example("node_selector")
    selector: dict[str, str] = {}
    for entry in _entries(keys, "node_selector"):
        label, equals, value = (part.strip() for part in entry.partition("="))
        if not equals:
            raise keys.error(
                "node_selector", f"{entry!r} is not `key=value`", f"write it like `node_selector = {example}`"
            )
        problem = label_key_problem(label)
        if problem:
            raise keys.error("node_selector", f"{label!r} is not a label key: {problem}", f"fix {entry!r}")
        if value and (not LABEL_VALUE.match(value) or len(value) > MAX_LABEL_LENGTH):
            raise keys.error("node_selector", f"{value!r} (of {label}) is not a label value", f"fix {entry!r}")
        if label in selector and selector[label] != value:
            raise keys.error(
                "node_selector", f"{label} is given twice ({selector[label]!r} and {value!r})", "keep one of them"
            )
        selector[label] = value
    return tuple(sorted(selector.items()))


def _tolerations(keys: KeyReader) -> tuple[Toleration, ...]:
    example = keys.key_example("tolerations")
    out: list[Toleration] = []
    for entry in _entries(keys, "tolerations"):
        rest, colon, effect = entry.rpartition(":") if ":" in entry else (entry, "", "")
        label, equals, value = (part.strip() for part in rest.partition("="))
        effect = effect.strip()
        if colon and effect not in EFFECTS:
            close = [e for e in EFFECTS if e.lower() == effect.lower()]
            hint = f"`{label}{'=' + value if equals else ''}:{close[0]}`" if close else f"one of {', '.join(EFFECTS)}"
            raise keys.error("tolerations", f"{effect!r} (in {entry!r}) is not a taint effect", f"write {hint}")
        problem = label_key_problem(label)
        if problem:
            raise keys.error(
                "tolerations",
                f"{label!r} is not a taint key: {problem}",
                f"write it like `tolerations = {example}`",
            )
        if equals and value and (not LABEL_VALUE.match(value) or len(value) > MAX_LABEL_LENGTH):
            raise keys.error("tolerations", f"{value!r} (of {label}) is not a taint value", f"fix {entry!r}")
        toleration = Toleration(label, value if equals else None, effect or None)
        if toleration not in out:
            out.append(toleration)
    return tuple(out)


def _names(keys: KeyReader, key: str, what: str) -> tuple[str, ...]:
    names: list[str] = []
    for name in _entries(keys, key):
        if not DNS_1123_SUBDOMAIN.match(name) or len(name) > MAX_SUBDOMAIN_LENGTH:
            raise keys.error(
                key,
                f"{name!r} is not {what} (lower-case letters, digits, '-' and '.')",
                f"write it like `{key} = {keys.key_example(key)}`",
            )
        if name not in names:
            names.append(name)
    return tuple(names)
