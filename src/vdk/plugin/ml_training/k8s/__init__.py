"""Kubernetes: pure renderers (spec -> manifests as plain dicts) and one client module.

- `run`: a run's name, labels and audit annotations (`RunInfo`, `new_run_name`).
- `pytorchjob`, `trainjob`, `indexed_job`: one renderer per backend; `pod`: what they share.
- `manifests`: renders a whole run for a backend, run record included; YAML for --dry-run.
- `backends`: what the cluster serves (`Discovery`) and `choose_backend`.
- `record`: the run record (a ConfigMap owned by the run) and re-running a past run.
- `status`: a run's phase and summary from its object.
- `client`: the only module that talks to a cluster (`KubeClient`); `api_errors`: its failures
  as actionable `MLTrainingError`s.
"""
