"""Who may search what: the served indices, per-key allow-lists, constant-time key checks, the request schema."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from semdup.core.errors import ConfigError
from semdup.core.settings import OpenSearchSettings
from semdup.reranker.service import request_model
from semdup.reranker.settings import ApiKey, ServiceSettings, parse_api_keys

OS = OpenSearchSettings(url="http://127.0.0.1:9")


def settings(**values: object) -> ServiceSettings:
    return ServiceSettings.from_mapping({"bundle": "b", "index": "travel", **values}, OS)


def test_api_keys_format_and_errors_that_never_show_the_key() -> None:
    keys = parse_api_keys("k1:travel|cooking, k2:* ,k3")
    assert keys == (ApiKey("k1", ("travel", "cooking")), ApiKey("k2"), ApiKey("k3"))
    for bad, why in (("s3cr3t-key:", "lists no index"), (":travel", "empty key"), ("s3cr3t key:travel", "white")):
        with pytest.raises(ConfigError, match=why) as err:
            parse_api_keys(bad)
        assert "s3cr3t" not in str(err.value)


def test_each_key_searches_its_own_indices_and_the_default_follows() -> None:
    s = settings(indices="travel,cooking", api_key="main-key", api_keys="k-cook:cooking,k-all:*")
    assert s.indices == ("travel", "cooking")
    assert s.key_indices("main-key") == ("travel", "cooking") and s.key_indices("k-all") == ("travel", "cooking")
    assert s.key_indices("k-cook") == ("cooking",)
    assert s.default_index(("cooking",)) == "cooking" and s.default_index(s.indices) == "travel"
    for wrong in (None, "", "k-coo", "k-cook ", "main-key\x00"):
        assert s.key_indices(wrong) is None
    shown = repr(s)
    assert "main-key" not in shown and "k-cook" not in shown and "k-all" not in shown
    assert settings(auth="off").key_indices(None) == ("travel",)


def test_keys_alone_are_enough_and_must_name_served_indices() -> None:
    assert settings(api_keys={"k": ["travel"]}).api_key is None  # a config file's mapping
    with pytest.raises(ConfigError, match=r"names \['cooking'\], which this service does not serve"):
        settings(api_keys="k:cooking")
    with pytest.raises(ConfigError, match="SEMDUP_API_KEY"):
        settings()


@pytest.mark.parametrize("name", ["*", "_all", "a|b", ".kibana", "../x", "Travel"])
def test_served_indices_are_single_names(name: str) -> None:
    with pytest.raises(ConfigError, match="SEMDUP_INDICES entry|SEMDUP_INDEX"):
        settings(api_key="k", indices=f"travel,{name}")


def test_the_request_schema_states_what_the_service_refuses() -> None:
    model = request_model(settings(api_key="k", max_text_chars=50, max_k=20))
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
    mapped = settings(api_keys={"m": {"indices": "*", "scopes": ["review"], "name": "bob"}, "k": ["travel"]})
    assert mapped.api_keys[0] == ApiKey("m", (), ("review",), "bob") and mapped.api_keys[1].scopes == ("search",)


def test_a_review_key_cannot_search_and_a_search_key_cannot_review() -> None:
    s = settings(api_key="main-key", api_keys="k1:travel,mod7:travel:review:alice,both:*:search|review")
    assert s.review_enabled
    assert s.key_indices("mod7") is None and s.reviewer("mod7").who == "alice"
    assert s.reviewer("main-key") is None and s.reviewer("k1") is None and s.key_indices("k1") == ("travel",)
    assert s.key_indices("both") == ("travel",) and s.reviewer("both") is not None
    assert not settings(api_key="main-key").review_enabled
    off = settings(auth="off", api_keys="mod7:travel:review")
    assert not off.review_enabled and off.reviewer("mod7") is None  # verdicts record who: no review without keys


def test_review_settings_are_checked_and_the_session_secret_never_shown() -> None:
    secret = "x" * 40
    s = settings(api_key="k", session_secret=secret, post_url="https://travel.stackexchange.com/questions/{id}")
    assert secret not in repr(s) and s.session_max_age == 12 * 3600
    for bad, why in (
        ({"session_secret": "short"}, "at least 32"),
        ({"post_url": "javascript:alert(1)//{id}"}, "http"),
        ({"post_url": "https://x.example/questions/"}, "{id}"),
        ({"post_url": "https://x.example/{id}/{user}"}, "only {id} and {index}"),
        ({"session_max_age": "5"}, "SESSION_MAX_AGE"),
    ):
        with pytest.raises(ConfigError, match=why):
            settings(api_key="k", **bad)
