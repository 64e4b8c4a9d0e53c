"""The SBOM and provenance attached to every pushed image, against the real registry of the tests (Debian's
docker-registry: no referrers API, so the spec's fallback tag `sha256-<hex>`) and against a registry with the
referrers API (tests/support/referrers_registry.py). What is attached is read back with plain HTTP requests, as
another tool would, and checked by paths independent of the code under test: CycloneDX's own schema, the in-toto
and SLSA field rules, the signature with `cryptography` directly over the DSSE PAE."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess

import pytest
import requests
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from tests.support.base_image import image_job
from tests.support.referrers_registry import ReferrersRegistry
from tests.support.registry import Fault
from tests.support.registry import FaultProxy
from tests.support.wheels import make_wheel
from vdk.plugin.ml_training.image import Progress
from vdk.plugin.ml_training.image import RegistryError
from vdk.plugin.ml_training.image import RetryPolicy
from vdk.plugin.ml_training.image import build_and_push
from vdk.plugin.ml_training.image.attestations import Request
from vdk.plugin.ml_training.image.attestations import read_all
from vdk.plugin.ml_training.image.image_facts import BuildParameters
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.image.signing import load_private_key
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit

pytestmark = pytest.mark.slow
INDEX = "application/vnd.oci.image.index.v1+json"
IN_TOTO = "application/vnd.in-toto+json"
BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
EMPTY = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
SLSA = "https://slsa.dev/provenance/v1"
CYCLONEDX = "https://cyclonedx.org/bom"
FAST_RETRY = RetryPolicy(attempts=2, first_delay=0.01, max_delay=0.05)


def git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.email=ada@example.com", "-c", "user.name=Ada", "-C", str(cwd), *args],
        check=True,
        capture_output=True,
    )


def attested_job(tmp_path, base_image, name="audited-job"):
    wheelhouse = tmp_path / "wheels"
    make_wheel(
        wheelhouse,
        "tinydep",
        "1.0",
        files={"tinydep-1.0.dist-info/METADATA": b"Metadata-Version: 2.4\nName: tinydep\nVersion: 1.0\n"
               b"License-Expression: MIT\n"},
    )  # fmt: skip
    job = image_job(tmp_path / "repo" / name, base_image)
    (job / "requirements.txt").write_text(f"--no-index\n--find-links {wheelhouse}\ntinydep==1.0\n")
    git(tmp_path / "repo", "init", "-q")
    git(tmp_path / "repo", "add", ".")
    git(tmp_path / "repo", "commit", "-qm", "job")
    return job


class Lines(Progress):
    def __init__(self, lines):
        self.lines = lines

    def stage(self, message: str) -> None:
        self.lines.append(message)


def build(job, host, key=None, lines=None):
    spec = load_job_spec(job)
    parameters = BuildParameters("ab" * 32, (("nodes", "2"),), (), "ada@example.com")
    progress = Lines(lines if lines is not None else [])
    return build_and_push(spec, f"{host}/ml", audit.collect(job), progress=progress, attest=Request(parameters, key))


def get(url, accept=None):
    return requests.get(url, headers={"Accept": accept} if accept else {}, timeout=30)


def tag_index(registry, repo, digest):
    r = get(f"{registry.url}/v2/{repo}/manifests/sha256-{digest[7:]}", INDEX)
    return r.json() if r.status_code == 200 else None


def referrer(host_url, repo, descriptor):
    """A referrer's manifest and its one layer, read with plain HTTP."""
    manifest = get(f"{host_url}/v2/{repo}/manifests/{descriptor['digest']}", descriptor["mediaType"]).json()
    layer = get(f"{host_url}/v2/{repo}/blobs/{manifest['layers'][0]['digest']}").content
    return manifest, layer


