"""What a smoke run turned off that the cluster run will do, checked the way the cluster meets it, or named as not
checked. A Trainer's `report_to="wandb"` is turned off in the smoke run, and no import in the job's source names
wandb; on the cluster `Trainer(...)` imports it at once and fails without it. So each reporting integration's
module must be in the job's image (requirements.txt, or the base: the import check's rules), else the smoke run
fails here with the fix. What no check here can stand for (pushing to the Hub, compiling, mixed precision,
DeepSpeed) is named in the summary as not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.diagnosis.finding import FAILED
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.ops.imports import SKIP_OPTION
from vdk.plugin.ml_training.source.import_check import ImportSite
from vdk.plugin.ml_training.source.import_check import check_sites
from vdk.plugin.ml_training.source.requirements import REQUIREMENTS

# What the cluster does that the smoke run does not, for what needs no module.
NOT_CHECKED = {
    "push_to_hub": "pushing to the Hugging Face Hub (its token and network)",
    "torch_compile": "compiling the model (Inductor, on the cluster's GPUs)",
    "torch.compile": "compiling the model (Inductor, on the cluster's GPUs)",
    "fp16": "fp16 mixed precision (on GPUs)",
    "bf16": "bf16 mixed precision (on GPUs)",
    "fp16_full_eval": "fp16 evaluation (on GPUs)",
    "bf16_full_eval": "bf16 evaluation (on GPUs)",
    "deepspeed": "DeepSpeed (its config, on GPUs)",
    "fsdp": "FSDP as the Trainer configures it (on GPUs)",
}


@dataclass(frozen=True)
class SmokeGaps:
    """What the smoke run turned off: lines for its summary, and the failure of a module the image lacks."""

    lines: list[str] = field(default_factory=list)
    finding: Finding | None = None


def check_gaps(
    spec: MLJobSpec, turned_off: dict[str, str | None], base_provides: tuple[str, ...] | None, again: str
) -> SmokeGaps:
    """Check what the smoke run turned off (`turned_off`: what -> the module the cluster run imports for it, or
    None) against the job's image: its requirements.txt and `base_provides` (None: the base was never read)."""
    if not turned_off:
        return SmokeGaps()
    lines: list[str] = []
    modules = {what: module for what, module in turned_off.items() if module}
    missing: list[tuple[str, str, str]] = []  # (what, module, distribution)
    if modules and spec.import_check:
        requirements = spec.job_dir / REQUIREMENTS
        entry = spec.entrypoint_file.relative_to(spec.job_dir).as_posix()
        sites = [ImportSite(entry, 0, module, what) for what, module in modules.items()]
        result = check_sites(
            sites, requirements if requirements.is_file() else None, base_provides, declared_by_user=spec.base_provides
        )
        lacking = {item.site.module: item.distribution for item in result.undeclared}
        for what, module in modules.items():
            if module not in lacking:
                lines.append(f"{what}: turned off here; {module}, which the cluster run imports, is in the image")
            elif not result.base_known:
                lines.append(
                    f"{what}: turned off here; {module} is not in {REQUIREMENTS}, so it must come from the base "
                    f"image {spec.base_image}, whose packages are not known yet (`vdk deploy` checks it)"
                )
            else:
                missing.append((what, module, lacking[module]))
    elif modules:
        lines += [f"{what}: turned off here; not checked (import_check = false)" for what in modules]
    unchecked = [NOT_CHECKED.get(what, what) for what, module in turned_off.items() if not module]
    if unchecked:
        lines.append(f"not checked here, the cluster run does it: {'; '.join(dict.fromkeys(unchecked))}")
    return SmokeGaps(lines, _finding(spec, missing, again) if missing else None)


def _finding(spec: MLJobSpec, missing: list[tuple[str, str, str]], again: str) -> Finding:
    what = ", ".join(f"{what} (for which the Trainer imports {module})" for what, module, _ in missing)
    distributions = ", ".join(f"`{distribution}`" for _, _, distribution in dict.fromkeys(missing))
    requirements = spec.job_dir / REQUIREMENTS
    them = "it" if len(missing) == 1 else "them"
    return Finding(
        FAILED,
        f"the job asks for {what}, which the smoke run turns off; on the cluster Trainer(...) imports {them} at "
        f"once and fails, because the job's image would not have {them}",
        f"add {distributions} to {requirements} (or stop asking for it: `report_to`). If the base image has it, name "
        f"it in `base_provides` of [ml-training]; if the check is wrong, pass {SKIP_OPTION}. Then {again}",
    )
