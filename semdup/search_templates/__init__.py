"""Candidate retrieval through stored mustache templates (BM25, LM Jelinek-Mercer, LM Dirichlet, DFR, IB, TF-IDF)."""

from __future__ import annotations

from semdup.search_templates.registry import (
    Hit,
    ensure_templates,
    msearch_templates,
    query_text,
    register_templates,
    render_template,
)
from semdup.search_templates.templates import (
    VARIANTS,
    all_templates,
    template_body,
    template_id,
    template_params,
    template_source,
)

__all__ = [
    "Hit",
    "VARIANTS",
    "all_templates",
    "ensure_templates",
    "msearch_templates",
    "query_text",
    "register_templates",
    "render_template",
    "template_body",
    "template_id",
    "template_params",
    "template_source",
]
