"""``semdup rerank`` (one post from the command line) and ``semdup serve`` (the HTTP service)."""

from __future__ import annotations

import json

import click

__all__ = ["rerank", "serve"]


_TEMPLATES_HELP = "Comma-separated lexical candidate templates: bm25, lmj, lmd, dfr, ib, tfidf (first = lexnorm's)."


def _templates(value: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in value.split(",") if t.strip())


@click.command("rerank")
@click.option(
    "--bundle", required=True, type=click.Path(exists=True, dir_okay=True), help="Model bundle (dir or .tar.gz)."
)
@click.option("--index", required=True, help="Index holding the posts and their semdup fields.")
@click.option("--title", default="", help="The new post's title.")
@click.option("--body", default="", help="The new post's body.")
@click.option("--k", type=click.IntRange(1, 1000), default=10, show_default=True, help="Candidates to print.")
@click.option("--templates", default="bm25", show_default=True, help=_TEMPLATES_HELP)
@click.option(
    "--sparse", is_flag=True, help="Add learned-sparse candidates (bag-of-words bundles; index made with --sparse)."
)
@click.option(
    "--knn/--no-knn",
    default=None,
    help="k-NN candidates on or off (default: on wherever the index was made with --knn).",
)
@click.option(
    "--k-candidates",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="Candidates per retrieval path.",
)
@click.option("--exclude-id", help="Leave this post id out (the query itself, when indexed).")
@click.option("--opensearch", "url", help="OpenSearch URL (default: settings / the embedded node).")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
def rerank(bundle, index, title, body, k, templates, sparse, knn, k_candidates, exclude_id, url, as_json) -> None:
    """Rank duplicate candidates of one post: fused score, components, probability, decision.

    \b
    Example:
      semdup rerank --bundle artifacts/bundles/t-scqa-semeval --index questions \\
          --title "Visa on arrival in Qatar?" --body "How long can I stay?" --k 5 --json
    """
    from semdup.cli.edge import client as edge_client
    from semdup.core.errors import ConfigError
    from semdup.core.posts import Post
    from semdup.reranker import Reranker, RerankerSettings

    client = edge_client(url)
    try:
        options = RerankerSettings(_templates(templates), sparse=sparse, knn=knn, k_candidates=k_candidates)
        rr = Reranker.from_bundle(bundle, client, index, options)
    except (ValueError, ConfigError) as exc:
        raise click.UsageError(str(exc)) from exc
    cands = rr.rank(Post(exclude_id or "_query", title, body), k=k, exclude_id=exclude_id)
    reason = rr.empty_reason() if not cands else None  # raises when the index's posts are not encoded yet
    if as_json:
        click.echo(
            json.dumps(
                {
                    "model": rr.version,
                    "index": index,
                    "threshold": rr.threshold,
                    "candidates": [c.to_json() for c in cands],
                    "reason": reason,
                },
                indent=2,
            )
        )
        return
    click.echo(f"model {rr.version}, threshold {rr.threshold}")
    if reason:
        click.echo(f"no candidates: {reason}")
    titled = rr.bundle.uses_title  # the hybrid default's title term gets a column
    click.echo(
        f"{'rank':>4}  {'id':<20} {'score':>8} {'cos_bow':>8} {'cos_dense':>9}{' cos_title' if titled else ''} "
        f"{'lexnorm':>8} {'P(dup)':>7}  dup"
    )

    def fmt(x: float | None, w: int) -> str:
        return f"{x:>{w}.4f}" if x is not None else f"{'-':>{w}}"

    for i, c in enumerate(cands, 1):
        comp = c.components
        flag = "yes" if c.is_duplicate else ("no" if c.is_duplicate is False else "-")
        title = f" {fmt(comp.get('cos_title'), 9)}" if titled else ""
        click.echo(
            f"{i:>4}  {c.id:<20} {c.score:>8.4f} {fmt(comp['cos_bow'], 8)} {fmt(comp['cos_dense'], 9)}{title} "
            f"{fmt(comp['lexnorm'], 8)} {fmt(c.probability, 7)}  {flag}{'' if c.complete else ' (not indexed yet)'}"
        )


