"""A small stand-in for the Hugging Face Hub on 127.0.0.1, for tests only.

It speaks the HTTP endpoints that `huggingface_hub`'s real client calls use for what clover-local does
(download a snapshot, create a repo and a branch, upload a folder through the LFS "basic" transfer), so the
tests exercise the real client code, never the network:

    GET  /api/models/{repo}[/revision/{rev}]             repo info (sha, siblings)
    GET  /api/models/{repo}/tree/{rev}[/{path}]          file listing (size, oid, lfs sha256)
    HEAD /{repo}/resolve/{rev}/{path}                    metadata: ETag, X-Repo-Commit, Content-Length
    GET  /{repo}/resolve/{rev}/{path}                    the bytes, honouring `Range: bytes=N-[M]` (206)
    POST /api/repos/create                               create a repo (409 if it exists)
    POST /api/models/{repo}/branch/{branch}              create a branch (409 if it exists)
    POST /api/validate-yaml                              model card metadata check
    POST /api/models/{repo}/preupload/{rev}              upload modes (lfs/regular) and remote oids
    POST /{repo}.git/info/lfs/objects/batch              LFS batch: where to PUT each new object
    PUT  /lfs-upload/{oid}                               object bytes (sha256 checked)
    POST /lfs-verify                                     LFS verify step
    POST /api/models/{repo}/commit/{rev}                 NDJSON commit (file, lfsFile, deletedFile)

Errors carry the `X-Error-Code` headers the client maps to its exception types (RepoNotFound,
RevisionNotFound, EntryNotFound). Writes need `Authorization: Bearer <token>` matching `token`.

Fault injection: `faults[path]` is a list of what the next GETs of that file meet, in order:
`("drop", n)` sends the headers and only n bytes of the body, then cuts the connection (a dropped home
connection); `("status", 503)` answers with that status instead. `ignore_range = True` makes file GETs answer
200 with the whole file whatever Range they ask for (as some CDNs and proxies do). Every request is logged in
`requests` (method, path, Range header, whether it carried an Authorization header, and for file GETs the body
bytes sent) so tests can assert what reached the server and what came back.

The server is bounded: it serves at most `max_requests` requests and stops by itself after `max_seconds`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import yaml


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs_path(path: str) -> bool:
    return path.endswith((".safetensors", ".bin", ".pt", ".gguf"))


@dataclass
class Repo:
    repo_id: str
    private: bool = False
    gated: bool = False
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit sha
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> {path: bytes}

    def resolve(self, rev: str) -> str | None:
        if rev in self.branches:
            return self.branches[rev]
        if rev in self.commits:
            return rev
        return None


_LICENSES = {"apache-2.0", "mit", "other", "llama3", "cc-by-4.0", "cc-by-nc-4.0", "gpl-3.0", "openrail"}
_RELATIONS = {"adapter", "merge", "quantized", "finetune"}
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


def check_card_yaml(content: str) -> list[str]:
    """The stand-in's metadata checks (an emulation of the Hub's, not the Hub's own code)."""
    m = re.match(r"^\s*---\r?\n([\s\S]*?)\r?\n---[ \t]*(\r?\n|$)", content)
    if not m:
        return ["no YAML metadata block"]
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:
        return [f"invalid YAML: {exc}"]
    if not isinstance(meta, dict):
        return ["metadata must be a mapping"]
    errors = []
    if "license" in meta and meta["license"] not in _LICENSES:
        errors.append(f'"license" must be a known license id, got {meta["license"]!r}')
    if "tags" in meta and not (isinstance(meta["tags"], list) and all(isinstance(t, str) and t for t in meta["tags"])):
        errors.append('"tags" must be a list of strings')
    base = meta.get("base_model")
    if base is not None:
        bases = base if isinstance(base, list) else [base]
        if not all(isinstance(b, str) and _REPO_ID.match(b) for b in bases):
            errors.append('"base_model" must be a repo id or a list of repo ids')
    rel = meta.get("base_model_relation")
    if rel is not None and rel not in _RELATIONS:
        errors.append(f'"base_model_relation" must be one of {sorted(_RELATIONS)}')
    if rel is not None and base is None:
        errors.append('"base_model_relation" needs "base_model"')
    if "library_name" in meta and not isinstance(meta["library_name"], str):
        errors.append('"library_name" must be a string')
    if "pipeline_tag" in meta and meta["pipeline_tag"] not in {"text-generation", "text2text-generation"}:
        errors.append('"pipeline_tag" is not a known task')
    return errors


