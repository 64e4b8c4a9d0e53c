"""The vdk command line of ml-training jobs. Local runs: `local_run` (`vdk run`: smoke and full runs on
this machine). Cluster runs: `deploy` (`vdk deploy`), `cluster_runs` (`vdk list/show/delete/execute`)
and `cluster_views` (their text and JSON). Around them: `verbs` (adding or wrapping vdk's commands),
`commands`, `context`, `preflight` and `stdout_guard`."""
