"""Running semdup's services: the embedded local OpenSearch and Redis (see README.md beside this file).

Submodules are imported on use; nothing here starts a process or opens a connection::

    semdup.deploy.local_opensearch   LocalOpenSearch, running_url, knn_available
    semdup.deploy.local_redis        LocalRedis, running_url
    semdup.deploy.opensearch_distribution  fetch + assemble OpenSearch from Maven Central
    semdup.deploy.local_process      ports, detached processes, state records
    semdup.deploy.worker_metrics     Prometheus /metrics of the indexing workers (SEMDUP_METRICS_PORT)

Container and cluster files: compose/, docker/Dockerfile, k8s/ ("Deploying" in README.md).
"""
