"""A local Hugging Face Hub endpoint (`HF_ENDPOINT`) serving the few routes huggingface_hub's own code calls to
resolve a revision and download a repository, so that the plugin's Hub code runs its real code path on
loopback:

- GET  /api/{datasets|models}/{repo}/revision/{rev}      repo_info (with `blobs`: each file's size)
- GET  /api/{datasets|models}/{repo}/tree/{sha}           list_repo_tree (snapshot_download of a commit)
- HEAD /[datasets/]{repo}/resolve/{rev}/{path}            get_hf_file_metadata (X-Repo-Commit, ETag, size)
- GET  /[datasets/]{repo}/resolve/{rev}/{path}            the file

Errors as the Hub sends them (X-Error-Code RepoNotFound, RevisionNotFound; 401 for a private repository
without the right token). `requests` records what was asked (method, path) to check which commit was fetched.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from dataclasses import field
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from urllib.parse import unquote
from urllib.parse import urlparse


@dataclass
class Repo:
    branches: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit sha
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> {path: content}
    token: str | None = None  # private: only this token may read it


class LocalHub:
    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}  # (datasets|models, repo id) -> Repo
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        hub = self

        class Handler(_Handler):
            server_hub = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def commit(self, kind: str, repo_id: str, files: dict[str, bytes], branch: str = "main", token: str | None = None):
        """A new commit of `files` on `branch` (the repository made if new); its sha."""
        with self._lock:
            repo = self.repos.setdefault((kind, repo_id), Repo(token=token))
            sha = hashlib.sha1(json.dumps([repo_id, len(repo.commits), sorted(files)]).encode()).hexdigest()
            repo.commits[sha] = dict(files)
            repo.branches[branch] = sha
            return sha

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_hub: LocalHub

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self._handle(body=True)

    def do_HEAD(self):
        self._handle(body=False)

    def _handle(self, body: bool) -> None:
        hub = self.server_hub
        path = unquote(urlparse(self.path).path)
        hub.requests.append((self.command, path))
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 5 and parts[1] in ("datasets", "models"):
            kind = parts[1]
            for at in range(3, len(parts)):
                if parts[at] in ("revision", "tree"):
                    repo_id, route, rev = "/".join(parts[2:at]), parts[at], parts[at + 1] if at + 1 < len(parts) else ""
                    return self._api(kind, repo_id, route, rev, body)
        kind = "datasets" if parts[0] == "datasets" else "models"
        rest = parts[1:] if kind == "datasets" else parts
        if "resolve" in rest:
            at = rest.index("resolve")
            return self._file(kind, "/".join(rest[:at]), rest[at + 1], "/".join(rest[at + 2 :]), body)
        self._send(404, {"error": "no such route"}, body)

    def _repo(self, kind: str, repo_id: str, body: bool) -> Repo | None:
        repo = self.server_hub.repos.get((kind, repo_id))
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if repo is None or (repo.token and token != repo.token):
            status = 401 if repo is not None or not token else 404
            self._send(status, {"error": "Repository not found"}, body, {"X-Error-Code": "RepoNotFound"})
            return None
        return repo

    def _commit(self, repo: Repo, rev: str, body: bool) -> str | None:
        sha = repo.branches.get(rev) or (rev if rev in repo.commits else None)
        if sha is None:
            self._send(404, {"error": "Invalid rev id"}, body, {"X-Error-Code": "RevisionNotFound"})
        return sha

    def _api(self, kind: str, repo_id: str, route: str, rev: str, body: bool) -> None:
        repo = self._repo(kind, repo_id, body)
        if repo is None:
            return
        sha = self._commit(repo, rev, body)
        if sha is None:
            return
        files = repo.commits[sha]
        if route == "tree":
            entries = [
                {"type": "file", "path": p, "size": len(c), "oid": hashlib.sha1(c).hexdigest()}
                for p, c in sorted(files.items())
            ]
            return self._send(200, entries, body)
        siblings = [
            {"rfilename": p, "size": len(c), "blobId": hashlib.sha1(c).hexdigest()} for p, c in sorted(files.items())
        ]
        info = {"id": repo_id, "sha": sha, "private": bool(repo.token), "siblings": siblings, "disabled": False}
        self._send(200, info, body)

    def _file(self, kind: str, repo_id: str, rev: str, path: str, body: bool) -> None:
        repo = self._repo(kind, repo_id, body)
        if repo is None:
            return
        sha = self._commit(repo, rev, body)
        if sha is None:
            return
        content = repo.commits[sha].get(path)
        if content is None:
            return self._send(404, {"error": "Entry not found"}, body, {"X-Error-Code": "EntryNotFound"})
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(content)))
        self.send_header("X-Repo-Commit", sha)
        self.send_header("ETag", f'"{hashlib.sha1(content).hexdigest()}"')
        self.end_headers()
        if body:
            self.wfile.write(content)

    def _send(self, code: int, payload, body: bool, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)
