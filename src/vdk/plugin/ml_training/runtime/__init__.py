"""Code that runs inside the training processes, locally and in job images.

Imports only the standard library, torch, transformers/accelerate (lazily) and other `runtime`
modules: the image builder ships this package on its own, without the rest of the plugin.

The modules, by job (no two import each other, even through others; none takes another's `_private` names):

- starting the user's code: torchrun_launch (torch's launcher, as every pod starts it, whose agents leave its
  exit barrier together), bootstrap (the command torchrun runs in every training process),
  rank_process (what a training process does as it starts and ends, whoever started it), smoke_rank (a
  smoke rank's stand-ins, its end, and the mp.spawn workers that are ranks too), spawned_workers (mp.spawn
  workers of a full run), loader_workers, job_dir_protection, output_workdir, outputs_stream (the command
  that lists or sends a run's outputs);
- running GPU code on CPU: cpu_shims (torch-wide adaptations; `install()` puts every stand-in in place),
  virtual_gpu/ (the virtual GPUs: cuda_apis, where torch.cuda / torch.accelerator answer for them, devices,
  objects, distributed, nccl_semantics (what NCCL takes and gloo does not), attention (attention of DTensors),
  threads (every thread, RPC handlers)),
  device_tracking (installs the device mode), device_mode, device_marks, hf_shims, lightning_shims, patching
  (the machinery every stand-in module uses);
- watching training: steps (optimizer steps and the loss), epochs (a smoke run's end of an epoch),
  smoke_stop (the end the ranks agree on),
  watchdog (stall lines), progress_lines, hf_progress, checksum, report (a rank's result file);
- foundation: protocol (what the launcher and the processes agree on), post_import, termination.
"""
