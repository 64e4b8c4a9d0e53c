"""`vdk show --provenance`: the report of `api.show_provenance` (ops/image_audit.py) as text (or JSON with
-o json); exit status 1 when it has a finding (a missing, unsigned, unverifiable or disagreeing attestation), so
that a script can gate on it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.console import Console
from vdk.plugin.ml_training.cli.text_table import shown
from vdk.plugin.ml_training.vocabulary.human_units import counted

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import ProvenanceReport
    from vdk.plugin.ml_training.api import Scope

_PACKAGES_SHOWN = 12


def show_provenance(scope: Scope, run_id: str | None, public_key: str | None, output: str | None) -> None:
    report = api.show_provenance(scope, run_id, public_key=Path(public_key) if public_key else None, reporter=Console())
    if (output or "text").lower() == "json":
        print_json(report.to_dict())
    else:
        click.echo(provenance_text(report))
    if report.findings:
        raise SystemExit(1)


@shown
def provenance_text(report: ProvenanceReport) -> str:
    s = report.summary
    lines = [f"Provenance of run {report.run}: {report.image}", f"  found through  {report.listed}"]
    if s.get("git_commit") or s.get("base_image"):
        source = f"git {s.get('git_commit')}" if s.get("git_commit") else "no git commit"
        if s.get("git_dirty"):
            source += " with uncommitted changes"
        if s.get("git_remote"):
            source += f" of {s['git_remote'].removeprefix('git+')}"
        lines.append(f"  built from     {source}")
        lines.append(f"                 on {s.get('base_image')}")
        if s.get("requirements_lock_sha256"):
            lines.append(f"                 requirements.lock sha256:{s['requirements_lock_sha256']}")
        builder = ", ".join(f"{k} {v}" for k, v in (s.get("builder") or {}).items())
        who = f" for {s['built_by']}" if s.get("built_by") else ""
        lines.append(f"  built by       {builder}{who} (SLSA Build L1)")
        layers = counted(int(s.get("layers") or 0), "layer")
        lines.append(f"  when           {s.get('started')} to {s.get('finished')}, {layers}")
    signed = s.get("signed")
    verified = s.get("verified")
    if signed and verified:
        lines.append("  signed         yes, verified with the public key given")
    elif signed and verified is None:
        lines.append("  signed         yes, not verified (give --public-key cosign.pub)")
    elif signed:
        lines.append("  signed         yes, but the signature does NOT verify with the public key given")
    else:
        lines.append("  signed         no")
    sbom = s.get("sbom")
    if sbom:
        packages = sbom["packages"]
        shown = ", ".join(packages[:_PACKAGES_SHOWN]) + (f" and {len(packages) - _PACKAGES_SHOWN} more" if len(
            packages) > _PACKAGES_SHOWN else "")  # fmt: skip
        lines.append(
            f"  SBOM           {sbom['format']}: {counted(len(packages), 'package')} in the dependency layer, "
            f"{sbom['base_packages']} in the base, {counted(sbom['code_files'], 'code file')}"
        )
        if packages:
            lines.append(f"  packages       {shown}")
    if report.agrees:
        said = ", ".join(f"{what} {'agrees' if ok else 'DIFFERS'}" for what, ok in report.agrees.items())
        lines.append(f"  run record     {said}")
    if report.findings:
        lines.append(f"Findings ({len(report.findings)}):")
        for finding in report.findings:
            lines += [f"  - {finding.problem}", f"    fix: {finding.fix}"]
    return "\n".join(lines)
