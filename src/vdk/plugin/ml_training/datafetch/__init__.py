"""Datasets by reference (`[ml-training.data]`): resolved to an immutable version at deploy, fetched at exactly
that version by the cluster, sampled for local smoke runs.

This package stands apart, as runtime/ does: it imports nothing of the rest of the plugin (standard library at
import time; boto3 and huggingface_hub only inside the functions that talk to S3 or the Hub), so that it runs
in three places with the same code:

- in the job's image, from the runtime layer (below LIB_DIR, next to runtime/), as the init container of every
  pod (or, for a TrainJob, the step before torch's launcher): `python -m vdk.plugin.ml_training.datafetch
  fetch ...`, with boto3 / huggingface_hub from the image's dependency layer, which holds them only when the job
  references such data (image/dependency_layer.py adds DATA_TOOLS);
- on the deploying machine, in an environment of its own with the same tools (local/data_tools.py runs it
  through uv): resolving every reference to a version beside the smoke run (`resolve`), and fetching a bounded
  sample, or everything, for a local run (`sample`, `full`). boto3 cannot share an environment with the
  plugin's kubernetes client (botocore wants python-dateutil<3, kubernetes 37 >=3), so it never does;
- anywhere, the wire formats: `data_pins` (what a deploy pinned, which the fetch step reads, the run record
  keeps and `vdk diff` compares) and the manifest lines of PersistentVolumeClaims that pods report.

Modules: data_pins (the pins, their fingerprints, cache keys, the manifest line), s3_source and hf_source (one
per kind of source: resolve, fetch at a version, sample), data_cache (the cache claim's layout and lock),
claim_manifest (paths, sizes, mtimes of a mounted claim), fetch_step (what the command does), __main__ (its
command line).
"""

# What the data tools need, by scheme: installed in the image's dependency layer when the job references such
# data, and in the deploying machine's data tools environment.
DATA_TOOLS = {"s3": ("boto3>=1.28.57",), "hf": ("huggingface_hub>=0.23",)}
MODULE = "vdk.plugin.ml_training.datafetch"
