"""The use cases of ml-training jobs, apart from the command line. Their front door, for notebooks, CI and the
command line alike, is `vdk.plugin.ml_training.api`: one typed function per verb, each one call of a use case here.

Each function takes a job spec or a scope (which job of which team, in which namespace) and returns data (a
deploy plan, a deploy result, run summaries, a run's detail with its diagnosis, a usage report, ...); problems
are `MLTrainingError`s that say what to do. What a use case does as it goes is told to its `reporter`
(reporting.py; none: nothing is told), never to click: `cli/` declares the flags, calls one function of the API
and renders its result as text or JSON (`to_dict()`).
"""
