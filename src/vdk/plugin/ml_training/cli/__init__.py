"""The vdk command line of ml-training jobs: each verb declares its flags, calls one function of the API
(`vdk.plugin.ml_training.api`) and renders its result as text or JSON; `console` is the reporter it hands that
function (what `vdk` prints as it goes). Local runs: `run_command` (`vdk run`'s flags and hook) and
`local_summary` (what the user reads of them). Cluster runs: `deploy_command` (`vdk deploy`), `list_command`,
`show_command`, `delete_command` and `execute_command` (`vdk list`, `show`, `delete`, `execute`), with
`cluster_scope` (their options and which invocations are for ML), `cluster_views` and `usage_views` (their
text). A verb's module is `<verb>_command`; its text, where it has its own module, `<subject>_views`. Around
them: `verbs` (adding or wrapping vdk's commands), `commands`, `context`, `defaults`, `interrupts`,
`preflight` and `clean_stdout`."""
