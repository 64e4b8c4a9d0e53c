"""The job's requirements.txt installed with uv, for the two places that need it: a job image's dependency
layer (image/dependency_layer.py: for the base image's Python and platform) and a local run's dependency
overlay (local/overlay.py: for this interpreter). One resolution for both (`uv_install`), the package indexes
pip would use (`package_index`), and where the results are cached (vocabulary/local_cache.py).

Below the backends (image/, local/) and above source/ (the job directory): neither backend imports the other.
"""
