"""The web view's pages over a real SQLite trail: what each shows, filters, paging, escaping, headers."""

from __future__ import annotations

import re
import sqlite3

import orjson
from starlette.testclient import TestClient
from ui_helpers import rows_of, view_of
from ui_trail import SCRIPT, Trail

from mcp_interceptors.ui import Limits


def test_recent_calls_list_every_call_newest_first_with_verdict_decider_and_latency(view: TestClient) -> None:
    page = view.get("/")
    assert page.status_code == 200
    rows = rows_of(page.text)
    assert [row["key"] for row in rows] == [
        "c-open",
        "c-upstream",
        "c-refused",
        "c-drift",
        "c-shadow",
        "c-denied",
        "c-mutated",
    ]
    by_key = {row["key"]: row for row in rows}
    assert by_key["c-denied"]["verdict"] == "denied" and by_key["c-denied"]["decided"] == "tool-policy"
    assert by_key["c-refused"]["verdict"] == "refused" and by_key["c-refused"]["decided"] == "gateway"
    assert by_key["c-upstream"]["verdict"] == "error" and by_key["c-upstream"]["decided"] == "upstream"
    assert by_key["c-open"]["verdict"] == "open"
    assert by_key["c-shadow"]["decided"] == "pii (audit)"
    assert by_key["c-mutated"]["latency"] == "1.00 s"  # the trail's legs are a second apart
    assert by_key["c-denied"]["latency"] == "chain 0.2 ms"
    assert by_key["c-denied"]["principal"] == "user:bob" and by_key["c-shadow"]["upstream"] == "archive"
    assert by_key["c-mutated"]["target"] == "echo" and by_key["c-refused"]["target"] == f"no_such_{SCRIPT}"
    assert (by_key["c-open"]["method"], by_key["c-open"]["target"]) == ("resources/read", "notes://groceries")


def test_filters_narrow_the_table(view: TestClient) -> None:
    def keys(query: str) -> list[str]:
        return [row["key"] for row in rows_of(view.get(f"/?{query}").text)]

    assert keys("verdict=denied") == ["c-denied"]
    assert keys("guard=tool-policy") == ["c-denied"]  # where it only passed, it did not act
    assert keys("guard=secrets") == ["c-mutated"]
    assert keys("upstream=archive") == ["c-drift", "c-shadow"]
    assert keys("principal=bob") == ["c-denied"]
    assert keys("q=went+away") == ["c-upstream"]
    assert keys("verdict=allowed&upstream=archive") == ["c-drift", "c-shadow"]
    assert keys("target=groceries") == ["c-open"]  # part of a uri
    assert keys("target=NO_SUCH") == ["c-refused"]  # any case
    assert keys("target=echo&verdict=denied") == ["c-denied"]
    assert keys("verdict=nonsense") == keys("")  # an unknown verdict is no filter
    assert "No calls match these filters" in view.get("/?q=nothing-like-this").text


def test_pages_walk_back_listing_each_call_once(trail: Trail) -> None:
    with view_of(trail, limits=Limits(page=3, scan=100)) as small:
        seen: list[str] = []
        query = ""
        for _ in range(10):
            page = small.get(f"/?{query}").text
            seen += [row["key"] for row in rows_of(page)]
            older = re.search(r'href="/\?([^"]*)" class="older"', page)
            if older is None:
                assert "The start of the trail." in page
                break
            query = older.group(1).replace("&amp;", "&")
        assert seen == ["c-open", "c-upstream", "c-refused", "c-drift", "c-shadow", "c-denied", "c-mutated"]


def test_a_page_reads_at_most_its_scan_limit_and_says_how_far_it_looked(trail: Trail) -> None:
    with view_of(trail, limits=Limits(page=50, scan=4)) as small:
        page = small.get("/?verdict=denied").text
    assert rows_of(page) == []
    assert "Looked through 4 records, back to" in page and 'class="older"' in page


def test_the_detail_page_shows_records_diff_shadow_drift_and_signature_status(view: TestClient, trail: Trail) -> None:
    mutated = view.get("/calls/c-mutated").text
    assert mutated.count("signature valid") == 3  # the headline and both records
    assert "receipt valid" in mutated
    assert "Mutation by secrets" in mutated and "/params/arguments/text" in mutated
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt; [REDACTED]" in mutated
    assert SCRIPT not in mutated  # escaped everywhere, raw JSON included
    shadow = view.get("/calls/c-shadow").text
    assert "Shadow mutation by pii (audit mode: recorded, not applied)" in shadow and "[EMAIL]" in shadow
    assert "DRIFT: what was dispatched is not what the chain approved" in view.get("/calls/c-drift").text
    refused = view.get("/calls/c-refused").text
    assert "Unknown tool: &lt;script&gt;" in refused and SCRIPT not in refused
    record_id = trail.records["denied"][0]
    assert "tool-policy" in view.get(f"/calls/{record_id}").text  # a record id finds its call
    assert view.get("/calls/no-such-call").status_code == 404
    assert view.get("/calls/bad%20key").status_code == 404


