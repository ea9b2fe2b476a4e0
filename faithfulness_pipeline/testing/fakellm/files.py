"""OpenAI's Files endpoints for the fake server (``/v1/files``): uploaded batch inputs and the output and error
files a batch writes (``batches.py``), held in memory.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.wire import json_error, unauthorized

_FILE_PURPOSES: Final = frozenset({"batch", "fine-tune", "assistants", "vision", "user_data", "evals"})


def now() -> int:
    """A ``created_at``-style timestamp: whole seconds."""
    return int(time.time())


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }


class FileStore:
    """The Files endpoints and the files behind them; the batch service owns one and registers its routes."""

    def __init__(self, api_key: str | None) -> None:
        self._api_key = api_key
        self._lock = threading.Lock()
        self._files: dict[str, StoredFile] = {}
        self._seq = 0
        #: "files_uploaded", "file_content_downloads" (GET /v1/files/{id}/content answered 200)
        self._counts: collections.Counter[str] = collections.Counter()

    def new_id(self, prefix: str) -> str:
        """A new file or batch id: the two share one sequence, so ids never repeat across kinds."""
        with self._lock:
            self._seq += 1
            return f"{prefix}fake{self._seq:020d}"

    def add(self, filename: str, purpose: str, data: bytes) -> StoredFile:
        stored = StoredFile(self.new_id("file-"), filename, purpose, data, now())
        with self._lock:
            self._files[stored.id] = stored
        return stored

    def get(self, file_id: str) -> StoredFile | None:
        with self._lock:
            return self._files.get(file_id)

    def count(self, name: str) -> int:
        """One counter: "files_uploaded" or "file_content_downloads"."""
        with self._lock:
            return self._counts[name]

    def reset(self) -> None:
        """Zeroes the counters; the files stay."""
        with self._lock:
            self._counts.clear()

    def add_routes(self, router: web.UrlDispatcher) -> None:
        for prefix in ("/v1", ""):
            router.add_post(f"{prefix}/files", self._upload)
            router.add_get(f"{prefix}/files", self._list_files)
            router.add_get(f"{prefix}/files/{{file_id}}", self._get_file)
            router.add_delete(f"{prefix}/files/{{file_id}}", self._delete_file)
            router.add_get(f"{prefix}/files/{{file_id}}/content", self._file_content)

    async def _upload(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        try:
            form = await request.post()
        except ValueError as exc:
            return json_error(400, f"expected a multipart form with 'file' and 'purpose': {exc}")
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(purpose, str) or purpose not in _FILE_PURPOSES:
            return json_error(400, f"purpose must be one of {sorted(_FILE_PURPOSES)}", "purpose")
        if isinstance(upload, web.FileField):
            data, filename = upload.file.read(), upload.filename
        elif isinstance(upload, str):  # a form field without a filename
            data, filename = upload.encode(), "upload"
        else:
            return json_error(400, "the form has no 'file' part", "file")
        stored = self.add(filename, purpose, data)
        with self._lock:
            self._counts["files_uploaded"] += 1
        return web.json_response(stored.as_json())

    def _find_file(self, request: web.Request) -> StoredFile | web.Response:
        file_id = request.match_info["file_id"]
        found = self.get(file_id)
        if found is None:
            return json_error(404, f"No such File object: {file_id}", "id")
        return found

    async def _list_files(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        with self._lock:
            data = [f.as_json() for f in self._files.values()]
        return web.json_response({"object": "list", "data": data, "has_more": False})

    async def _get_file(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        found = self._find_file(request)
        return found if isinstance(found, web.Response) else web.json_response(found.as_json())

    async def _delete_file(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        found = self._find_file(request)
        if isinstance(found, web.Response):
            return found
        with self._lock:
            self._files.pop(found.id, None)
        return web.json_response({"id": found.id, "object": "file", "deleted": True})

    async def _file_content(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        found = self._find_file(request)
        if isinstance(found, web.Response):
            return found
        with self._lock:
            self._counts["file_content_downloads"] += 1
        return web.Response(body=found.data, content_type="application/octet-stream")
