"""The HTML report: what it holds, that untrusted text stays text, and the `report` command."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.report import build_report
from faithfulness_pipeline.report.data import load_scored
from faithfulness_pipeline.report.render import num

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "offline_sample" / "scored.parquet"
OFFLINE = frozenset({"offline-lexical-v1"})

HOSTILE_ANSWER = "</svg><script>alert('answer')</script> The tower is 330 metres tall. <img src=x onerror=alert(1)>"
HOSTILE_PASSAGE = "The tower is 300 metres tall.</div><script>alert('passage')</script>"
HOSTILE_MODEL = "</svg><script>alert('model')</script>"


class Page(HTMLParser):
    """The elements and the visible text of a page, as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scored table (scored for real by the offline judge) whose answer, passage and model hold markup."""
    frame = pl.DataFrame({
        "conversation_id": ["evil-1", "zh-1", "ko-1"],
        "created_at": [dt.datetime(2026, 11, 24, 9, tzinfo=dt.UTC)] * 3,
        "model": [HOSTILE_MODEL, "模型<b>乙</b>", "gpt-4o-mini"],
        "input": ["<script>alert('question')</script>How tall?", "电池容量是多少？", "배터리 용량은?"],
        "output": [HOSTILE_ANSWER, "电池容量是4000毫安时。", "배터리 용량은 5000mAh입니다."],
        "context": [[HOSTILE_PASSAGE], ["电池容量是5000毫安时。"], ["배터리 용량은 5000mAh입니다."]],
    })
    out = tmp_path_factory.mktemp("hostile") / "scored.parquet"
    score_frame(frame).write_parquet(out)
    return out


def test_untrusted_text_renders_as_text(hostile: Path, tmp_path: Path) -> None:
    path, data = build_report(str(hostile), tmp_path / "r.html", baseline_judges=OFFLINE)
    html = path.read_text(encoding="utf-8")
    page = parse(html)
    # no element and no event handler came from the data: the page has no script at all
    assert "script" not in page.tags and "img" not in page.tags
    assert not [name for name, _ in page.attributes if name.startswith("on")]
    text = "".join(page.text)
    for needle in (HOSTILE_ANSWER, "<script>alert('passage')</script>", "<script>alert('question')</script>"):
        assert needle in text  # shown literally, as the reader should see it
    assert HOSTILE_MODEL in text and "模型<b>乙</b>" in text
    # each chart is one well-formed SVG: the model's "</svg>" closed none of them early
    assert page.tags.count("svg") == 4
    for chunk in html.split("<svg ")[1:]:
        ET.fromstring("<svg " + chunk.split("</svg>", 1)[0] + "</svg>")
    assert "&lt;/svg&gt;&lt;script&gt;" in html  # the model name inside the chart legend, escaped
    assert "evil-1" in [row["row_key"] for row in data.worst]


def test_the_report_holds_every_section(tmp_path: Path) -> None:
    scored = pl.read_parquet(GOLDEN)
    path, data = build_report(str(GOLDEN), tmp_path / "r.html", baseline_judges=OFFLINE, worst=5)
    html = path.read_text(encoding="utf-8")
    page = parse(html)
    text = "".join(page.text)
    # per day x model: one table row per group
    groups = scored.select(pl.col("created_at").dt.date(), "model").unique().height
    assert data.daily.height == groups
    assert html.count('<tr><td>2026-11-2') == groups
    # the worst answers, in order, each with its claims marked
    ok = scored.filter(pl.col("hallucination_score") > 0)
    expected = ok.sort(["hallucination_score", "faithfulness_score", "row_key"],
                       descending=[True, False, False]).get_column("row_key").head(5).to_list()
    assert [row["row_key"] for row in data.worst] == expected
    keys = [value for name, value in page.attributes if name == "data-row-key"]
    assert keys == expected
    assert "claim mark-contradicted" in html and "2008" in text  # flat-001's contradicted claim
    assert "The first iPhone was announced on January 9, 2007." in text  # its evidence passage
    # judge, prompt version and the offline warning; no calibration given
    assert 'id="baseline-warning"' in html and "offline-lexical-2" in text
    assert 'id="no-calibration"' in html
    # nothing that would fetch: no URL to load, no font
    assert "http://" not in html.replace('="http://www.w3.org/', "") and "https://" not in html
    assert "@font-face" not in html and "<link" not in html and " src=" not in html
    assert not re.findall(r"url\((?!#)", html)  # only references to the page's own clip paths
    # Chinese and Korean text arrives as itself
    assert "电池" in text or "電池" in text
    assert any("\uac00" <= ch <= "\ud7a3" for ch in text)


def test_no_warning_for_an_llm_judge_and_calibration_shown(tmp_path: Path) -> None:
    scored = pl.read_parquet(GOLDEN).with_columns(pl.lit("openai/gpt-4o-mini").alias("judge_model"))
    scored.write_parquet(tmp_path / "scored.parquet")
    calibration = pl.DataFrame({"language": ["en", "<i>zh</i>"], "balanced_accuracy": [0.91, 0.8712345]})
    calibration.write_parquet(tmp_path / "calibration.parquet")
    path, _ = build_report(str(tmp_path / "scored.parquet"), tmp_path / "r.html", baseline_judges=OFFLINE,
                           calibration=str(tmp_path / "calibration.parquet"))
    html = path.read_text(encoding="utf-8")
    assert "baseline-warning" not in html and "openai/gpt-4o-mini" in html
    assert 'id="calibration"' in html and "0.871" in html and "&lt;i&gt;zh&lt;/i&gt;" in html


def test_the_calibrate_commands_table_shows_its_headline_measures_with_intervals(tmp_path: Path) -> None:
    """The calibrate command's table has ~45 columns, which ran off the page: the section shows the headline
    measures, each with its interval, and says the rest are in the table."""
    done = subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", "calibrate", "--labelled",
                           str(ROOT / "sample_labelled"), "-o", str(tmp_path / "calibration.parquet")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    table = pl.read_parquet(tmp_path / "calibration.parquet")
    assert table.width > 30
    path, _ = build_report(str(GOLDEN), tmp_path / "r.html", baseline_judges=OFFLINE,
                           calibration=str(tmp_path / "calibration.parquet"))
    html = path.read_text(encoding="utf-8")
    section = html[html.index('id="calibration"'):html.index("</table>", html.index('id="calibration"'))]
    headers = re.findall(r"<th>([^<]*)</th>", section)
    assert headers[:4] == ["judge", "prompt version", "group by", "group"] and "balanced accuracy" in headers
    assert len(headers) <= 12 and "tp" not in headers and "bootstrap seed" not in headers
    overall = table.filter(pl.col("group_by") == "all").row(0, named=True)
    low, high = overall["balanced_accuracy_low"], overall["balanced_accuracy_high"]
    assert f"{num(overall['balanced_accuracy'])} ({num(low)} – {num(high)})" in section, section[:2000]
    assert "more columns" in html


def test_a_scored_tables_day_follows_the_time_zone(tmp_path: Path) -> None:
    late = dt.datetime(2026, 11, 24, 23, 30, tzinfo=dt.UTC)
    scored = pl.read_parquet(GOLDEN).head(1).with_columns(pl.lit(late).alias("created_at"))
    scored.write_parquet(tmp_path / "s.parquet")
    utc = load_scored(str(tmp_path / "s.parquet")).get_column("day").to_list()
    seoul = load_scored(str(tmp_path / "s.parquet"), timezone="Asia/Seoul").get_column("day").to_list()
    assert (utc, seoul) == ([dt.date(2026, 11, 24)], [dt.date(2026, 11, 25)])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", "report", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_report_command(tmp_path: Path) -> None:
    done = _cli(str(GOLDEN), "-o", str(tmp_path / "out" / "report.html"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "report.html").stat().st_size > 10_000
    assert "17 answers over 2026-11-24 .. 2026-11-26" in done.stderr
    not_scored = _cli(str(ROOT / "sample_data" / "flat"), "-o", str(tmp_path / "x.html"))
    assert not_scored.returncode == 2 and "is not a scored table" in not_scored.stderr
    assert "Traceback" not in not_scored.stderr and not (tmp_path / "x.html").exists()
    bad_zone = _cli(str(GOLDEN), "-o", str(tmp_path / "x.html"), "--timezone", "Mars/Olympus")
    assert bad_zone.returncode == 2 and "FP_TIMEZONE" in bad_zone.stderr
    # issue 40: a model column the table lacks was silently ignored (every row drawn as one unnamed model)
    no_column = _cli(str(GOLDEN), "-o", str(tmp_path / "x.html"), "--model-col", "deployment")
    assert no_column.returncode == 2 and "no column 'deployment' (--model-col)" in no_column.stderr
    assert "Traceback" not in no_column.stderr and not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("case", ["empty", "all errors"])
def test_a_table_without_scores_still_gives_a_page(tmp_path: Path, case: str) -> None:
    golden = pl.read_parquet(GOLDEN)
    table = golden.head(0) if case == "empty" else golden.with_columns(
        pl.lit("error").alias("status"), pl.lit("judge failed").alias("error"),
        pl.lit(None, dtype=pl.Float64).alias("hallucination_score"),
        pl.lit(None, dtype=pl.Float64).alias("faithfulness_score"),
        pl.lit(None, dtype=golden.schema["verdicts"]).alias("verdicts"),
    )
    table.write_parquet(tmp_path / "s.parquet")
    path, data = build_report(str(tmp_path / "s.parquet"), tmp_path / "r.html")
    html = path.read_text(encoding="utf-8")
    assert html.count("<svg ") == 4 and data.worst == [] and "No scored answers." in html
    errors = 0 if case == "empty" else golden.height
    assert f'<div class="value">{errors}</div><div class="label">error rows</div>' in html


def test_a_table_whose_long_answers_have_no_claims_is_flagged(tmp_path: Path) -> None:
    golden = pl.read_parquet(GOLDEN)
    clean, _ = build_report(str(GOLDEN), tmp_path / "clean.html", baseline_judges=OFFLINE)
    assert "judge-warning" not in clean.read_text(encoding="utf-8")
    # the same rows as a judge that extracted nothing would leave them: no claims, both scores 0
    silent = golden.with_columns(
        pl.lit([], dtype=golden.schema["claims"]).alias("claims"),
        pl.lit([], dtype=golden.schema["verdicts"]).alias("verdicts"),
        *[pl.lit(0, dtype=pl.Int32).alias(c) for c in ("n_claims", "n_supported", "n_contradicted",
                                                        "n_unsupported", "n_speculative")],
    )
    silent.write_parquet(tmp_path / "silent.parquet")
    path, data = build_report(str(tmp_path / "silent.parquet"), tmp_path / "silent.html", baseline_judges=OFFLINE)
    assert len(data.warnings) == 1 and "came back with no claims" in data.warnings[0]
    text = "".join(parse(path.read_text(encoding="utf-8")).text)
    assert "came back with no claims" in text and "max_zero_claim_share 0.5" in text


def test_the_verdict_mix_counts_every_claim_once_under_its_first_mark(tmp_path: Path) -> None:
    golden = pl.read_parquet(GOLDEN)
    expected: dict[str, int] = {}
    for verdicts in golden.filter(pl.col("status") == "ok").get_column("verdicts").to_list():
        for v in verdicts or []:
            mark = ("contradicted" if v["verdict"] == "contradicted" else "speculative" if v["speculative"]
                    else v["verdict"])
            expected[mark] = expected.get(mark, 0) + 1
    _, data = build_report(str(GOLDEN), tmp_path / "r.html", baseline_judges=OFFLINE)
    got: dict[str, int] = {}
    for mark, n in data.verdict_mix.group_by("mark").agg(pl.col("claims").sum()).iter_rows():
        got[mark] = int(n)
    assert got == expected and sum(got.values()) == int(golden.filter(pl.col("status") == "ok")["n_claims"].sum())


def test_a_sampled_table_shows_what_was_judged_and_the_intervals(tmp_path: Path) -> None:
    answers = ["The battery holds 5000 mAh.", "The battery holds 4000 mAh.", "电池容量是5000毫安时。",
               "배터리 용량은 4000mAh입니다."]
    n = 240
    frame = pl.DataFrame({
        "conversation_id": [f"s-{i}" for i in range(n)],
        "created_at": [dt.datetime(2026, 11, 24, 9, tzinfo=dt.UTC)] * n,
        "model": ["gpt-4o-mini"] * n,
        "output": [f"{answers[i % 4]} Order {i} shipped." for i in range(n)],
        "context": [["The battery holds 5000 mAh.", "电池容量是5000毫安时。", "배터리 용량은 5000mAh입니다."]] * n,
    })
    source = tmp_path / "scored.parquet"
    score_frame(frame, config=ScoringConfig(sample_rate=0.4)).write_parquet(source)
    path, data = build_report(str(source), tmp_path / "r.html", baseline_judges=OFFLINE)
    html = path.read_text(encoding="utf-8")
    text = "".join(parse(html).text)
    row = data.daily.row(0, named=True)
    assert row["answers"] == n and 0 < row["sampled_answers"] < n
    assert "judged (sample)" in text  # in the headline and as a column of the daily table
    assert "fill-opacity: 0.15" in html  # the trend chart's interval bands
    # the daily table gives each mean and share with its 95 % interval
    assert re.search(r"\d\.\d+ \(\d\.\d+ – \d\.\d+\)", text), text[:2000]
    assert re.search(r"\d+\.\d% \(\d+\.\d% – \d+\.\d%\)", text)


def test_the_models_are_compared_in_words_with_their_intervals(tmp_path: Path) -> None:
    """The golden sample holds two answering models: a sentence per score says whether their difference is
    larger than its noise, with the numbers core.compare gives for the same rows."""
    from faithfulness_pipeline.core.compare import compare_segments

    path, data = build_report(str(GOLDEN), tmp_path / "r.html", baseline_judges=OFFLINE)
    text = "".join(parse(path.read_text(encoding="utf-8")).text)
    scored = pl.read_parquet(GOLDEN)
    table = compare_segments(scored, "model", groups=["language"]).filter(pl.col("group_by") == "all")
    assert len(data.comparisons) >= 2 and 'id="comparisons"' in path.read_text(encoding="utf-8")
    for row in table.iter_rows(named=True):
        line = next(c for c in data.comparisons if c.startswith(row["candidate_group"]) and f"mean {row['score']}" in c)
        assert f"{row['mean_candidate']:.3f}" in line and line in text
        assert ("too few answers" in line) if row["verdict"] == "too few rows" else (
            f"{row['difference']:+.3f}" in line and ("larger than" in line) == (row["verdict"] == "larger than noise"))


def test_a_table_read_in_small_chunks_gives_the_report_of_the_table_read_at_once(tmp_path: Path) -> None:
    """The report folds its rows chunk by chunk (a month of millions in bounded memory): read 37 rows at a
    time from two files, every number, distribution, verdict mix, comparison and worst answer is the one the
    same rows give read in one chunk."""
    from faithfulness_pipeline.report.data import rows_of, scored_chunks
    from faithfulness_pipeline.report.summary import summarise_chunks
    from faithfulness_pipeline.settings.scoring import ScoringSettings

    golden = pl.read_parquet(GOLDEN)
    copies = pl.concat([
        golden.with_columns(pl.col("row_key") + f"-{i}", pl.col("created_at") + dt.timedelta(days=i % 5))
        for i in range(24)
    ])
    folder = tmp_path / "month"
    folder.mkdir()
    half = copies.height // 2
    copies.head(half).write_parquet(folder / "a.parquet", row_group_size=50)
    copies.tail(copies.height - half).write_parquet(folder / "b.parquet")
    scoring = ScoringSettings()

    def report(rows: int) -> object:
        chunks = scored_chunks(str(folder), columns=("model", "language"), answer_column=scoring.output_column,
                               rows=rows)
        return summarise_chunks(chunks, source=str(folder), scoring=scoring, worst=7,
                                full_rows=lambda keys, columns: rows_of(str(folder), keys, columns))

    small, whole = report(37), report(1_000_000)
    assert small.scored_rows == whole.scored_rows == copies.height
    assert small.daily.height == copies.select(pl.col("created_at").dt.date(), "model").unique().height > 5
    floats = [c for c, d in small.daily.schema.items() if d == pl.Float64]
    assert small.daily.drop(floats).equals(whole.daily.drop(floats))
    for column in floats:
        assert small.daily.get_column(column).to_list() == pytest.approx(whole.daily.get_column(column).to_list()), column
    assert small.distribution.equals(whole.distribution)
    assert int(small.distribution.get_column("answers").sum()) == 2 * copies.filter(
        pl.col("status") == "ok", pl.col("hallucination_score").is_not_null()).height
    assert small.verdict_mix.equals(whole.verdict_mix) and small.claims_per_answer.equals(whole.claims_per_answer)
    assert small.judges == whole.judges and small.comparisons == whole.comparisons and small.comparisons
    assert small.worst == whole.worst
    # their texts and claims are read for these rows alone
    assert all(r["answer"] for r in small.worst) and any(r["claims"] for r in small.worst)


def test_undated_answers_are_named_and_counted_and_an_absent_time_column_is_refused(tmp_path: Path) -> None:
    # issue 52: empty times became a day named "None", without a word; a --timestamp-col the table lacks fell
    # back to scored_at silently
    scored = pl.read_parquet(GOLDEN)
    undated = scored.with_columns(pl.when(pl.int_range(pl.len()) % 3 == 0).then(None)
                                  .otherwise(pl.col("created_at")).alias("created_at"))
    undated.write_parquet(tmp_path / "undated.parquet")
    done = _cli(str(tmp_path / "undated.parquet"), "-o", str(tmp_path / "undated.html"))
    assert done.returncode == 0, done.stderr
    assert "(6 with no date: their own 'undated' rows)" in done.stderr
    html = (tmp_path / "undated.html").read_text()
    assert "None" not in html and html.count("undated") >= 2
    absent = _cli(str(GOLDEN), "-o", str(tmp_path / "x.html"), "--timestamp-col", "sent_at")
    assert absent.returncode == 2 and "no column 'sent_at' (--timestamp-col)" in absent.stderr
    assert not (tmp_path / "x.html").exists()


def test_a_page_that_cannot_be_written_names_the_output_and_leaves_nothing(tmp_path: Path) -> None:
    # issue 52: a full disk ended in exit 2 and an errno, without naming the page
    import resource

    def small_files() -> None:  # in the child only: a disk that fills after 20 kB
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    target = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", "report", str(GOLDEN), "-o", str(target)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
                          preexec_fn=small_files)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"cannot write the report {str(target)!r}" in lines[0] and "nothing was written" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_the_worst_answers_are_not_padded_with_answers_scored_0(tmp_path: Path) -> None:
    """Asked for more worst answers than there are answers with a hallucinated claim: only those are shown, not
    zero-score (or empty) answers as blank boxes (issue 54)."""
    scored = pl.read_parquet(GOLDEN)
    flagged = scored.filter(pl.col("hallucination_score") > 0).height
    assert 0 < flagged < scored.height
    _, data = build_report(str(GOLDEN), tmp_path / "r.html", baseline_judges=OFFLINE, worst=scored.height)
    assert len(data.worst) == flagged
    assert all(row["hallucination_score"] > 0 for row in data.worst)
