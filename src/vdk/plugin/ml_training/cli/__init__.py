"""The vdk command line of ml-training jobs: each verb declares its flags, calls one function of the API
(`vdk.plugin.ml_training.api`) and renders its result as text or JSON; `console` is the reporter it hands that
function (what `vdk` prints as it goes). Local runs: `run_command` (`vdk run`'s flags and hook) and
`local_summary` (what the user reads of them). Cluster runs: `deploy_command` (`vdk deploy`), `cluster_runs`
(`vdk list/show/delete`), `cluster_execute` (`vdk execute`), with `cluster_scope` (their options and which
invocations are for ML), `cluster_views` and `cluster_usage` (their text). Around them: `verbs` (adding or
wrapping vdk's commands), `commands`, `context`, `defaults`, `interrupts`, `preflight` and `clean_stdout`."""
