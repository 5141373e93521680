"""``semdup pipeline create|check|remove|status``: semdup's ranking inside the site's own ``_search``."""

from __future__ import annotations

import json

import click

__all__ = ["pipeline"]

_index = click.option("--index", required=True, help="The site's index (or alias) whose searches semdup ranks.")
_name = click.option("--name", default=None, help="Name of the connector, model and pipeline (default semdup-INDEX).")
_url = click.option("--opensearch", "url", default=None, help="OpenSearch URL (default: SEMDUP_OPENSEARCH_URL).")


def _key() -> str:
    """The connector's credential: ``SEMDUP_API_KEY``, a key of the service with the search scope (read through the
    settings, never from the command line, where other users of the machine could read it)."""
    from semdup.cli.edge import settings

    key = settings().service.api_key
    if not key:
        raise click.UsageError("no key: export SEMDUP_API_KEY, a key of the service with the search scope")
    return key


def _print(state: object, as_json: bool) -> None:
    data = state.to_json()  # type: ignore[attr-defined]
    for warning in data.get("warnings") or []:  # on stderr, also beside --json
        click.echo(f"Warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for line in data["actions"] or ["nothing to change"]:
        click.echo(f"  {line}")
    click.echo(f"pipeline {data['name']}: model {data['model_id']} ({data['model_state']}), connector "
               f"{data['connector_id']}, default of {', '.join(data['default_of']) or 'no index'}")  # fmt: skip


@click.group()
def pipeline() -> None:
    """Put semdup's ranking inside the site's own _search (an ml-commons remote model and a search pipeline).

    The site's application keeps calling _search; the pipeline sends each search body to semdup's
    service, which ranks the post the search's text holds (BM25 and k-NN candidates, the fusion) and
    answers the query that ranks the site's index that way. When semdup is down or slower than
    --timeout, the search runs as the site sent it (--on-failure original) or fails (error).

    \b
    Example:
      export SEMDUP_API_KEY=...              # a key of the service with the search scope
      semdup pipeline create --index site-posts --service-url http://10.0.0.5:8080 --default
      semdup pipeline check --index site-posts --title "Visa on arrival in Qatar?"
      curl -s "localhost:9200/site-posts/_search" -H 'content-type: application/json' \\
           -d '{"query": {"match": {"Title": "Visa on arrival in Qatar?"}}}'
      semdup pipeline remove --index site-posts
    """


@pipeline.command()
@_index
@click.option("--service-url", default=None,
              help="semdup's service as the cluster's nodes reach it (default: SEMDUP_PIPELINE_SERVICE_URL).")
@click.option("--timeout", type=click.FloatRange(0.001, 60), default=None,
              help="Seconds the cluster waits for semdup (connect, then read) before it gives up on it "
                   "(default: SEMDUP_PIPELINE_TIMEOUT, 1).")
@click.option("--on-failure", type=click.Choice(["original", "error"]), default=None,
              help="original: a search semdup cannot rank runs as the site sent it; error: it fails "
                   "(default: SEMDUP_PIPELINE_ON_FAILURE, original).")
@click.option("--default", "as_default", is_flag=True, help="Make it the index's default search pipeline.")
@click.option("--replace-key", is_flag=True, help="Give an existing connector the key in SEMDUP_API_KEY.")
@_name
@_url
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def create(index, service_url, timeout, on_failure, as_default, replace_key, name, url, as_json) -> None:
    """Create (or bring up to date) the pipeline of an index; run it twice, the same state.

    It checks and, where this user may, sets the two ml-commons cluster settings a connector to the
    service needs (otherwise it prints the PUT _cluster/settings body to run), creates the connector
    (the key as its encrypted credential, explicit timeouts, no retries), registers and deploys the
    remote model, creates the search pipeline and, with --default, makes it the index's default. It
    ends with one warm-up search through the pipeline, and warns when the cluster has no security
    plugin (ml-commons' master key, hence the connector's key, is then readable by anyone who can
    search the cluster). Two creates of one name at once: the second waits for the first.

    \b
    Example:
      semdup pipeline create --index travel --service-url http://127.0.0.1:8080 --default
    """
    from semdup.cli.edge import client as edge_client
    from semdup.cli.edge import settings
    from semdup.search_pipeline import PipelineSpec
    from semdup.search_pipeline import create as create_pipeline

    configured = settings().pipeline
    service_url = service_url or configured.service_url
    if not service_url:
        raise click.UsageError("no service URL: pass --service-url or set SEMDUP_PIPELINE_SERVICE_URL")
    spec = PipelineSpec(index=index, service_url=service_url, timeout=timeout or configured.timeout,
                        on_failure=on_failure or configured.on_failure, default=as_default, name=name)  # fmt: skip
    _print(create_pipeline(edge_client(url), spec, _key(), replace_key=replace_key), as_json)


@pipeline.command()
@_index
@click.option("--title", default=None, help="A new post's title (default: the title of a post in the index).")
@click.option("--body", default="", help="Its body.")
@click.option("--k", type=click.IntRange(1, 100), default=10, show_default=True, help="Hits compared.")
@click.option("--service-url", default=None, help="The service (default: the URL the connector calls).")
@_name
@_url
def check(index, title, body, k, service_url, name, url) -> None:
    """Run one _search through the pipeline and compare it with semdup's own answer (exit 1 when they differ).

    Also shows /v1/rerank's top k for the same post, and how many of them the pipeline shares.

    \b
    Example:
      semdup pipeline check --index travel --title "Visa on arrival in Qatar?" --k 10
    """
    from semdup.cli.edge import client as edge_client
    from semdup.core.errors import SemdupError
    from semdup.search_pipeline.check import check_pipeline, service_url_of, text_fields
    from semdup.search_pipeline.setup import names

    client = edge_client(url)
    name = name or names(index)
    if title is None:
        field = text_fields(client, index)[0]
        hits = client.search(index=index, body={"size": 1, "_source": [field], "query": {"match_all": {}}})
        title = str(((hits["hits"]["hits"] or [{}])[0].get("_source") or {}).get(field) or "")
        if not title:
            raise click.UsageError(f"{index} has no post with a {field} to try; pass --title")
    result = check_pipeline(client, index, name, title, body, service_url or service_url_of(client, name),
                            _key(), k)  # fmt: skip
    click.echo(f"_search through {name} ({result.took_ms} ms): {', '.join(result.pipeline) or '(no hits)'}")
    click.echo(f"semdup's answer, run directly: {', '.join(result.semdup) or '(no hits)'}")
    click.echo(f"/v1/rerank:                    {', '.join(result.rerank) or '(no candidates)'}")
    if not result.equal:
        raise SemdupError(f"the pipeline's top {k} differ from semdup's answer for {title!r}: is the pipeline "
                          "applied (semdup pipeline status), and the service up?")  # fmt: skip
    click.echo(f"equal: the pipeline ranks {index} as semdup does ({result.shared} of its {len(result.pipeline)} "
               f"also in /v1/rerank's top {k})")


@pipeline.command()
@_index
@_name
@_url
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status(index, name, url, as_json) -> None:
    """Show the connector, model, pipeline and default of an index (nothing changes).

    \b
    Example:
      semdup pipeline status --index travel --json
    """
    from semdup.cli.edge import client as edge_client
    from semdup.search_pipeline import describe

    _print(describe(edge_client(url), index, name), as_json)


@pipeline.command()
@_index
@_name
@_url
@click.option("--json", "as_json", is_flag=True, help="Print what was undone as JSON.")
def remove(index, name, url, as_json) -> None:
    """Undo every step of create: default pipeline, pipeline, model and its group, connector, and the
    cluster settings it changed that no other semdup pipeline needs.

    \b
    Example:
      semdup pipeline remove --index travel
    """
    from semdup.cli.edge import client as edge_client
    from semdup.search_pipeline import remove as remove_pipeline

    _print(remove_pipeline(edge_client(url), index, name), as_json)
