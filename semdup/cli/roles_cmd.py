"""``semdup roles print``: the security plugin roles semdup's users need (:mod:`semdup.apps.roles`)."""

from __future__ import annotations

import json

import click

__all__ = ["roles"]


@click.group("roles")
def roles() -> None:
    """The least privilege of semdup's users on a cluster with the security plugin.

    \b
    Example:
      semdup roles print --index travel > semdup-roles.json
      semdup roles print --index travel --format yaml   # roles.yml entries
    """


@roles.command("print")
@click.option("--index", "indices", multiple=True, required=True,
              help="A site index or alias semdup serves (repeat it; an alias's indices as a pattern, e.g. travel-*).")
@click.option("--format", "fmt", type=click.Choice(["json", "yaml"]), default="json", show_default=True,
              help="json: role name -> the body of PUT _plugins/_security/api/roles/<name>; yaml: roles.yml entries.")
@click.option("--prefix", default="semdup", show_default=True, help="The roles are named <prefix>_service, ...")
def print_roles(indices: tuple[str, ...], fmt: str, prefix: str) -> None:
    """Print the service, worker and setup roles for the site's indices, for an administrator to apply.

    \b
    Example:
      semdup roles print --index travel | jq -c 'to_entries[]' | while read -r role; do
        curl --cacert root-ca.pem -u admin -X PUT -H 'Content-Type: application/json' \\
          "https://opensearch:9200/_plugins/_security/api/roles/$(jq -r .key <<<"$role")" -d "$(jq .value <<<"$role")"
      done
    """
    from semdup.apps.roles import rest_bodies, roles_yml, semdup_roles

    made = semdup_roles(list(indices), prefix=prefix)
    click.echo(json.dumps(rest_bodies(made), indent=2) if fmt == "json" else roles_yml(made), nl=fmt == "json")
