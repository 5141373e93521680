"""Who may search what: the served indices, per-key allow-lists, constant-time key checks, the request schema."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from settings_tree import service_settings

from semdup.core.errors import ConfigError
from semdup.core.settings import BrokerSettings, OpenSearchSettings
from semdup.service.routers.schemas import request_model
from semdup.service.settings import ApiKey, ServiceSettings, parse_api_keys

OS = OpenSearchSettings(url="http://127.0.0.1:9")
# keys of 24 characters or more: a shorter one stops the service (test_a_short_key_stops_the_service_naming_its_label)
MAIN, COOK, ALL = "main-key-4c1f9a07e2b85d36", "k-cook-8e2d5b0f9a4c7e13f", "k-all-6f0a3c9d2e8b7415a9"
K, MOD, BOTH = "k-77e3a9c5d1f04b28e6a13c", "mod7-0b5e8d2f6a9c3e71d4f0", "both-5d3a7f1e0c9b8e2a64d1"


def settings(**values: object) -> ServiceSettings:
    return service_settings({"bundle": "b", "index": "travel", **values}, OS)


def test_api_keys_format_and_errors_that_never_show_the_key() -> None:
    keys = parse_api_keys("k1:travel|cooking, k2:* ,k3")
    assert keys == (ApiKey("k1", ("travel", "cooking")), ApiKey("k2"), ApiKey("k3"))
    for bad, why in (("s3cr3t-key:", "lists no index"), (":travel", "empty key"), ("s3cr3t key:travel", "white")):
        with pytest.raises(ConfigError, match=why) as err:
            parse_api_keys(bad)
        assert "s3cr3t" not in str(err.value)


def test_each_key_searches_its_own_indices_and_the_default_follows() -> None:
    s = settings(indices="travel,cooking", api_key=MAIN, api_keys=f"{COOK}:cooking,{ALL}:*")
    assert s.indices == ("travel", "cooking")
    assert s.key_indices(MAIN) == ("travel", "cooking") and s.key_indices(ALL) == ("travel", "cooking")
    assert s.key_indices(COOK) == ("cooking",)
    assert s.default_index(("cooking",)) == "cooking" and s.default_index(s.indices) == "travel"
    for wrong in (None, "", COOK[:-1], COOK + " ", MAIN + "\x00"):
        assert s.key_indices(wrong) is None
    shown = repr(s)
    assert MAIN not in shown and COOK not in shown and ALL not in shown
    assert settings(auth="off").key_indices(None) == ("travel",)


def test_keys_alone_are_enough_and_must_name_served_indices() -> None:
    assert settings(api_keys={K: ["travel"]}).api_key is None  # a config file's mapping
    with pytest.raises(ConfigError, match=r"names \['cooking'\], which this service does not serve"):
        settings(api_keys=f"{K}:cooking")
    with pytest.raises(ConfigError, match="SEMDUP_API_KEY"):
        settings()


@pytest.mark.parametrize("name", ["*", "_all", "a|b", ".kibana", "../x", "Travel"])
def test_served_indices_are_single_names(name: str) -> None:
    with pytest.raises(ConfigError, match="SEMDUP_INDICES entry|SEMDUP_INDEX"):
        settings(api_key=K, indices=f"travel,{name}")


def test_the_request_schema_states_what_the_service_refuses() -> None:
    model = request_model(settings(api_key=K, max_text_chars=50, max_k=20))
    assert model.model_validate({"title": "Visa for Qatar?", "k": 20, "templates": ["bm25", "lmj"]}).k == 20
    refused = [
        {},
        {"title": "  ", "body": "\n"},
        {"title": "x" * 51},
        {"title": "ok", "k": 21},
        {"title": "ok", "k": 0},
        {"title": "ok", "k": "5"},
        {"title": "ok", "templates": ["bm25"] * 7},
        {"title": "ok", "templates": ["bm99"]},
        {"title": "ok", "templates": []},
        {"title": "ok", "index": ""},
        {"title": "ok\x00\x01"},
        {"title": "ok", "titel": "typo"},
    ]
    for body in refused:
        with pytest.raises(ValidationError):
            model.model_validate(body)
    schema = model.model_json_schema()
    assert schema["additionalProperties"] is False and len(schema["anyOf"]) == 2
    assert schema["properties"]["k"]["maximum"] == 20 and schema["properties"]["title"]["maxLength"] == 50
    assert schema["properties"]["templates"]["anyOf"][0]["maxItems"] == 6


def test_scopes_and_reviewer_names_extend_the_key_format_and_old_strings_keep_their_meaning() -> None:
    keys = parse_api_keys("k1:travel,mod7:travel:review:alice,ops2:*:search|review,k3")
    assert [(k.indices, k.scopes, k.name) for k in keys] == [
        (("travel",), ("search",), None),
        (("travel",), ("review",), "alice"),
        ((), ("search", "review"), None),
        ((), ("search",), None),
    ]
    assert keys[1].who == "alice" and keys[2].who.startswith("key-") and "ops2" not in keys[2].who
    for bad, why in (
        ("s3cr3t:travel:admin", "unknown API key scope"),
        ("s3cr3t:travel:", "lists no scope"),
        ("s3cr3t:travel:review:bad name", "reviewer's name"),
        ("s3cr3t:travel:review:a:b", "more than four"),
    ):
        with pytest.raises(ConfigError, match=why) as err:
            parse_api_keys(bad)
        assert "s3cr3t" not in str(err.value)
    mapped = settings(api_keys={MOD: {"indices": "*", "scopes": ["review"], "name": "bob"}, K: ["travel"]})
    assert mapped.api_keys[0] == ApiKey(MOD, (), ("review",), "bob") and mapped.api_keys[1].scopes == ("search",)


def test_a_review_key_cannot_search_and_a_search_key_cannot_review() -> None:
    s = settings(api_key=MAIN, api_keys=f"{K}:travel,{MOD}:travel:review:alice,{BOTH}:*:search|review")
    assert s.review_enabled
    assert s.key_indices(MOD) is None and s.reviewer(MOD).who == "alice"
    assert s.reviewer(MAIN) is None and s.reviewer(K) is None and s.key_indices(K) == ("travel",)
    assert s.key_indices(BOTH) == ("travel",) and s.reviewer(BOTH) is not None
    assert not settings(api_key=MAIN).review_enabled
    off = settings(auth="off", api_keys=f"{MOD}:travel:review")
    assert not off.review_enabled and off.reviewer(MOD) is None  # verdicts record who: no review without keys


def test_review_settings_are_checked_and_the_session_secret_never_shown() -> None:
    secret = "x" * 40
    s = settings(api_key=K, session_secret=secret, post_url="https://travel.stackexchange.com/questions/{id}")
    assert secret not in repr(s) and s.review.session_max_age == 8 * 3600 and s.review.session_idle == 1800
    for bad, why in (
        ({"session_secret": "short"}, "at least 32"),
        ({"post_url": "javascript:alert(1)//{id}"}, "http"),
        ({"post_url": "https://x.example/questions/"}, "{id}"),
        ({"post_url": "https://x.example/{id}/{user}"}, "only {id} and {index}"),
        ({"session_max_age": "5"}, "SESSION_MAX_AGE"),
        ({"session_idle": "30"}, "SESSION_IDLE"),
        ({"session_idle": "7200", "session_max_age": "3600"}, "SESSION_IDLE"),
        ({"auth_failures": "0"}, "AUTH_FAILURES"),
        ({"auth_block": "0"}, "AUTH_BLOCK"),
    ):
        with pytest.raises(ConfigError, match=why):
            settings(api_key=K, **bad)


def test_a_short_key_stops_the_service_naming_its_label_never_the_key() -> None:
    for given, label in (
        ({"api_key": "a"}, "SEMDUP_API_KEY"),
        ({"api_keys": f"{K}:travel,short-s3cr3t:travel"}, "entry 2 of api_keys"),  # (of SEMDUP_API_KEYS, set so)
        ({"api_keys": f"{K}:travel,short-s3cr3t:travel:review:alice"}, "'alice'"),
    ):
        with pytest.raises(ConfigError, match="shorter than 24 characters") as err:
            service_settings({"bundle": "b", "index": "travel", **given}, OS)
        assert label in str(err.value) and "s3cr3t" not in str(err.value) and "'a'" not in str(err.value)
        assert "key-" not in str(err.value)  # nor a hash of it: a short key's hash gives it away
    assert settings(auth="off", api_key="a").auth is False  # no access control, no key checked


def test_search_is_read_only_ingest_writes_ops_reads_the_metrics() -> None:
    s = settings(api_key=MAIN, api_keys=f"{K}:travel:ingest,{BOTH}:*:search|ingest,{MOD}:*:ops:prom")
    assert s.key_indices(MAIN) == ("travel",) and s.key_indices(MAIN, "ingest") is None
    assert s.key_indices(K) is None and s.key_indices(K, "ingest") == ("travel",)
    assert s.key_indices(BOTH, "ingest") == ("travel",) and s.key_indices(MOD, "ops") == ("travel",)
    assert s.key_of(MOD).shown == "'prom'" and s.key_of(MAIN).shown == "SEMDUP_API_KEY"
    assert s.key_of(K).shown.startswith("entry 1 of api_keys") and s.key_of("nope") is None


def test_the_start_warns_about_search_keys_that_may_have_ingested_and_an_ops_rule_nobody_passes() -> None:
    keys = {"api_key": MAIN, "api_keys": f"{K}:travel,{MOD}:travel:review:alice,{BOTH}:*:search|ingest"}
    old = service_settings({"bundle": "b", "index": "travel", **keys}, OS, BrokerSettings("redis://127.0.0.1:9/0"))
    warnings = old.startup_warnings()  # a config that ingested with search keys before the ingest scope
    assert len(warnings) == 2 and "SEMDUP_API_KEY, entry 1 of api_keys" in warnings[0]
    assert "hold the search scope but not ingest" in warnings[0] and "entry 3" not in warnings[0]
    assert "ops scope" in warnings[1]
    assert all(key not in " ".join(warnings) for key in (MAIN, K, MOD, BOTH))
    assert settings(api_key=MAIN, api_keys=f"{MOD}:*:ops").startup_warnings() == []  # ingest off: nothing lost
    assert settings(api_key=MAIN, ops_auth="0").startup_warnings() == []
