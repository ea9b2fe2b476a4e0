"""What installing with bytecode saves each process the suite starts (issue 30 item 2).

    uv run --frozen --group dev python bench/bytecode.py [--runs 3]

A CLI run, a ``dg launch`` and every step process of a Dagster run import litellm and dagster. With the
dependencies' bytecode written at install (uv's ``compile-bytecode`` setting in pyproject.toml, as the README's commands and
``.ci/run`` set it), an import reads it; on a machine that sets ``PYTHONDONTWRITEBYTECODE`` and installed
without it, every process compiles both from source again. The second case is played by pointing
``PYTHONPYCACHEPREFIX`` at an empty folder: Python then finds no bytecode and, with
``PYTHONDONTWRITEBYTECODE``, writes none. Prints a markdown section: CPU seconds of one such import, median
of ``--runs``, both ways, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

IMPORT = "import litellm, dagster"


def _cpu_of_import(env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", IMPORT], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with_bytecode, from_source = [], []
    for _ in range(args.runs):  # alternating, so that a busy moment of the machine hits both
        with_bytecode.append(_cpu_of_import(base))
        with tempfile.TemporaryDirectory() as empty:
            from_source.append(_cpu_of_import({**base, "PYTHONPYCACHEPREFIX": empty}))
    kept, compiled = statistics.median(with_bytecode), statistics.median(from_source)
    print("## Bytecode at install: CPU of one process's `import litellm, dagster`\n")
    print(f"`uv run --frozen --group dev python bench/bytecode.py --runs {args.runs}` (medians of {args.runs})\n")
    print("| dependencies | CPU s per process |")
    print("|---|---:|")
    print(f"| with bytecode (installed with uv's compile-bytecode) | {kept:.2f} |")
    print(f"| compiled from source (PYTHONDONTWRITEBYTECODE, no bytecode) | {compiled:.2f} |")
    print(f"\nCompiling from source costs {compiled / kept:.2f}x the CPU of reading the bytecode, in every CLI, "
          "`dg` and step process.")


if __name__ == "__main__":
    main()
