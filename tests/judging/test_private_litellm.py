"""The two litellm internals the token counter relies on (litellm has no public way to name the encoding it
counts a model with) still exist in the installed litellm: when litellm is upgraded or they move, this
fails loudly instead of the judge quietly counting through litellm's slower public token_counter."""

from __future__ import annotations

from importlib.metadata import version

from faithfulness_pipeline.judging.llm.card import (
    CHECKED_WITH_LITELLM,
    huggingface_kind,
    import_litellm,
    tiktoken_encoding,
    token_counter,
)


def test_litellm_is_the_version_the_internals_were_checked_with() -> None:
    installed = version("litellm")
    assert installed == CHECKED_WITH_LITELLM, (
        f"litellm {installed} is installed, the token counter's internals were checked with {CHECKED_WITH_LITELLM}: "
        "run this file's tests, then set CHECKED_WITH_LITELLM in faithfulness_pipeline/judging/llm/card.py"
    )


def test_the_fast_path_finds_the_encoding_litellm_counts_with() -> None:
    litellm = import_litellm()
    for model in ("openai/gpt-4o-mini", "openai/a-local-name", "anthropic/claude-3-5-haiku-20241022"):
        encoding = tiktoken_encoding(model)
        assert encoding is not None, f"litellm.utils.select_tokenizer or openai_tokenizer_encoding moved ({model})"
        text = "Der Lagerbestand sank um 12 %. 仓库里还有两百件。 재고가 줄었다."
        assert token_counter(model)(text) == litellm.token_counter(model=model, text=text)
    assert tiktoken_encoding("openai/gpt-4o-mini").name == "o200k_base"


def test_models_litellm_would_fetch_a_tokenizer_for_are_recognised() -> None:
    # The names litellm 1.110.2 maps to a Hugging Face tokenizer: counted with gpt-4o's encoding instead.
    assert huggingface_kind("meta-llama/Meta-Llama-3-8B") == "llama3", (
        "litellm.utils.huggingface_tokenizer_kind moved: such models would fetch a tokenizer from the hub"
    )
    assert huggingface_kind("openai/gpt-4o-mini") is None


def test_the_lone_encoding_is_loaded_from_where_litellm_points_tiktoken() -> None:
    # card._python_encoding repeats litellm's default_encoding module (without its cl100k_base) and uses
    # litellm's Rust-or-Python routing names: both must still be litellm's.
    import os

    from litellm.litellm_core_utils import default_encoding
    from litellm.rust_bridge.catalog import decision
    from litellm.rust_bridge.configuration import Decision
    from litellm.rust_bridge.tokenizer import TIKTOKEN_CONTEXT

    from faithfulness_pipeline.judging.llm.card import litellm_tiktoken_dir

    assert os.environ["TIKTOKEN_CACHE_DIR"] == default_encoding.cache_dir == litellm_tiktoken_dir()
    assert decision(TIKTOKEN_CONTEXT) in tuple(Decision)


def test_litellm_selects_tiktoken_for_every_model_it_knows_no_hugging_face_tokenizer_for() -> None:
    # card.tiktoken_encoding asks select_tokenizer (which loads cl100k_base) only about the others.
    from litellm.utils import select_tokenizer

    for model in ("openai/gpt-4o-mini", "gpt-4", "openai/a-local-name", "mistral/mistral-small", "gemini/gemini-pro"):
        assert huggingface_kind(model) is None
        assert select_tokenizer(model)["type"] == "openai_tokenizer", model


def test_the_stream_errors_the_judge_reads_still_say_what_they_said() -> None:
    # requests.REPEATING and requests.UNFINISHED are the words of two litellm errors that end a stream: one that
    # repeats a piece (a model in a loop: the judge takes what came as a cut reply) and one that ended without
    # a finish_reason (the judge takes what came as the reply). Other words would make both transient failures.
    import inspect

    from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper

    from faithfulness_pipeline.judging.llm.streams import REPEATING, UNFINISHED

    assert REPEATING in inspect.getsource(CustomStreamWrapper.raise_on_model_repetition)
    assert str(CustomStreamWrapper._stream_eof_error()) == UNFINISHED
