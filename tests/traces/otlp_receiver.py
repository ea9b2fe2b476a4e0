"""An OTLP/HTTP logs receiver for tests: a thread on 127.0.0.1 that decodes each request body as the real
OTLP protobuf (``ExportLogsServiceRequest``) and keeps the log records with their trace and span ids."""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


@dataclass
class Record:
    trace_id: str
    span_id: str
    event_name: str
    attributes: dict[str, Any]
    service: str


@dataclass
class OtlpReceiver:
    records: list[Record] = field(default_factory=list)
    requests: int = 0
    headers: list[dict[str, str]] = field(default_factory=list)
    #: seconds each request takes to answer (a Collector under load)
    delay_s: float = 0.0

    def __enter__(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                time.sleep(receiver.delay_s)
                receiver.take(self.path, body, dict(self.headers))
                reply = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: Any) -> None:
                return None

        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def take(self, path: str, body: bytes, headers: dict[str, str]) -> None:
        assert path == "/v1/logs", path
        request = ExportLogsServiceRequest()
        request.ParseFromString(body)
        with self._lock:  # requests may come in parallel
            self._keep(request, headers)

    def _keep(self, request: ExportLogsServiceRequest, headers: dict[str, str]) -> None:
        self.requests += 1
        self.headers.append(headers)
        for resource_logs in request.resource_logs:
            service = {a.key: _value(a.value) for a in resource_logs.resource.attributes}.get("service.name", "")
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    self.records.append(Record(record.trace_id.hex(), record.span_id.hex(), record.event_name,
                                               {a.key: _value(a.value) for a in record.attributes}, service))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