def push_blob(registry, repo, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = requests.post(f"{registry.url}/v2/{repo}/blobs/uploads/", timeout=30)
    location = start.headers["Location"]
    location = location if location.startswith("http") else registry.url + location
    sep = "&" if "?" in location else "?"
    requests.put(f"{location}{sep}digest={digest}", data=data, timeout=30).raise_for_status()
    return digest


def push_foreign(registry, repo, image_manifest, image_digest) -> dict:
    """Another tool's referrer of the image (a scan report), pushed by digest: its descriptor."""
    report = b'{"vulnerabilities": []}'
    push_blob(registry, repo, b"{}")
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.example.scan+json",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": EMPTY, "size": 2},
        "layers": [{"mediaType": "application/json", "digest": push_blob(registry, repo, report), "size": len(report)}],
        "subject": {"mediaType": image_manifest["mediaType"], "digest": image_digest,
                    "size": len(json.dumps(image_manifest))},
    }).encode()  # fmt: skip
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    manifest_type = "application/vnd.oci.image.manifest.v1+json"
    url = f"{registry.url}/v2/{repo}/manifests/{digest}"
    requests.put(url, data=manifest, headers={"Content-Type": manifest_type}, timeout=30).raise_for_status()
    return {
        "mediaType": manifest_type,
        "digest": digest,
        "size": len(manifest),
        "artifactType": "application/vnd.example.scan+json",
        "annotations": {"by": "scanner"},
    }


def pae(payload_type: bytes, body: bytes) -> bytes:
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type, len(body), body)


def check_provenance(statement, image):
    """The in-toto and SLSA v1 field rules, written out here (not through the code under test)."""
    assert set(statement) == {"_type", "subject", "predicateType", "predicate"}  # cosign parses strictly
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [{"name": image.reference.split("@")[0], "digest": {"sha256": image.digest[7:]}}]
    predicate = statement["predicate"]
    definition, run = predicate["buildDefinition"], predicate["runDetails"]
    assert definition["buildType"].startswith("https://") and run["builder"]["id"].startswith("https://")
    assert definition["externalParameters"]["job"] == "audited-job"
    assert definition["externalParameters"]["overrides"] == {"nodes": "2"}
    assert all(isinstance(v, str) for v in run["builder"]["version"].values())
    for key in ("startedOn", "finishedOn"):
        assert run["metadata"][key].endswith("Z") and len(run["metadata"][key]) == 20
    for descriptor in [*definition["resolvedDependencies"], *run["byproducts"]]:
        assert descriptor.get("uri") or descriptor.get("digest") or descriptor.get("content")
        assert set(descriptor) <= {"name", "uri", "digest", "content", "downloadLocation", "mediaType", "annotations"}
        for algorithm, value in (descriptor.get("digest") or {}).items():
            assert len(value) == {"sha256": 64, "gitCommit": 40}[algorithm] and value == value.lower()
    return predicate


