"""The prepared real-GPU check (docs/gpu-verification.md): `run-on-gpu.sh` runs it on a machine with an NVIDIA GPU
in one call, from the files `make gpu-check-prepare` carries there, and writes one report.

- `prepare`: the carried files (the project's wheel and the dependencies that machine lacks) and the exact call;
- `check`: the orchestration, each part with its time budget, the report written after every part;
- `cases`: the agreement table's jobs (the examples, the tests' planted-bug fixtures, tutorial scripts);
- `smoke_verdict` and `cut_rank`: the two verdicts of a case, the smoke check's (`vdk run` on the CPUs) and
  the real GPU's (the same script cut to the same steps);
- `agreement`, `smi` and `report`: what is compared, and how it is written (pure: tested on CPU).
"""
