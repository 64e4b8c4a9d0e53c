"""What a run's pods mount: the job's PersistentVolumeClaims, checked (`claims`); the data step, the data cache and
each dataset at its target (`data_volumes`); the Secrets the data step reads, the cache claim's size and the
claims' manifests the pods reported (`data_reports`); where a run's outputs are and the pod that copies them
(`output_location`, `outputs_copy`). Nothing here is imported by this file.
"""
