"""One diagnosis engine for every run: what a run left (local rank outcomes, or a cluster run's pod states,
events and log tails), brought into one shape (`evidence`), becomes findings: what happened, which rank,
and the fix (`finding`). Each kind of failure is written once, in its own module of `rules/`, with a
wording for each place it happens where the local and the cluster wording differ; `rules/__init__.py`
lists them in the order they are asked, and `engine` asks them.

Imports only the spec (`job`), the job's sources (`source`), the wire formats (`runtime`) and the
foundation: the adapters that build the evidence live with what they read (`local/outcome.py`,
`k8s/runs/cluster_evidence.py`).

Add a diagnosis: `rules/<kind>.py`, its place in `rules/__init__.py`, its entry in the documentation's
troubleshooting page; tests in `tests/unit/diagnosis/rules/test_<kind>.py`.
"""
