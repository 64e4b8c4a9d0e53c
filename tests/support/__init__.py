"""What the tests share: the HTTP-level fake Kubernetes API server and the objects it holds
(`fake_apiserver`, `cluster_state`), validation against the real upstream CRDs and API-server rules
(`crd_schema`, `upstream_crds`, `native`), a real registry and podman (`registry`, `base_image`),
hand-made wheels (`wheels`), the one job-directory factory (`jobs`), job specs and runs for the
renderers (`specs`), the real `vdk` command line (`vdk_cli`) and the fixtures (`fixtures`, registered
in tests/conftest.py)."""
