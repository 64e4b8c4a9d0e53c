"""Where a run's pods may go, as every backend renders it: the GPU model (`gpu_type`, a required node affinity on
`gpu_type_label`), node labels (`node_selector`), the taints they tolerate (GPU nodes' `nvidia.com/gpu` taint
when the run asks for GPUs, and `tolerations`), the Secrets their image is pulled with and their ServiceAccount.

A GPU model written short (`H100`) stands for the values NVIDIA's GPU feature discovery sets to
`nvidia.com/gpu.product` for that model: the device's name as NVML reports it, spaces as dashes
(`NVIDIA-H100-80GB-HBM3`). Any other value, and any value of another label, is taken as written.
"""

from __future__ import annotations

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.vocabulary.nvidia import GPU_PRODUCT_LABEL
from vdk.plugin.ml_training.vocabulary.nvidia import GPU_RESOURCE

GPU_TAINT_KEY = GPU_RESOURCE  # the taint of GPU nodes has the resource's name

# GPU models as users name them -> the `nvidia.com/gpu.product` values of their variants.
GPU_PRODUCTS: dict[str, tuple[str, ...]] = {
    "B200": ("NVIDIA-B200",),
    "GB200": ("NVIDIA-GB200",),
    "H200": ("NVIDIA-H200", "NVIDIA-H200-NVL"),
    "H100": (
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-H100-PCIe",
        "NVIDIA-H100-NVL",
        "NVIDIA-H100-SXM5-80GB",
    ),
    "GH200": ("NVIDIA-GH200-480GB",),
    "A100": (
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-A100-SXM4-40GB",
        "NVIDIA-A100-80GB-PCIe",
        "NVIDIA-A100-PCIE-40GB",
    ),
    "A10G": ("NVIDIA-A10G",),
    "A10": ("NVIDIA-A10",),
    "L40S": ("NVIDIA-L40S",),
    "L40": ("NVIDIA-L40",),
    "L4": ("NVIDIA-L4",),
    "T4": ("Tesla-T4",),
    "V100": ("Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB", "Tesla-V100-PCIE-16GB", "Tesla-V100-PCIE-32GB"),
}


def gpu_products(spec: MLJobSpec) -> list[str]:
    """The values of `gpu_type_label` that select the job's GPU model (none: any GPU)."""
    if not spec.gpu_type:
        return []
    known = GPU_PRODUCTS.get(spec.gpu_type.upper()) if spec.gpu_type_label == GPU_PRODUCT_LABEL else None
    return list(known) if known else [spec.gpu_type]


def affinity(spec: MLJobSpec) -> dict | None:
    """A required node affinity to the job's GPU model; None without `gpu_type`."""
    products = gpu_products(spec)
    if not products:
        return None
    expression = {"key": spec.gpu_type_label, "operator": "In", "values": products}
    required = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def tolerations(spec: MLJobSpec) -> list[dict]:
    """GPU node pools are commonly tainted nvidia.com/gpu:NoSchedule: GPU jobs tolerate it; then the job's own."""
    out = []
    if spec.gpus_per_node.resource_name:
        out.append({"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    for toleration in spec.tolerations:
        entry = toleration.to_dict()
        if entry not in out:
            out.append(entry)
    return out


def pod_fields(spec: MLJobSpec) -> dict:
    """The fields of a pod spec that place it (only those the job sets): nodeSelector, affinity, tolerations,
    imagePullSecrets, serviceAccountName."""
    out: dict = {}
    if spec.node_selector:
        out["nodeSelector"] = dict(spec.node_selector)
    gpu_affinity = affinity(spec)
    if gpu_affinity:
        out["affinity"] = gpu_affinity
    if tolerations(spec):
        out["tolerations"] = tolerations(spec)
    if spec.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    if spec.service_account:
        out["serviceAccountName"] = spec.service_account
    return out


def describe(spec: MLJobSpec) -> list[str]:
    """What a deploy and its dry run say of the placement, a line each (none when nothing is set)."""
    lines = []
    products = gpu_products(spec)
    if products:
        lines.append(f"gpu type   {spec.gpu_type}: nodes whose {spec.gpu_type_label} is {' or '.join(products)}")
    if spec.node_selector:
        lines.append("nodes      " + ", ".join(f"{k}={v}" for k, v in spec.node_selector))
    if spec.tolerations:
        lines.append("tolerates  " + ", ".join(str(t) for t in spec.tolerations))
    if spec.image_pull_secrets:
        lines.append("pulls with " + ", ".join(spec.image_pull_secrets))
    if spec.service_account:
        lines.append(f"runs as    service account {spec.service_account}")
    return lines
