"""A job's runs on the cluster: what a run is (`identity`: names, labels, audit annotations), what it keeps
(`record`, and `pending_records`: records whose run's creation never completed), which runs a verb works on
(`selection`), how they are read (`summary`: phase and summary; `observe`: ranks, events, logs; `pod_states`:
each rank's pod; `restarts`), what the diagnosis reads of them (`cluster_evidence`) and a run that continues
another (`continuation`). Nothing here is imported by this file.
"""
