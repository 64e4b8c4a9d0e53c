"""The smoke run's virtual GPUs: torch's device APIs say there are CUDA GPUs, and they live in CPU memory.

`cuda_apis` (torch.cuda / torch.accelerator answer for them; `install()` puts them in place), `devices` (how many,
the one selected, CUDA's errors for one that is not there), `objects` (streams, events, device properties, memory
figures), `distributed` (backends, meshes, FSDP2, DataParallel), `nccl_semantics` (what NCCL takes and gloo does
not), `attention` (attention of DTensors) and `threads` (every thread of a rank, RPC handlers). Nothing here is
imported by this file: `runtime/cpu_shims.py` installs the modules it needs.
"""
