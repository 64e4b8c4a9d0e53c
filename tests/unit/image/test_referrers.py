"""An attached artifact's manifest as the OCI image spec and cosign want it, and the fallback tag's name."""

import hashlib
import json

from vdk.plugin.ml_training.image import referrers

SUBJECT = {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": "sha256:" + "ab" * 32,
           "size": 1234}  # fmt: skip


def test_the_fallback_tag_is_the_spec_schema_of_the_subject_digest():
    assert referrers.fallback_tag("sha256:" + "ab" * 32) == "sha256-" + "ab" * 32
    assert referrers.fallback_tag("sha512:" + "c" * 128) == "sha512-" + "c" * 64  # the hex cut to 64


def test_an_artifact_manifest_has_the_empty_config_one_titled_layer_and_the_image_as_subject():
    data = b'{"_type": "https://in-toto.io/Statement/v1"}'
    annotations = {"in-toto.io/predicate-type": "https://slsa.dev/provenance/v1"}
    artifact = referrers.Artifact("application/vnd.in-toto+json", "application/vnd.in-toto+json", data, annotations,
                                  "provenance.intoto.json")  # fmt: skip
    manifest = json.loads(artifact.manifest(SUBJECT))
    assert manifest == {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.in-toto+json",
        "config": {
            "mediaType": "application/vnd.oci.empty.v1+json",
            "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
            "size": 2,
        },
        "layers": [
            {
                "mediaType": "application/vnd.in-toto+json",
                "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "annotations": {"org.opencontainers.image.title": "provenance.intoto.json"},
            }
        ],
        "subject": SUBJECT,
        "annotations": annotations,
    }
    assert artifact.manifest(SUBJECT) == artifact.manifest(dict(SUBJECT))  # canonical: the same bytes


def test_a_referrer_descriptor_round_trips_as_the_index_holds_it():
    descriptor = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "cd" * 32,
                  "size": 5, "artifactType": "application/vnd.example+json", "annotations": {"a": "b"}}  # fmt: skip
    assert referrers.Referrer.from_descriptor(descriptor).descriptor() == descriptor
