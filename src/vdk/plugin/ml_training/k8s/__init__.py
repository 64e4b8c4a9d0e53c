"""Kubernetes: pure renderers (spec -> manifests as plain dicts) and the client that applies them.

- `backends/`: one module per backend (`pytorchjob`, `trainjob`, `indexed_job`) implementing one
  interface (`backends.base.Backend`: render, limitations, pods, ranks, status), and the registry
  (`backends`: lookups, `choose_backend`). Only these modules know a backend's kinds and labels.
- `runs/`: a job's runs: `identity` (a run's name, labels and audit annotations: `RunInfo`, `new_run_name`),
  `record` (the run record, a ConfigMap owned by the run, and re-running a past run), `pending_records`,
  `selection` (which runs a verb works on), `summary` (a run's phase and summary from its object), `pod_states`
  (its ranks' pods and which failed first), `restarts`, `cluster_evidence` (them as the evidence `diagnosis/`
  reads), `observe` (why it waits or failed, its logs), `continuation` (a run that begins with another's outputs).
- `pod_template`: the pod pieces every backend shares; `resources`: the built-in resource types.
- `storage/`: what a run's pods mount: `claims`, `data_volumes`, `data_reports`, `output_location`,
  `outputs_copy`.
- `manifests`: renders a whole run for a backend, run record included; YAML for --dry-run.
- `client`: run-level operations (`KubeClient`: apply, list, get and delete runs, records, pods,
  logs, events) over `transport` (the connection, requests, the tolerant GET, log streams) and
  `discovery` (what the cluster serves); `kubeconfig`: where credentials are (standard library
  only); `api_errors`: API failures as actionable `MLTrainingError`s.
"""
