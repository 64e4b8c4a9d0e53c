"""A kubelet for the fake API server (fake_apiserver.FakeKube.kubelet): a pod created through the API runs its
container's command here, in a thread, with this interpreter for the image's (the plugin's runtime is
installed in it, as the image has it), and its PersistentVolumeClaims as host directories (`claims`, a
subPath a directory of it) at their mount paths; the pod goes Pending, Running, then Succeeded or Failed
with its exit code, and its output becomes its log line by line, as it is written.

Mount paths are emulated by rewriting the arguments that start with them (there is no container
filesystem here): enough for commands that take their directories as arguments."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.fake_apiserver import FakeKube

NODE = "node-1"


class LocalKubelet:
    def __init__(self, claims: dict[str, Path]):
        self.claims = claims
        self.threads: list[threading.Thread] = []
        self.commands: list[list[str]] = []  # what it ran, with the paths rewritten

    def __call__(self, fake: FakeKube, pod: dict, namespace: str) -> None:
        thread = threading.Thread(target=self._run, args=(fake, pod, namespace), daemon=True)
        self.threads.append(thread)
        thread.start()

    def _run(self, fake: FakeKube, pod: dict, namespace: str) -> None:
        name = pod["metadata"]["name"]
        container = pod["spec"]["containers"][0]
        self._status(fake, name, namespace, "Pending", {"waiting": {"reason": "ContainerCreating"}})
        paths = self._mounts(pod, container)
        command = [sys.executable, *(_rewrite(a, paths) for a in (container.get("command") or [])[1:])]
        self.commands.append(command)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
        env.update({e["name"]: e.get("value", "") for e in container.get("env") or [] if e["name"] != "PYTHONPATH"})
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        self._status(fake, name, namespace, "Running", {"running": {}})
        for line in process.stdout:
            fake.append_log(name, container["name"], line, namespace)
        code = process.wait()
        terminated = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
        self._status(fake, name, namespace, "Succeeded" if code == 0 else "Failed", terminated)

    def _mounts(self, pod: dict, container: dict) -> dict[str, Path]:
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        out = {}
        for mount in container.get("volumeMounts") or []:
            claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
            out[mount["mountPath"]] = self.claims[claim] / mount.get("subPath", "")
        return out

    @staticmethod
    def _status(fake: FakeKube, name: str, namespace: str, phase: str, state: dict) -> None:
        with fake._lock:
            stored = fake.objects.get(("v1", "pods", namespace, name))
            if stored is None:
                return  # deleted meanwhile
            stored["spec"]["nodeName"] = NODE
            container = stored["spec"]["containers"][0]["name"]
            stored["status"] = {"phase": phase, "containerStatuses": [{"name": container, "state": state}]}


def _rewrite(arg: str, paths: dict[str, Path]) -> str:
    for mount_path, host in sorted(paths.items(), key=lambda item: -len(item[0])):
        if arg == mount_path or arg.startswith(mount_path + "/"):
            return str(host) + arg[len(mount_path) :]
    return arg
