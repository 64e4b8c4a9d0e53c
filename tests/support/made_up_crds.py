"""Two made-up CRD files and their pins, for the tests of how tests/support/upstream_crds.py finds,
downloads and checks the upstream CRDs."""

from __future__ import annotations

import hashlib

from tests.support.upstream_crds import Pin


def pin_of(filename: str, content: bytes, tag: str = "v9.9.9") -> Pin:
    return Pin(
        filename, "kubeflow/trainer", tag, f"manifests/base/crds/{filename}", hashlib.sha256(content).hexdigest()
    )


A = b"kind: CustomResourceDefinition\nmetadata: {name: as.example.org}\n"
B = b"kind: CustomResourceDefinition\nmetadata: {name: bs.example.org}\n"
PINS = (pin_of("a.yaml", A), pin_of("b.yaml", B))
