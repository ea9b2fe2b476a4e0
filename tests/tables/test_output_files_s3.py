"""Outputs in an object store are committed together with the others (moto's S3 server on 127.0.0.1): when
one cannot take its place, every target that had moved is put back as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from faithfulness_pipeline.tables import output_files
from faithfulness_pipeline.tables.output_files import OutputError, committed_together
from faithfulness_pipeline.tables.storage import Place
from tests.conftest import S3Bucket


def test_a_failure_after_the_first_target_moved_puts_the_previous_objects_back(s3: S3Bucket, tmp_path: Path) -> None:
    first, second = Place.of(s3.uri("out/scored.parquet")), Place.of(s3.uri("out/claims.parquet"))
    first.write_bytes(b"scored v1")
    second.write_bytes(b"claims v1")
    new_first = first.staging_sibling()
    new_first.write_bytes(b"scored v2")
    missing = second.staging_sibling()  # its upload never happened: taking its place fails
    with pytest.raises(OSError):
        output_files._commit([(new_first, first), (missing, second)])
    assert first.read_bytes() == b"scored v1" and second.read_bytes() == b"claims v1"
    assert s3.objects() == ["out/claims.parquet", "out/scored.parquet"]


def test_a_new_target_placed_before_the_failure_is_removed_again(s3: S3Bucket, tmp_path: Path) -> None:
    fresh, kept = Place.of(s3.uri("out/new.parquet")), Place.of(tmp_path / "kept.parquet")
    kept.write_bytes(b"kept v1")
    staged = fresh.staging_sibling()
    staged.write_bytes(b"new")
    with pytest.raises(OSError):
        output_files._commit([(staged, fresh), (Place.of(tmp_path / ".gone.tmp"), kept)])
    assert not fresh.exists() and kept.read_bytes() == b"kept v1"
    assert s3.objects() == []


def test_a_block_that_fails_writes_nothing_anywhere(s3: S3Bucket, tmp_path: Path) -> None:
    targets = {"-o": s3.uri("out/scored.parquet"), "--claims-out": str(tmp_path / "claims.parquet")}
    used: list[Path] = []

    def interrupted() -> None:
        with committed_together(targets) as tmps:
            used.extend(tmps.values())
            for tmp in tmps.values():
                tmp.write_bytes(b"half")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert s3.objects() == [] and sorted(tmp_path.iterdir()) == [tmp_path / "aws-config", tmp_path / "aws-credentials"]
    assert len(used) == 2 and not any(tmp.exists() for tmp in used)


def test_s3_and_local_targets_appear_together(s3: S3Bucket, tmp_path: Path) -> None:
    targets = {"-o": s3.uri("out/scored.parquet"), "--claims-out": str(tmp_path / "claims.parquet")}
    with committed_together(targets) as tmps:
        tmps["-o"].write_bytes(b"scored")
        tmps["--claims-out"].write_bytes(b"claims")
        assert s3.objects() == [] and not (tmp_path / "claims.parquet").exists()
    assert Place.of(targets["-o"]).read_bytes() == b"scored" and (tmp_path / "claims.parquet").read_bytes() == b"claims"
    assert s3.objects() == ["out/scored.parquet"]


def test_a_folder_in_the_way_at_commit_leaves_the_previous_object(s3: S3Bucket) -> None:
    target = Place.of(s3.uri("out/scored.parquet"))
    target.write_bytes(b"v1")
    targets = {"-o": target.uri, "--claims-out": s3.uri("out/claims")}

    def folder_appears() -> None:
        with committed_together(targets) as tmps:
            for tmp in tmps.values():
                tmp.write_bytes(b"v2")
            Place.of(s3.uri("out/claims/other.parquet")).write_bytes(b"someone else's")

    with pytest.raises(OutputError, match="a folder is in the way"):
        folder_appears()
    assert target.read_bytes() == b"v1"
    assert s3.objects() == ["out/claims/other.parquet", "out/scored.parquet"]
