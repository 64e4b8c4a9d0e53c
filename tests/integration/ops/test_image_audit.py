"""A deploy attaches the image's SBOM and signed provenance, and `vdk show --provenance` reads them back: against
the tests' registry and the fake API server, through the Python API and the command line. The signing key (a
cosign key pair, encrypted, inside the job directory) reaches no layer, record or log."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest
import requests

from tests.support.cosign_keys import cosign_key_pair
from tests.support.jobs import api_job
from tests.support.recorder import Recorder
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.image import RegistryError
from vdk.plugin.ml_training.ops.deploy import deploy
from vdk.plugin.ml_training.ops.deploy import deploy_spec
from vdk.plugin.ml_training.ops.deploy import plan_deploy
from vdk.plugin.ml_training.ops.image_audit import audit_image
from vdk.plugin.ml_training.ops.image_audit import show_provenance
from vdk.plugin.ml_training.ops.scope import find_scope

pytestmark = [pytest.mark.usefixtures("isolated_environment"), pytest.mark.slow]
PASSWORD = "correct horse battery staple"


def layer_names(registry, repository, digest) -> set[str]:
    blob = requests.get(f"{registry.url}/v2/{repository}/blobs/{digest}", timeout=30).content
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        return {m.name for m in tar.getmembers()}


def test_a_signed_deploy_is_read_back_verified_and_agrees_with_its_record(
    tmp_path, registry, base_image, cluster, monkeypatch
):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = api_job(tmp_path, base_image)
    key_file, public, _ = cosign_key_pair(job / "keys", PASSWORD)  # in the job directory: it must stay out
    monkeypatch.setenv("VDK_ML_TRAINING_SIGNING_KEY", str(key_file))
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    told = Recorder()
    notes = told.notes
    result = deploy(deploy_spec(job), skip_smoke=True, reporter=told)
    attached = result.to_dict()["attached"]
    assert sorted(a["kind"] for a in attached) == ["provenance", "sbom"] and all(a["signed"] for a in attached)

    report = show_provenance(find_scope("api-job", "ml-platform"), public_key=public)
    assert report.findings == [] and report.run == result.plan.run.name
    assert report.summary["signed"] is True and report.summary["verified"] is True
    assert report.agrees == {"commit": True, "dirty": True, "base": True, "layers": True, "code_files": True}
    assert report.summary["sbom"]["code_files"] == len(fake_record(fake, result.plan.run.name).code) >= 2

    shown = vdk("show", "-n", "api-job", "-t", "ml-platform", "--provenance", "--public-key", str(public))
    assert shown.exit_code == 0, shown.output
    assert f"Provenance of run {result.plan.run.name}: {result.image.reference}" in shown.stdout
    assert "signed         yes, verified with the public key given" in shown.stdout
    assert "run record     commit agrees, dirty agrees, base agrees, layers agrees, code_files agrees" in shown.stdout
    as_json = vdk("show", "-n", "api-job", "-t", "ml-platform", "--provenance", "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["summary"]["verified"] is None and data["findings"] == []  # signed, not verified: no key given

    _, other, _ = cosign_key_pair(tmp_path / "other", "another")
    refused = vdk("show", "-n", "api-job", "-t", "ml-platform", "--provenance", "--public-key", str(other))
    assert refused.exit_code == 1 and "does not verify with the public key given" in refused.stdout
    assert "Traceback" not in refused.output

    # a record that disagrees (another commit) is a finding, not a traceback
    record = fake_record(fake, result.plan.run.name)
    record.provenance["git_commit"] = "f" * 40
    report = audit_image(record, None, False)
    assert report.agrees["commit"] is False
    assert any("names commit" in f.problem and "disagree" in f.problem for f in report.findings)

    # the key: in no layer of the image, no record, no line said
    key_text, image_manifest = key_file.read_text(), result.image
    body = "".join(key_text.splitlines()[1:-1])
    repository = image_manifest.reference.split("/", 1)[1].split("@")[0]
    code_layer = next(layer for layer in image_manifest.layers if layer.name == "code")
    assert not any("cosign.key" in name for name in layer_names(registry, repository, code_layer.digest))
    everything = json.dumps(fake.stored("configmaps")) + json.dumps(fake.stored("pytorchjobs")) + "\n".join(notes)
    assert body[:40] not in everything and PASSWORD not in everything and "PRIVATE KEY" not in everything

    # an image deleted from its registry is said as such
    requests.delete(f"{registry.url}/v2/{repository}/manifests/{result.image.digest}", timeout=30).raise_for_status()
    with pytest.raises(RegistryError, match="is no longer in its registry"):
        audit_image(fake_record(fake, result.plan.run.name), None, False)


def fake_record(fake, run_name):
    from vdk.plugin.ml_training.k8s.runs import record as run_record

    (configmap,) = [c for c in fake.stored("configmaps") if c["metadata"]["name"] == f"{run_name}-record"]
    return run_record.parse(configmap)


def test_turned_off_nothing_is_attached_said_so_and_show_provenance_finds_it_missing(
    tmp_path, registry, base_image, cluster, monkeypatch
):
    cluster(pytorchjob=True)
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    monkeypatch.setenv("VDK_ML_TRAINING_ATTESTATIONS", "false")
    job = api_job(tmp_path, base_image, name="bare-job")
    told = Recorder()
    notes = told.notes
    plan_deploy(deploy_spec(job), reporter=told)
    assert "  attached   nothing (ml_training_attestations = false)" in notes
    result = deploy(deploy_spec(job), skip_smoke=True, reporter=told)
    assert "Attached to the image: nothing (ml_training_attestations = false)" in notes
    assert result.to_dict()["attached"] == []
    shown = vdk("show", "-n", "bare-job", "-t", "ml-platform", "--provenance")
    assert shown.exit_code == 1, shown.output
    assert f"no readable build provenance is attached to {result.image.reference}" in shown.stdout
    assert "no readable SBOM is attached" in shown.stdout and "Traceback" not in shown.output


def test_the_dry_run_says_what_would_be_attached_and_how_it_would_be_signed(tmp_path, cluster, monkeypatch):
    cluster(pytorchjob=True)
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", "127.0.0.1:9/nothing-listens-here")
    job = api_job(tmp_path, "python:3.11")
    told = Recorder()
    notes = told.notes
    plan_deploy(deploy_spec(job), reporter=told)
    (line,) = [n for n in notes if n.startswith("  attached")]
    assert "its SBOM (CycloneDX 1.6) and SLSA v1 build provenance" in line and "unsigned" in line
    key_file, _, private = cosign_key_pair(tmp_path / "keys", PASSWORD)
    monkeypatch.setenv("VDK_ML_TRAINING_SIGNING_KEY", str(key_file))
    monkeypatch.setenv("COSIGN_PASSWORD", "wrong")
    printed = vdk("deploy", "-p", str(job), "--dry-run")
    assert printed.exit_code == 1 and "$COSIGN_PASSWORD does not open the cosign key" in printed.output
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    notes.clear()
    plan_deploy(deploy_spec(job), reporter=told)
    (line,) = [n for n in notes if n.startswith("  attached")]
    assert f"signed with the key of the file {key_file}" in line and PASSWORD not in line