def test_a_tampered_record_is_shown_invalid_naming_the_problem(view: TestClient, trail: Trail) -> None:
    record_id = trail.records["denied"][0]
    with sqlite3.connect(trail.store) as db:
        (raw,) = db.execute("SELECT record FROM audit_records WHERE id = ?", (record_id,)).fetchone()
        record = orjson.loads(raw)
        record["body"]["decision"] = "allow"
        db.execute("UPDATE audit_records SET record = ? WHERE id = ?", (orjson.dumps(record).decode(), record_id))
    page = view.get("/calls/c-denied").text
    assert "✗ INVALID" in page
    assert f"{record_id}: edited (content does not match its hash)" in page
    assert "signature valid" not in page
    # the calls next to it in the chain still verify: only the edited record is named
    assert "signature valid" in view.get("/calls/c-shadow").text


def test_a_deleted_neighbour_breaks_the_chain_where_audit_verify_says(view: TestClient, trail: Trail) -> None:
    first, second = trail.records["shadow"]
    with sqlite3.connect(trail.store) as db:
        db.execute("DELETE FROM audit_records WHERE id = ?", (first,))
    page = view.get(f"/calls/{second}").text
    assert f"{second}: deleted (seq {int(first.rsplit('-')[1])} missing before it)" in page


def test_every_response_carries_a_content_security_policy_and_no_store(view: TestClient) -> None:
    for path in ("/", "/calls/c-denied", "/fragment/calls", "/static/ui.js"):
        response = view.get(path)
        assert response.status_code == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert response.headers["cache-control"] == "no-store"
    assert "<script>" not in view.get("/").text.replace('<script src="/static/ui.js" defer></script>', "")


def test_a_foreign_host_header_is_refused(view: TestClient) -> None:
    assert view.get("/", headers={"host": "evil.example"}).status_code == 421
    assert view.get("/", headers={"host": "localhost:8765"}).status_code == 200


def test_f11_a_host_whose_port_is_not_digits_is_refused(view: TestClient) -> None:
    for forged in ("localhost:evil", "127.0.0.1:8765@evil.com", "localhost:8765x"):
        assert view.get("/", headers={"host": forged}).status_code == 421, forged


def test_the_fragments_and_charts_render(view: TestClient) -> None:
    fragment = view.get("/fragment/calls?verdict=denied").text
    assert [row["key"] for row in rows_of(fragment)] == ["c-denied"]
    charts = view.get("/fragment/charts").text
    assert "Calls by upstream" in charts and "<polyline" in charts
    assert re.search(r"notes <b>\d+</b>", charts) and re.search(r"archive <b>2</b>", charts)
    assert re.search(r"<td>tool-policy</td><td>1</td>", charts)  # blocked once


def test_a_trace_id_is_shown_when_a_record_carries_one(view: TestClient, trail: Trail) -> None:
    """The gateway's records will carry `trace_id` with tracing on (issue 28, part 1): the view shows it. This
    record gets one by hand, so it also shows as edited: its signature covers what the writer wrote."""
    assert '<code class="trace">' not in view.get("/calls/c-denied").text
    record_id = trail.records["denied"][0]
    with sqlite3.connect(trail.store) as db:
        (raw,) = db.execute("SELECT record FROM audit_records WHERE id = ?", (record_id,)).fetchone()
        record = orjson.loads(raw)
        record["body"]["trace_id"] = "4bf92f3577b34da6a3ce929d0e0e4736"
        db.execute("UPDATE audit_records SET record = ? WHERE id = ?", (orjson.dumps(record).decode(), record_id))
    page = view.get("/calls/c-denied").text
    assert '<code class="trace">4bf92f3577b34da6a3ce929d0e0e4736</code>' in page
    assert "edited (content does not match its hash)" in page


def test_a_record_without_a_target_shows_a_dash_and_the_detail_page_names_the_target(
    view: TestClient, trail: Trail
) -> None:
    """Records written before `target` existed have no such key: the row shows `—`, the filter passes them by."""
    conn = sqlite3.connect(trail.store, isolation_level=None)
    for record_id in trail.records["drift"]:
        (text,) = conn.execute("SELECT record FROM audit_records WHERE id = ?", (record_id,)).fetchone()
        record = orjson.loads(text)
        del record["body"]["target"]
        conn.execute("UPDATE audit_records SET record = ? WHERE id = ?", (orjson.dumps(record).decode(), record_id))
    rows = {row["key"]: row for row in rows_of(view.get("/").text)}
    assert rows["c-drift"]["target"] == "—"
    assert "c-drift" not in [row["key"] for row in rows_of(view.get("/?target=echo").text)]
    detail = view.get("/calls/c-refused").text
    assert "<dt>Target</dt><dd><code>no_such_&lt;script&gt;" in detail and SCRIPT not in detail