class HubStandin:
    def __init__(self, token: str | None = None, max_requests: int = 400, max_seconds: float = 90.0):
        self.token = token
        self.max_requests = max_requests
        self.max_seconds = max_seconds
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[dict] = []
        self.faults: dict[str, list[tuple[str, int]]] = {}
        self.ignore_range = False
        self.validated_cards: list[str] = []
        self._etags: dict[int, tuple[bytes, str]] = {}
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self._commit_counter = 0
        self._stopped = False
        self._connections: set = set()

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "HubStandin":
        standin = self

        class Handler(_Handler):
            hub = standin

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                if isinstance(sys.exc_info()[1], ConnectionError):
                    return  # the client hung up mid-answer (a test's Ctrl-C or kill): not the stand-in's problem
                super().handle_error(request, client_address)

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.max_seconds, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None and not self._stopped:
            self._stopped = True
            self._server.shutdown()
            self._server.server_close()
            # Keep-alive connections outlive the listening socket: cut them too, so the Hub is really gone.
            with self.lock:
                conns = list(self._connections)
            for conn in conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def __enter__(self) -> "HubStandin":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- content -----------------------------------------------------------------------------------
    def _new_sha(self, repo_id: str) -> str:
        self._commit_counter += 1
        return hashlib.sha1(f"{repo_id}:{self._commit_counter}:{time.time_ns()}".encode()).hexdigest()

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes] | None = None,
        *,
        private: bool = False,
        gated: bool = False,
    ) -> str:
        """Create a repo whose `main` holds `files`; returns the commit sha."""
        self.repos[repo_id] = Repo(repo_id, private=private, gated=gated)
        return self.push(repo_id, files or {})

    def push(self, repo_id: str, files: dict[str, bytes], branch: str = "main") -> str:
        """A new commit on `branch` holding `files` (on main: the repo's next release, as a vendor updates a
        preview); returns its sha. Earlier commits stay readable by sha."""
        repo = self.repos[repo_id]
        sha = self._new_sha(repo_id)
        repo.commits[sha] = dict(files)
        repo.branches[branch] = sha
        for path, data in files.items():
            if is_lfs_path(path):
                self.lfs[hashlib.sha256(data).hexdigest()] = data
        return sha

    def files_at(self, repo_id: str, rev: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return dict(repo.commits[repo.resolve(rev)])

    def etag(self, file: str, data: bytes) -> str:
        """A file's ETag (its sha256 for LFS files), computed once per content: hashing a GB-sized shard again for
        each ranged GET made the stand-in, not the client, what a streamed read waited for."""
        with self.lock:
            held = self._etags.get(id(data))
        if held is None or held[0] is not data:
            held = (data, hashlib.sha256(data).hexdigest() if is_lfs_path(file) else git_blob_sha1(data))
            with self.lock:
                self._etags[id(data)] = held
        return held[1]

    def log(self, method: str | None = None, contains: str = "") -> list[dict]:
        with self.lock:
            return [r for r in self.requests if (method is None or r["method"] == method) and contains in r["path"]]


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandin
    protocol_version = "HTTP/1.1"
    server_version = "HubStandin/1.0"

    def log_message(self, format, *args):  # keep test output clean
        pass

    def setup(self):
        super().setup()
        with self.hub.lock:
            self.hub._connections.add(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            with self.hub.lock:
                self.hub._connections.discard(self.connection)

    # -- plumbing ----------------------------------------------------------------------------------
    def _record(self) -> bool:
        hub = self.hub
        if hub._stopped:
            self.close_connection = True
            return False
        with hub.lock:
            self._entry = {
                "method": self.command,
                "path": unquote(urlsplit(self.path).path),
                "query": urlsplit(self.path).query,
                "range": self.headers.get("Range"),
                "auth": self.headers.get("Authorization") is not None,
            }
            hub.requests.append(self._entry)
            over = len(hub.requests) > hub.max_requests
        if over:
            self._send(503, {"error": "stand-in request budget exhausted"})
            return False
        return True

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                line = self.rfile.readline().strip()
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload=None, headers: dict | None = None, head_only: bool = False) -> None:
        if payload is None:
            body = b""
        elif isinstance(payload, bytes):
            body = payload
        else:
            body = json.dumps(payload).encode()
        self.send_response(status)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        for k, v in hdrs.items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head_only and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str, headers: dict | None = None, head_only=False):
        h = dict(headers or {})
        if code:
            h["X-Error-Code"] = code
        h["X-Error-Message"] = message
        self._send(status, {"error": message}, headers=h, head_only=head_only)

    def _authorized(self) -> bool:
        token = self.hub.token
        if token is None:
            return True
        return self.headers.get("Authorization") == f"Bearer {token}"

    def _repo(self, repo_id: str, head_only: bool = False) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None or (repo.private and not self._authorized()):
            self._error(404, "RepoNotFound", "Repository not found", head_only=head_only)
            return None
        if repo.gated and not self._authorized():
            self._error(401, "GatedRepo", "Access to this repo is restricted", head_only=head_only)
            return None
        return repo

    # -- routing -----------------------------------------------------------------------------------
    def do_HEAD(self):
        if self._record():
            self._route(head_only=True)

    def do_GET(self):
        if self._record():
            self._route()

    def do_POST(self):
        if self._record():
            self._route()

    def do_PUT(self):
        if self._record():
            self._route()

    def _route(self, head_only: bool = False) -> None:
        path = unquote(urlsplit(self.path).path)
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
        if m and self.command == "GET":
            return self._model_info(m.group(1), m.group(2) or "main")
        m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path)
        if m and self.command == "GET":
            return self._tree(m.group(1), m.group(2), m.group(3) or "")
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m and self.command in ("GET", "HEAD"):
            return self._resolve(m.group(1), m.group(2), m.group(3), head_only=head_only)
        if path == "/api/repos/create" and self.command == "POST":
            return self._create_repo()
        m = re.match(r"^/api/models/([^/]+/[^/]+)/branch/(.+)$", path)
        if m and self.command == "POST":
            return self._create_branch(m.group(1), m.group(2))
        if path == "/api/validate-yaml" and self.command == "POST":
            return self._validate_yaml()
        m = re.match(r"^/api/models/([^/]+/[^/]+)/preupload/(.+)$", path)
        if m and self.command == "POST":
            return self._preupload(m.group(1), m.group(2))
        m = re.match(r"^/([^/]+/[^/]+)\.git/info/lfs/objects/batch$", path)
        if m and self.command == "POST":
            return self._lfs_batch(m.group(1))
        m = re.match(r"^/lfs-upload/([0-9a-f]{64})$", path)
        if m and self.command == "PUT":
            return self._lfs_put(m.group(1))
        if path == "/lfs-verify" and self.command == "POST":
            return self._lfs_verify()
        m = re.match(r"^/api/models/([^/]+/[^/]+)/commit/(.+)$", path)
        if m and self.command == "POST":
            return self._commit(m.group(1), m.group(2))
        self._body()
        self._error(404, None, f"stand-in has no route for {self.command} {path}", head_only=head_only)

    # -- read side ---------------------------------------------------------------------------------
    def _model_info(self, repo_id: str, rev: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        sha = repo.resolve(rev)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        files = repo.commits[sha]
        self._send(
            200,
            {
                "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": sha,
                "private": repo.private,
                "gated": repo.gated,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "lastModified": "2025-01-01T00:00:00.000Z",
                "createdAt": "2025-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": p} for p in sorted(files)],
            },
        )

    def _tree(self, repo_id: str, rev: str, sub: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        sha = repo.resolve(rev)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        entries = []
        for p, data in sorted(repo.commits[sha].items()):
            if sub and not p.startswith(sub.rstrip("/") + "/"):
                continue
            entry = {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": p}
            if is_lfs_path(p):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries.append(entry)
        self._send(200, entries)

    def _resolve(self, repo_id: str, rev: str, file: str, head_only: bool) -> None:
        repo = self._repo(repo_id, head_only=head_only)
        if repo is None:
            return
        sha = repo.resolve(rev)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head_only=head_only)
        files = repo.commits[sha]
        if file not in files:
            return self._error(
                404, "EntryNotFound", "Entry not found", headers={"X-Repo-Commit": sha}, head_only=head_only
            )
        data = files[file]
        etag = self.hub.etag(file, data)
        common = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": sha,
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
        }
        if is_lfs_path(file):
            common["X-Linked-Etag"] = f'"{etag}"'
            common["X-Linked-Size"] = str(len(data))
        if head_only:
            self.send_response(200)
            for k, v in common.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return

        with self.hub.lock:
            script = self.hub.faults.get(file)
            fault = script.pop(0) if script else None
        drop = fault[1] if fault and fault[0] == "drop" else None
        if fault and fault[0] == "status":
            return self._error(fault[1], None, "stand-in injected failure")

        start, end = 0, len(data) - 1
        rng = None if self.hub.ignore_range else self.headers.get("Range")
        code = 200
        if rng:
            m = re.match(r"^bytes=(\d+)-(\d*)$", rng.strip())
            if not m or int(m.group(1)) >= len(data):
                return self._error(416, None, "Requested range not satisfiable")
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else len(data) - 1
            end = min(end, len(data) - 1)
            code = 206
        chunk = data[start : end + 1]
        self.send_response(code)
        for k, v in common.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(chunk)))
        if code == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if drop is not None:
            # Send part of the body, then cut the connection: what a dropped home connection looks like.
            self.wfile.write(chunk[:drop])
            self.wfile.flush()
            self._entry["sent"] = min(drop, len(chunk))
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.close_connection = True
            return
        view = memoryview(chunk)
        for i in range(0, len(chunk), 64 * 1024):
            self.wfile.write(view[i : i + 64 * 1024])
        self._entry["sent"] = len(chunk)

    # -- write side --------------------------------------------------------------------------------
    def _need_token(self) -> bool:
        if self._authorized() and (self.hub.token is None or self.headers.get("Authorization")):
            return True
        self._error(401, None, "Invalid credentials in Authorization header")
        return False

    def _create_repo(self) -> None:
        payload = json.loads(self._body() or b"{}")
        if not self._need_token():
            return
        name, org = payload.get("name"), payload.get("organization")
        repo_id = f"{org}/{name}" if org else f"user/{name}"
        if payload.get("type", "model") != "model":
            return self._error(400, None, "stand-in only hosts model repos")
        if repo_id in self.hub.repos:
            return self._send(409, {"error": "You already created this model repo", "url": f"{self.hub.url}/{repo_id}"})
        private = payload.get("visibility") == "private" or bool(payload.get("private"))
        self.hub.add_repo(repo_id, {}, private=private)
        self._send(200, {"url": f"{self.hub.url}/{repo_id}", "name": repo_id, "id": repo_id})

    def _create_branch(self, repo_id: str, branch: str) -> None:
        payload = json.loads(self._body() or b"{}")
        if not self._need_token():
            return
        repo = self._repo(repo_id)
        if repo is None:
            return
        if branch in repo.branches:
            return self._error(409, None, "Reference already exists")
        start = repo.resolve(payload.get("startingPoint") or "main")
        if start is None:
            return self._error(404, "RevisionNotFound", "Invalid starting point")
        repo.branches[branch] = start
        self._send(200, {})

    def _validate_yaml(self) -> None:
        payload = json.loads(self._body() or b"{}")
        content = payload.get("content", "")
        self.hub.validated_cards.append(content)
        errors = check_card_yaml(content)
        if errors:
            return self._send(400, {"errors": [{"message": e} for e in errors], "warnings": []})
        self._send(200, {"errors": [], "warnings": []})

    def _preupload(self, repo_id: str, rev: str) -> None:
        payload = json.loads(self._body() or b"{}")
        if not self._need_token():
            return
        repo = self._repo(repo_id)
        if repo is None:
            return
        sha = repo.resolve(unquote(rev))
        existing = repo.commits[sha] if sha else {}
        files = []
        for f in payload.get("files", []):
            path = f["path"]
            sample = base64.b64decode(f.get("sample", ""))
            lfs = is_lfs_path(path) or b"\0" in sample
            oid = None
            if path in existing:
                data = existing[path]
                oid = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
            files.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
        self._send(200, {"files": files, "commitOid": sha})

    def _lfs_batch(self, repo_id: str) -> None:
        payload = json.loads(self._body() or b"{}")
        if not self._need_token():
            return
        if self._repo(repo_id) is None:
            return
        objects = []
        for obj in payload.get("objects", []):
            oid, size = obj["oid"], obj["size"]
            if oid in self.hub.lfs:
                objects.append({"oid": oid, "size": size})
            else:
                objects.append(
                    {
                        "oid": oid,
                        "size": size,
                        "authenticated": True,
                        "actions": {
                            "upload": {"href": f"{self.hub.url}/lfs-upload/{oid}"},
                            "verify": {"href": f"{self.hub.url}/lfs-verify"},
                        },
                    }
                )
        lfs_json = {"Content-Type": "application/vnd.git-lfs+json"}
        self._send(200, {"transfer": "basic", "objects": objects}, headers=lfs_json)

    def _lfs_put(self, oid: str) -> None:
        data = self._body()
        if hashlib.sha256(data).hexdigest() != oid:
            return self._error(400, None, "sha256 of the uploaded object does not match its oid")
        with self.hub.lock:
            self.hub.lfs[oid] = data
        self._send(200, {})

    def _lfs_verify(self) -> None:
        payload = json.loads(self._body() or b"{}")
        data = self.hub.lfs.get(payload.get("oid"))
        if data is None or len(data) != payload.get("size"):
            return self._error(404, None, "object not found")
        self._send(200, {})

    def _commit(self, repo_id: str, rev: str) -> None:
        body = self._body()
        if not self._need_token():
            return
        repo = self._repo(repo_id)
        if repo is None:
            return
        branch = unquote(rev)
        head = repo.resolve(branch)
        if head is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {branch}")
        files = dict(repo.commits[head])
        for line in body.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "lfsFile":
                data = self.hub.lfs.get(value["oid"])
                if data is None:
                    return self._error(422, None, f"LFS object {value['oid']} was never uploaded")
                files[value["path"]] = data
            elif key == "deletedFile":
                files.pop(value["path"], None)
        sha = self.hub._new_sha(repo_id)
        repo.commits[sha] = files
        repo.branches[branch] = sha
        self._send(200, {"commitUrl": f"{self.hub.url}/{repo_id}/commit/{sha}", "commitOid": sha, "success": True})
