"""The fusion's components computed where the data is: a stored painless script over ``semdup.packed``.

A rerank needs, for each of ~200 candidates, the three cosines of the fusion (the lexical score comes from the
search itself)::

    cos_bow   = Σ_w q_w·d_w over the BOW weights both sides hold (each side L2-normalised: dos Santos et al. 2015)
    cos_dense = cos(E(q), E(c))
    cos_title = cos(E(title q), E(title c)), 0 for a post or query without a title

Sending the candidates' packed fields to the reranker costs ~5 kB of base64 per hit (a megabyte per query), as
much as encoding the query. The script :data:`COMPONENTS_SCRIPT` computes the three cosines on the data node, as a
``script_fields`` entry of each candidate search, from the same bytes the reranker used to decode
(:mod:`semdup.index_format.packed_fields`, format 2 or 3): each hit comes back with ``[cos_bow, cos_dense,
cos_title, same_model]`` and nothing else. The arithmetic is the reranker's own: float32 stored values and query
values (sent as their shortest float32 decimals, read back as float32), products and sums in float64, so the
fused scores equal the ones computed from the decoded fields to ~1e-15 (rankings equal; tests check both).

``same_model`` is 1 when the candidate's ``semdup.model`` is the query's bundle version, -1 without one, and 0 when
it is another's, followed by that version (the reranker refuses to mix models and names the other one). A
candidate whose packed value is missing or of format 1 (names, not ids: semdup before term ids) gets ``null``; the
reranker reads those few from ``_source`` as before.

The script is stored once per cluster under an id that carries a hash of its source (:data:`COMPONENTS_SCRIPT_ID`),
so a cluster shared by two semdup versions holds both and neither overwrites the other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from semdup.core.scoring import TITLE_WEIGHT, check_fusion

__all__ = [
    "COMPONENTS_FIELD",
    "COMPONENTS_SCRIPT",
    "COMPONENTS_SCRIPT_ID",
    "FUSED_SCRIPT",
    "FUSED_SCRIPT_ID",
    "STORED_SCRIPTS",
    "components_params",
    "fused_params",
    "script_fields",
]

COMPONENTS_FIELD = "semdup"  # the script field each candidate hit carries

# the script's parts: its functions, the read of a candidate's cosines (``return null`` where it has no packed
# value of format 2 or later), and what it returns; the fused script shares the first two
_FUNCTIONS = """
int u32(byte[] a, int p) {
  return (((int) a[p]) & 255) | ((((int) a[p + 1]) & 255) << 8) | ((((int) a[p + 2]) & 255) << 16)
      | ((((int) a[p + 3]) & 255) << 24);
}
double cosine(byte[] a, int p, int d, List q, double qn) {
  double dot = 0.0;
  double nn = 0.0;
  for (int i = 0; i < d; ++i) {
    double x = Float.intBitsToFloat(u32(a, p + 4 * i));
    double y = (float) ((double) q.get(i));
    dot += x * y;
    nn += x * x;
  }
  return dot / (Math.max(Math.sqrt(nn), 1e-8) * qn);
}
"""
_COSINES = """if (!doc.containsKey('semdup.packed')) { return null; }
def dv = doc['semdup.packed'];
if (dv.size() == 0) { return null; }
BytesRef b = dv.value;
byte[] a = b.bytes;
int o = b.offset;
int version = ((int) a[o]) & 255;
if (version < 2) { return null; }
int d = u32(a, o + 1);
int n = u32(a, o + 5);
int p = o + 9;
double cd = 0.0;
if (params.qv != null && d > 0) { cd = cosine(a, p, d, params.qv, params.qvn); }
double cb = 0.0;
if (params.qi != null) {
  List qi = params.qi;
  List qw = params.qw;
  int wp = p + 4 * d;
  int ip = wp + 4 * n;
  for (int j = 0; j < n; ++j) {
    int id = u32(a, ip + 4 * j);
    int lo = 0;
    int hi = qi.size() - 1;
    while (lo <= hi) {
      int mid = (lo + hi) >>> 1;
      int v = (int) qi.get(mid);
      if (v < id) { lo = mid + 1; } else if (v > id) { hi = mid - 1; } else {
        cb += ((double) qw.get(mid)) * Float.intBitsToFloat(u32(a, wp + 4 * j));
        break;
      }
    }
  }
}
double ct = 0.0;
if (version >= 3 && params.qt != null) {
  int tp = p + 4 * d + 8 * n;
  int t = u32(a, tp);
  if (t > 0) { ct = cosine(a, tp + 4, t, params.qt, params.qtn); }
}
"""
_RETURN_COMPONENTS = """def m = doc.containsKey('semdup.model') ? doc['semdup.model'] : [];
if (m.size() == 0) { return [cb, cd, ct, -1.0]; }
if (m.value == params.model) { return [cb, cd, ct, 1.0]; }
return [cb, cd, ct, 0.0, m.value];
"""
COMPONENTS_SCRIPT = _FUNCTIONS + _COSINES + _RETURN_COMPONENTS

COMPONENTS_SCRIPT_ID = "semdup-components-" + hashlib.sha256(COMPONENTS_SCRIPT.encode()).hexdigest()[:12]

# The one-hop query's score (semdup.reranker.onehop): the fusion itself, for a ``script_score`` whose inner query's
# score is the first lexical template's (``_score``, 0 where it does not match). lexnorm is that score divided by
# the best one the query reaches (``params.best``). Lucene scores must be positive: a complete candidate scores
# ``params.shift`` + the fused score (``shift`` exceeds the sum of the weights' magnitudes, so it stays above 1);
# one without semdup's fields, or written by another model, scores half its lexnorm, below every complete one.
_LEXNORM = """double ln = params.best > 0.0 ? Math.min(_score / params.best, 1.0) : 0.0;
"""
_RETURN_FUSED = """def m = doc.containsKey('semdup.model') ? doc['semdup.model'] : [];
if (m.size() == 0 || m.value != params.model) { return 0.5 * ln; }
return params.shift + params.bb * cb + params.bd * cd + params.bt * ct + params.alpha * ln;
"""
FUSED_SCRIPT = _FUNCTIONS + _LEXNORM + _COSINES.replace("return null;", "return 0.5 * ln;") + _RETURN_FUSED
FUSED_SCRIPT_ID = "semdup-fused-" + hashlib.sha256(FUSED_SCRIPT.encode()).hexdigest()[:12]


def _unit_norm(v: np.ndarray) -> float:
    """The norm the reranker divides by: float64 norm of the float32 values, at least 1e-8."""
    return max(float(np.linalg.norm(v.astype(np.float64))), 1e-8)


def components_params(model: str, vector: Any, terms: Any, title: Any) -> dict[str, Any]:
    """The script's parameters for one query: its bundle version, dense vector, BOW weights (vocabulary ids sorted
    ascending, the script's binary search needs it) and title vector; None for a path the query lacks.

    ``terms`` is the query's :class:`~semdup.index_format.packed_fields.PackedTerms` with vocabulary ids (what
    ``Bundle.encode_query`` gives); float32 arrays go as numpy arrays (the client writes each as its shortest
    float32 decimal).
    """
    params: dict[str, Any] = {"model": model, "qv": None, "qvn": 1.0, "qi": None, "qw": None, "qt": None, "qtn": 1.0}
    if vector is not None:
        v = np.asarray(vector, dtype=np.float32)
        params["qv"], params["qvn"] = v, _unit_norm(v)
    if terms is not None:
        ids = getattr(terms, "ids", None)
        if ids is None:
            raise ValueError("the query's term weights carry no vocabulary ids; in-cluster scoring matches ids")
        order = np.argsort(ids, kind="stable")
        params["qi"] = np.asarray(ids, dtype=np.int64)[order]
        params["qw"] = np.asarray(terms.weights, dtype=np.float64)[order]
    if title is not None:
        t = np.asarray(title, dtype=np.float32)
        params["qt"], params["qtn"] = t, _unit_norm(t)
    return params


def script_fields(params: dict[str, Any]) -> dict[str, Any]:
    """The ``script_fields`` of a candidate search: each hit carries ``fields.semdup = [cos_bow, cos_dense,
    cos_title, same_model]``."""
    return {COMPONENTS_FIELD: {"script": {"id": COMPONENTS_SCRIPT_ID, "params": params}}}


def fused_params(components: dict[str, Any], fusion: Mapping[str, float], best: float) -> dict[str, Any]:
    """The fused script's parameters: the components script's (:func:`components_params`), the fusion's weights
    (a path the query lacks weighs 0, as :func:`semdup.reranker.fusion.compute_fused` leaves it out), the best
    lexical score the query reaches, and the shift that keeps every complete candidate's score above 1."""
    f = check_fusion(fusion)
    bb = f["beta_bow"] if components.get("qi") is not None else 0.0
    bd = f["beta_dense"] if components.get("qv") is not None else 0.0
    bt = f.get(TITLE_WEIGHT, 0.0) if components.get("qt") is not None else 0.0
    alpha = f["alpha"]
    shift = 1.0 + abs(bb) + abs(bd) + abs(bt) + abs(alpha)
    return {**components, "bb": bb, "bd": bd, "bt": bt, "alpha": alpha, "best": float(best), "shift": shift}


STORED_SCRIPTS = {COMPONENTS_SCRIPT_ID: COMPONENTS_SCRIPT, FUSED_SCRIPT_ID: FUSED_SCRIPT}  # id -> painless source