def test_the_fallback_tag_end_to_end_reattach_kept_entries_and_a_tag_left_alone(tmp_path, registry, base_image):
    job = attested_job(tmp_path, base_image)
    repo = "ml/audited-job"
    lines = []
    image = build(job, registry.host, lines=lines)
    assert get(f"{registry.url}/v2/{repo}/referrers/{image.digest}").status_code == 404  # no referrers API here
    index = tag_index(registry, repo, image.digest)
    assert [d["artifactType"] for d in index["manifests"]] == [IN_TOTO, IN_TOTO]
    assert {a.kind: a.reused for a in image.attached} == {"sbom": False, "provenance": False}
    assert any(line.startswith("Attached to the image: SBOM and provenance (unsigned") for line in lines)

    statements = {}
    image_manifest = get(f"{registry.url}/v2/{repo}/manifests/{image.digest}", "application/vnd.oci.image.manifest"
                         ".v1+json").json()  # fmt: skip
    for descriptor in index["manifests"]:
        manifest, layer = referrer(registry.url, repo, descriptor)
        assert manifest["subject"]["digest"] == image.digest and manifest["config"]["digest"] == EMPTY
        assert manifest["artifactType"] == IN_TOTO and len(manifest["layers"]) == 1
        assert manifest["layers"][0]["annotations"]["org.opencontainers.image.title"].endswith(".intoto.json")
        assert descriptor["annotations"] == manifest["annotations"]  # the index carries them, as the spec says
        statement = json.loads(layer)
        statements[statement["predicateType"]] = statement

    bom = statements[CYCLONEDX]["predicate"]
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom)) is None  # CycloneDX's own schema
    components = {c["bom-ref"]: c for c in bom["components"]}
    tiny = components["pkg:pypi/tinydep@1.0"]
    assert tiny["purl"] == "pkg:pypi/tinydep@1.0" and tiny["licenses"] == [{"license": {"id": "MIT"}}]
    wheel = next((tmp_path / "wheels").glob("tinydep-1.0-*.whl"))
    assert tiny["hashes"] == [{"alg": "SHA-256", "content": hashlib.sha256(wheel.read_bytes()).hexdigest()}]
    code_files = {c["name"] for c in components["code"]["components"]}
    assert {"train.py", "model.py", "lib/util.py", "requirements.txt"} <= code_files and ".env" not in code_files
    commit = subprocess.run(["git", "-C", str(job), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert {"name": "vdk-ml-training:git:commit", "value": commit.strip()} in components["code"]["properties"]
    assert components["base-image"]["hashes"][0]["content"] == image.base_reference.rpartition(":")[2]

    predicate = check_provenance(statements[SLSA], image)
    byproducts = [f"sha256:{d['digest']['sha256']}" for d in predicate["runDetails"]["byproducts"]]
    assert byproducts == [layer["digest"] for layer in image_manifest["layers"]]
    dependencies = {d["name"]: d for d in predicate["buildDefinition"]["resolvedDependencies"]}
    assert dependencies["source"]["digest"] == {"gitCommit": commit.strip()}
    assert dependencies["source"]["annotations"] == {"dirty": False}
    assert dependencies["base-image"]["digest"]["sha256"] == image.base_reference.rpartition(":")[2]
    assert "requirements.lock" in dependencies

    # a second tool's entry in the tag's index, then a redeploy of the same image: reused, nothing new, entry kept
    foreign = push_foreign(registry, repo, image_manifest, image.digest)
    index["manifests"].append(foreign)
    put = requests.put(f"{registry.url}/v2/{repo}/manifests/sha256-{image.digest[7:]}", data=json.dumps(index),
                       headers={"Content-Type": INDEX}, timeout=30)  # fmt: skip
    assert put.status_code == 201
    again = build(job, registry.host)
    assert again.digest == image.digest and all(a.reused for a in again.attached)
    assert tag_index(registry, repo, image.digest)["manifests"] == index["manifests"]

    # signed now: two more entries, the foreign one still there
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    key = load_private_key(pem, "a test key")
    signed = build(job, registry.host, key=key)
    kinds = [d["artifactType"] for d in tag_index(registry, repo, image.digest)["manifests"]]
    assert kinds == [IN_TOTO, IN_TOTO, foreign["artifactType"], BUNDLE, BUNDLE]
    assert all(a.signed and not a.reused for a in signed.attached)

    # a new image whose tag holds an image manifest (not an index): left alone, and said
    (job / "model.py").write_text("def train():\n    print('changed')\n")
    unattested = build_and_push(load_job_spec(job), f"{registry.host}/ml", audit.collect(job))
    tag = f"sha256-{unattested.digest[7:]}"
    squatter = get(f"{registry.url}/v2/{repo}/manifests/{image.digest}", image_manifest["mediaType"]).content
    requests.put(f"{registry.url}/v2/{repo}/manifests/{tag}", data=squatter,
                 headers={"Content-Type": image_manifest["mediaType"]}, timeout=30).raise_for_status()  # fmt: skip
    lines = []
    third = build(job, registry.host, lines=lines)
    assert third.digest == unattested.digest
    assert any(f"{repo}:{tag} holds a" in line and "left alone" in line for line in lines)
    assert (
        get(f"{registry.url}/v2/{repo}/manifests/{tag}", INDEX + ", " + image_manifest["mediaType"]).content == squatter
    )


def test_signed_statements_verify_over_the_pae_and_a_tampered_payload_does_not(tmp_path, registry, base_image):
    job = attested_job(tmp_path, base_image, name="audited-job")
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    image = build(job, registry.host, key=load_private_key(pem, "a test key"))
    index = tag_index(registry, "ml/audited-job", image.digest)
    bundles = [d for d in index["manifests"] if d["artifactType"] == BUNDLE]
    assert {d["annotations"]["dev.sigstore.bundle.predicateType"] for d in bundles} == {SLSA, CYCLONEDX}
    public = private.public_key()
    for descriptor in bundles:
        manifest, layer = referrer(registry.url, "ml/audited-job", descriptor)
        assert manifest["layers"][0]["mediaType"] == BUNDLE  # what cosign looks for: exactly one bundle layer
        assert manifest["annotations"]["dev.sigstore.bundle.content"] == "dsse-envelope"
        bundle = json.loads(layer)
        assert set(bundle) == {"mediaType", "verificationMaterial", "dsseEnvelope"}  # protojson: no other keys
        assert bundle["mediaType"] == BUNDLE
        der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        assert bundle["verificationMaterial"] == {
            "publicKey": {"hint": base64.b64encode(hashlib.sha256(der).digest()).decode()}
        }
        envelope = bundle["dsseEnvelope"]
        payload = base64.b64decode(envelope["payload"])
        signature = base64.b64decode(envelope["signatures"][0]["sig"])
        public.verify(signature, pae(envelope["payloadType"].encode(), payload), ec.ECDSA(hashes.SHA256()))
        statement = json.loads(payload)
        if statement["predicateType"] == SLSA:
            check_provenance(statement, image)
        tampered = payload.replace(b"audited-job", b"audited-jab")
        with pytest.raises(InvalidSignature):
            public.verify(signature, pae(envelope["payloadType"].encode(), tampered), ec.ECDSA(hashes.SHA256()))

    # the reader verifies too, and refuses another key
    with RegistryClient(registry.host) as client:
        found, _ = read_all(client, "ml/audited-job", image.digest, public)
        assert {(f.predicate_type, f.verified) for f in found if f.signed} == {(SLSA, True), (CYCLONEDX, True)}
        other = ec.generate_private_key(ec.SECP256R1()).public_key()
        found, _ = read_all(client, "ml/audited-job", image.digest, other)
        assert {f.verified for f in found if f.signed} == {False}
        assert all("does not verify" in " ".join(f.problems) for f in found if f.signed)


def test_a_registry_with_the_referrers_api_lists_them_without_a_fallback_tag(tmp_path, registry, base_image):
    api = ReferrersRegistry(registry.port)
    try:
        job = attested_job(tmp_path, base_image.replace(registry.host, api.host), name="audited-job")
        image = build(job, api.host)
        assert {a.listed for a in image.attached} == {"the registry's referrers API"}
        assert tag_index(registry, "ml/audited-job", image.digest) is None  # no tag when the registry answers
        answer = get(f"http://{api.host}/v2/ml/audited-job/referrers/{image.digest}")
        assert answer.headers["Content-Type"] == INDEX
        assert sorted(d["annotations"]["in-toto.io/predicate-type"] for d in answer.json()["manifests"]) == [
            CYCLONEDX,
            SLSA,
        ]
        puts = [path for method, path in api.requests if method == "PUT" and "/manifests/" in path]
        again = build(job, api.host)
        assert all(a.reused for a in again.attached)
        assert [p for m, p in api.requests if m == "PUT" and "/manifests/" in p] == [*puts, puts[0]]  # the image only
        with RegistryClient(api.host) as client:
            found, listing = read_all(client, "ml/audited-job", image.digest, None)
        assert listing.how == "the registry's referrers API" and sorted(f.predicate_type for f in found) == [
            CYCLONEDX,
            SLSA,
        ]
        assert all(not f.problems for f in found)
    finally:
        api.stop()


def test_a_registry_that_refuses_the_attached_manifests_says_how_to_turn_attaching_off(tmp_path, registry, base_image):
    proxy = FaultProxy(registry.port)
    proxy.faults.append(Fault("PUT", r"/manifests/sha256:", "500", times=100))
    try:
        job = attested_job(tmp_path, base_image.replace(registry.host, proxy.host), name="audited-job")
        spec = load_job_spec(job)
        attest = Request(BuildParameters(None))
        with pytest.raises(RegistryError) as refused:
            build_and_push(spec, f"{proxy.host}/ml", audit.collect(job), retry=FAST_RETRY, attest=attest)
        assert "was pushed, but its SBOM and provenance could not be attached" in refused.value.problem
        assert "ml_training_attestations = false" in refused.value.fix
    finally:
        proxy.stop()
