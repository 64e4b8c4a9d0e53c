"""The vdk command line of ml-training jobs. Local runs: `local_run` (`vdk run`'s flags and hook: smoke and
full runs on this machine, ops/local_run.py) and `local_summary` (what the user reads of them). Cluster runs:
`deploy` (`vdk deploy`), `cluster_runs` (`vdk list/show/delete/execute`) and `cluster_views` (their text and
JSON). Around them: `verbs` (adding or wrapping vdk's commands), `commands`, `context`, `preflight` and
`stdout_guard`."""
