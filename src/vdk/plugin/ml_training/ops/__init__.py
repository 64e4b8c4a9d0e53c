"""The use cases of ml-training jobs, apart from the command line: the project's Python API for notebooks and CI.

Each function takes a job spec or a scope (which job of which team, in which namespace) and returns data (a
deploy plan, a deploy result, run summaries, a run's detail with its diagnosis, a usage report, ...); problems
are `MLTrainingError`s that say what to do. Progress and notes go to a `say` callback (default: stderr), never
to click: `cli/` declares the flags, calls one use case and renders its result as text or JSON (`to_dict()`).
"""
