"""Secrets of a Phoenix URL (issue 52): a password in its user info and an ``api_key`` in its query reach no
refusal of the command line and no metadata of the Dagster event log, which the UI shows to everyone."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.traces.staging import phoenix_project
from faithfulness_pipeline.traces.urls import scrubbed
from tests.traces.fault_server import FaultServer, json_reply
from tests.traces.test_phoenix_faults import run_cli, span

SECRET = "s3cret"


def test_scrubbed_masks_user_info_secret_queries_and_authorization_echoes() -> None:
    text = ("phoenix+http://admin:s3cret-pw@h:6006/projects/p?start=2026-12-01&api_key=s3cret-k x "
            "ftp://u:p@ss@h/ Authorization: Basic YWRtaW46czNjcmV0LXB3 bearer s3cret-t")
    assert scrubbed(text) == ("phoenix+http://***@h:6006/projects/p?start=2026-12-01&api_key=*** x "
                              "ftp://***@h/ Authorization: Basic *** bearer ***")
    assert scrubbed("key echoed: s3cret-key", ["s3cret-key"]) == "key echoed: ***"


@pytest.mark.parametrize("tail", [
    "/not-a-project?api_key=s3cret-k",  # no /projects/NAME
    "/projects/p?start=last-week&api_key=s3cret-k",  # no ISO date
    ":port/projects/p?api_key=s3cret-k",  # no valid port
])
@pytest.mark.parametrize("command", [["score"], ["review", "import"]])
def test_an_input_refusal_shows_no_password_nor_api_key(tail: str, command: list[str], tmp_path: Path) -> None:
    source = f"phoenix+http://admin:s3cret-pw@127.0.0.1{tail}"
    more = ["-o", str(tmp_path / "o.parquet")] if command == ["score"] else [
        "--store", str(tmp_path / "labels.sqlite"), "--scored", str(tmp_path / "none.parquet")]
    result = run_cli(*command, source, *more)
    assert result.returncode == 2, result.stderr
    assert SECRET not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")


def test_the_raw_assets_landing_metadata_shows_no_password(tmp_path: Path, dagster_home: Path) -> None:
    import dagster as dg

    from faithfulness_pipeline.defs import DefsSettings, build_defs
    from faithfulness_pipeline.defs.resources import LandingResource
    from faithfulness_pipeline.defs.warehouse import WarehouseResource

    day = date(2026, 12, 1)
    item = span(1, start_time=f"{day}T10:00:00+00:00", attributes={"llm": {
        "input_messages": [{"message": {"role": "user", "content": "When did it open?"}}],
        "output_messages": [{"message": {"role": "assistant", "content": "In 1932."}}]}})
    with FaultServer(lambda asked: json_reply({"data": [item], "next_cursor": None})) as phoenix:
        landing = f"phoenix+http://admin:s3cret-pw@{phoenix.url.removeprefix('http://')}/projects/p?api_key=s3cret-k"
        settings = DefsSettings(partitions_start=str(day), landing=LandingResource(path=landing),
                                warehouse=WarehouseResource(root=str(tmp_path / "warehouse")))
        defs = build_defs(settings)
        with dg.instance_for_test() as instance:
            result = dg.materialize([*(defs.assets or []), *(defs.asset_checks or [])], partition_key=str(day),
                                    instance=instance, resources=dict(defs.resources or {}),
                                    selection=dg.AssetSelection.assets("raw_conversations"), raise_on_error=False)
    assert result.success
    [raw] = [e for e in result.get_asset_materialization_events()
             if e.asset_key and e.asset_key.to_user_string() == "raw_conversations"]
    metadata = raw.materialization.metadata
    assert metadata["landing"].value == f"phoenix+http://***@{phoenix.url.removeprefix('http://')}/projects/p?api_key=***"
    assert SECRET not in repr(metadata)


@pytest.mark.parametrize("spec", ["phoenix+http://reader:pw-5f1e2d@127.0.0.1:6006/no-project?api_key=key-9c8b7a",
                                  "phoenix+http://reader:pw-5f1e2d@127.0.0.1:6006/projects/p?start=soon&api_key=key-9c8b7a"])
def test_a_phoenix_address_refused_at_its_source_carries_no_credential(spec: str) -> None:
    with pytest.raises(InputError) as refused:
        phoenix_project(spec)
    assert "pw-5f1e2d" not in str(refused.value) and "key-9c8b7a" not in str(refused.value)
