"""The loopback endpoint `vdk run --container` loads images through: it serves, read-only, exactly the
image a push would store (same manifest, config and layers, so the same digest), the base's layers
streamed from the base's registry; anything else is a registry's 404."""

from __future__ import annotations

import hashlib
import json

import requests

from tests.support.base_image import image_job
from vdk.plugin.ml_training.image import build_and_push
from vdk.plugin.ml_training.image.build import assemble
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_session import BuildSession
from vdk.plugin.ml_training.image.serve import serve
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit

MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"


def test_the_served_image_is_the_pushed_image_byte_for_byte(tmp_path, registry, base_image, isolated_environment):
    job = image_job(tmp_path / "served-job", base_image)
    spec = load_job_spec(job)
    pushed = build_and_push(spec, f"{registry.host}/ml", audit.collect(job))
    with BuildSession(spec, None, Progress()) as session:
        image = assemble(spec, "localhost/vdk-ml-training", audit.collect(job), session, Progress())
        with serve(image, session.base_client, "served-job") as reference:
            host, _, rest = reference.partition("/")
            name, _, digest = rest.partition("@")
            base = f"http://{host}/v2/{name}"
            assert requests.get(f"http://{host}/v2/", timeout=10).status_code == 200
            assert digest == pushed.digest  # the image deploy pushed, by digest

            by_digest = requests.get(f"{base}/manifests/{digest}", headers={"Accept": MANIFEST_TYPES}, timeout=10)
            by_tag = requests.get(f"{base}/manifests/{image.target.tag}", timeout=10)
            stored = requests.get(
                f"{registry.url}/v2/ml/served-job/manifests/{pushed.digest}",
                headers={"Accept": MANIFEST_TYPES},
                timeout=10,
            )
            assert by_digest.content == by_tag.content == stored.content
            assert by_digest.headers["Docker-Content-Digest"] == digest
            assert by_digest.headers["Content-Type"] == stored.headers["Content-Type"]

            manifest = json.loads(by_digest.content)
            for descriptor in [manifest["config"], *manifest["layers"]]:  # base layers come from the base's registry
                head = requests.head(f"{base}/blobs/{descriptor['digest']}", timeout=10)
                assert int(head.headers["Content-Length"]) == descriptor["size"]
                body = requests.get(f"{base}/blobs/{descriptor['digest']}", timeout=60).content
                assert "sha256:" + hashlib.sha256(body).hexdigest() == descriptor["digest"]

            assert requests.get(f"{base}/blobs/sha256:{'0' * 64}", timeout=10).status_code == 404
            assert requests.get(f"{base}/manifests/other-tag", timeout=10).status_code == 404
            assert requests.get(f"http://{host}/v2/other/manifests/{digest}", timeout=10).status_code == 404
    assert pushed.config_digest == image.config_digest