@click.command("serve")
@click.option("--bundle", type=click.Path(exists=True, dir_okay=True), help="Model bundle (or $SEMDUP_BUNDLE).")
@click.option("--index", help="Index to search (or $SEMDUP_INDEX).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=8080, show_default=True)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="uvicorn worker processes, one onnxruntime session each (or $SEMDUP_WORKERS; default: one per usable "
    "CPU, at most 16).",
)
@click.option("--templates", help=_TEMPLATES_HELP + " (or $SEMDUP_TEMPLATES; default bm25)")
@click.option("--sparse/--no-sparse", default=None, help="Learned-sparse candidates (or $SEMDUP_SPARSE).")
@click.option(
    "--knn/--no-knn", default=None, help="k-NN candidates (or $SEMDUP_KNN; default: wherever the index maps them)."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML/TOML config file with opensearch: and reranker: sections (or $SEMDUP_CONFIG).",
)
@click.option(
    "--log-json",
    is_flag=True,
    hidden=True,
    deprecated="use `semdup --log-format json serve ...` or SEMDUP_LOG_FORMAT=json",
    help="JSON log lines (deprecated alias of `semdup --log-format json`).",
)
@click.option("--opensearch", "url", help="OpenSearch URL (or $SEMDUP_OPENSEARCH_URL / the embedded node).")
@click.option(
    "--forwarded-allow-ips",
    "proxies",
    help="The reverse proxies, comma-separated addresses or networks, whose X-Forwarded-For names the client (or "
    "$SEMDUP_FORWARDED_ALLOW_IPS; default: none, each request counts by its connection's address).",
)
def serve(bundle, index, host, port, workers, templates, sparse, knn, config_file, log_json, url, proxies) -> None:
    """Run the reranking HTTP service (POST /v1/rerank, /healthz, /readyz, /metrics, /openapi.json, /review).

    Clients send the key of $SEMDUP_API_KEY in the X-API-Key header; without a key the service refuses to
    start unless SEMDUP_AUTH=off is set explicitly, and so it does with a key shorter than 24 characters.
    Wrong keys and logins are throttled per address (429 with Retry-After): the connection's own, or behind a
    reverse proxy named in --forwarded-allow-ips the one its X-Forwarded-For gives. The bundle is loaded and
    verified once before any worker starts: a broken one is one Error line and exit 1, and so is a worker that
    cannot start. Each worker answers at most $SEMDUP_MAX_IN_FLIGHT requests at a time and refuses more with
    503 and Retry-After. A request searches $SEMDUP_INDEX, or names one of $SEMDUP_INDICES; $SEMDUP_API_KEYS
    ('key1:index-a|index-b,key2:*') limits keys to some of them, and gives them scopes: search (read only,
    the default), ingest (/v1/posts), review (the review page of flagged duplicates at /review,
    'mod1:index-a:review:alice') and ops (/metrics, /openapi.json). With
    `semdup --log-format json` (or SEMDUP_LOG_FORMAT=json) every line on stderr, uvicorn's and tracebacks
    included, is one JSON object, secrets scrubbed.

    \b
    Example:
      export SEMDUP_API_KEY=$(openssl rand -hex 24)
      semdup serve --bundle artifacts/bundles/t-scqa-semeval --index questions --port 8080 &
      curl -s -H "X-API-Key: $SEMDUP_API_KEY" -H 'content-type: application/json' \\
           -d '{"title": "Visa on arrival in Qatar?", "body": "", "k": 5}' localhost:8080/v1/rerank
    """
    from semdup.apps.serve import serve as run_service

    overrides = {
        "config_file": config_file,
        "opensearch.url": url,
        "model.bundle": bundle,
        "service.index": index,
        "candidates.templates": templates,
        "candidates.sparse": sparse,
        "candidates.knn": knn,
        "service.workers": workers,
        "service.forwarded_allow_ips": proxies,
    }
    # the settings, the shared secret and runtime folder, the workers: semdup.apps.serve (the composition root)
    run_service(overrides, host=host, port=port, log_json=log_json, announce=lambda line: click.echo(line, err=True))
