"""semdup inside the site's own ``_search``: an ml-commons remote model and a search pipeline that rank the site's
searches by semdup (``semdup pipeline create|check|remove``)."""

from __future__ import annotations

from semdup.search_pipeline.cluster_settings import SettingsRefused
from semdup.search_pipeline.setup import PipelineSpec, PipelineState, create, describe, remove

__all__ = ["PipelineSpec", "PipelineState", "SettingsRefused", "create", "describe", "remove"]
