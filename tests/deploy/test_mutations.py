"""The invariant checks fail when the files break: each check run on a mutated copy of the parsed documents."""

from __future__ import annotations

from pathlib import Path

from . import checks

GROQ_LIKE = "gsk_" + "A1b2C3d4" * 5  # built here so no key-shaped literal sits in the source


def _deployment(docs, name):
    return next(d for d in checks.k8s_of_kind(docs, "Deployment") if d["metadata"]["name"] == name)


def _container(docs, name):
    return _deployment(docs, name)["spec"]["template"]["spec"]["containers"][0]


# ------------------------------------------------------------------------------------ a queue loses its consumer


def test_compose_without_the_judge_worker_leaves_judge_unconsumed(cfg) -> None:
    del cfg["services"]["worker-judge"]
    assert checks.check_consumers(checks.compose_consumers(cfg), checks.app_queues(), "compose") == [
        "compose: queue 'judge' has no consumer"
    ]


def test_compose_worker_serving_another_queue_is_caught(cfg) -> None:
    command = cfg["services"]["worker-code"]["command"]
    command[command.index("code,control")] = "cpu,control"
    problems = checks.check_consumers(checks.compose_consumers(cfg), checks.app_queues(), "compose")
    assert problems == ["compose: queue 'code' has no consumer"]


def test_compose_worker_not_consuming_control_is_caught(cfg) -> None:
    command = cfg["services"]["worker-cpu"]["command"]
    command[command.index("cpu,control")] = "cpu"
    assert any("does not consume the control queue" in p for p in checks.check_compose_workers(cfg))


def test_a_queue_the_app_starts_routing_to_needs_a_new_worker(cfg, docs) -> None:
    queues = checks.app_queues() | {"rerank"}  # what adding a new queue to app.py would do
    assert checks.check_consumers(checks.compose_consumers(cfg), queues, "compose") == [
        "compose: queue 'rerank' has no consumer"
    ]
    assert checks.check_consumers(checks.k8s_consumers(docs), queues, "k8s") == ["k8s: queue 'rerank' has no consumer"]


def test_compose_without_the_target_worker_leaves_target_unconsumed(cfg) -> None:
    del cfg["services"]["worker-target"]
    assert checks.check_consumers(checks.compose_consumers(cfg), checks.app_queues(), "compose") == [
        "compose: queue 'target' has no consumer"
    ]


def test_k8s_without_the_embed_deployment_leaves_embed_unconsumed(docs) -> None:
    docs = [(f, d) for f, d in docs if not (d.get("kind") == "Deployment" and d["metadata"]["name"] == "worker-embed")]
    assert checks.check_consumers(checks.k8s_consumers(docs), checks.app_queues(), "k8s") == [
        "k8s: queue 'embed' has no consumer"
    ]
    assert any("worker-embed, which is not a worker Deployment" in p for p in checks.check_keda(docs))


# ------------------------------------------------------------------------------------ a secret is inlined


def test_compose_inlined_api_key_is_caught(cfg) -> None:
    cfg["services"]["worker-judge"]["environment"]["GROQ_API_KEY"] = GROQ_LIKE
    problems = checks.check_no_plain_secrets(cfg)
    assert any("GROQ_API_KEY: looks like a real key" in p for p in problems)
    assert any("GROQ_API_KEY: literal value under a secret-like name" in p for p in problems)


def test_compose_inlined_redis_password_is_caught(cfg) -> None:
    cfg["services"]["worker-cpu"]["environment"]["RAGSCORE_BROKER_URL"] = "redis://:hunter2@redis:6379/0"
    assert checks.check_no_plain_secrets(cfg) == [
        "services.worker-cpu.environment.RAGSCORE_BROKER_URL: URL with a literal password"
    ]
    assert checks.check_compose_redis_password(cfg) == ["worker-cpu: does not connect with the Redis password"]


def test_compose_literal_requirepass_and_flower_login_are_caught(cfg) -> None:
    redis = cfg["services"]["redis"]
    redis["command"][-1] = redis["command"][-1].replace("requirepass $${REDIS_PASSWORD}", "requirepass hunter2")
    cfg["services"]["flower"]["environment"]["FLOWER_BASIC_AUTH"] = "admin:hunter2"
    problems = checks.check_no_plain_secrets(cfg)
    assert any("literal requirepass" in p for p in problems)
    assert any("FLOWER_BASIC_AUTH: literal value" in p for p in problems)
    assert checks.check_compose_redis_password(cfg) == ["redis: does not require REDIS_PASSWORD"]


def test_k8s_env_value_instead_of_secret_ref_is_caught(docs) -> None:
    env = _container(docs, "worker-cpu")["env"]
    env[0] = {"name": "REDIS_PASSWORD", "value": "hunter2"}
    problems = checks.check_k8s_secrets(docs)
    assert any("env REDIS_PASSWORD: literal value" in p for p in problems)
    assert any(
        "worker-cpu/worker: no REDIS password from secretKeyRef" in p for p in checks.check_k8s_redis_password(docs)
    )


def test_k8s_secret_template_with_a_real_value_is_caught(docs) -> None:
    secret = next(d for _, d in docs if d.get("kind") == "Secret" and d["metadata"]["name"] == "ragscore-judge")
    secret["stringData"]["GROQ_API_KEY"] = GROQ_LIKE
    problems = checks.check_k8s_secrets(docs)
    assert any("ragscore-judge key GROQ_API_KEY is not a placeholder" in p for p in problems)
    assert any("looks like a real key" in p for p in problems)


def test_k8s_inlined_broker_url_is_caught(docs) -> None:
    env = _container(docs, "worker-judge")["env"]
    url = next(e for e in env if e["name"] == "RAGSCORE_BROKER_URL")
    url["value"] = "redis://:hunter2@redis:6379/0"
    assert any("URL with a literal password" in p for p in checks.check_k8s_secrets(docs))
    assert any("never uses it" in p for p in checks.check_k8s_redis_password(docs))


# ------------------------------------------------------------------------------------ the other invariants


def test_removed_gpu_reservation_and_limit_are_caught(cfg, docs) -> None:
    del cfg["services"]["worker-embed"]["deploy"]
    assert checks.check_compose_gpu(cfg) != []
    del _container(docs, "worker-embed")["resources"]["limits"]["nvidia.com/gpu"]
    del _deployment(docs, "worker-embed")["spec"]["template"]["spec"]["nodeSelector"]
    assert checks.check_k8s_gpu(docs) == [
        "worker-embed: no nvidia.com/gpu limit",
        "worker-embed: no node selection for GPU nodes",
    ]


def test_unpinned_images_are_caught(cfg, docs) -> None:
    cfg["services"]["redis"]["image"] = "redis:latest"
    cfg["services"]["flower"]["image"] = "ragscore-cpu"
    assert checks.check_compose_images(cfg) == [
        "redis: redis:latest: tag 'latest' is not a pinned version",
        "flower: ragscore-cpu: no tag",
    ]
    _container(docs, "worker-code")["image"] = "registry.example.com:5000/ragscore-cpu"
    assert any("no tag" in p for p in checks.check_k8s_resources_and_probes(docs))
    assert checks.check_image_pinned("redis@sha256:" + "0" * 64) == []


def test_missing_healthcheck_and_probes_are_caught(cfg, docs) -> None:
    del cfg["services"]["worker-judge"]["healthcheck"]
    assert checks.check_compose_healthchecks(cfg) == ["worker-judge: long-running service without a healthcheck"]
    del _container(docs, "worker-judge")["livenessProbe"]
    assert checks.check_k8s_resources_and_probes(docs) == ["Deployment/worker-judge/worker: no livenessProbe"]


def test_keda_trigger_on_the_wrong_list_is_caught(docs) -> None:
    scaled = next(d for d in checks.k8s_of_kind(docs, "ScaledObject") if d["metadata"]["name"] == "worker-judge")
    scaled["spec"]["triggers"][0]["metadata"]["listName"] = "celery"
    assert checks.check_keda(docs) == ["worker-judge: KEDA watches lists ['celery'], queue lists are ['judge']"]


def test_keda_scaling_every_worker_to_zero_is_caught(docs) -> None:
    for scaled in checks.k8s_of_kind(docs, "ScaledObject"):
        scaled["spec"]["minReplicaCount"] = 0
    assert checks.check_keda(docs) == ["every worker kind scales to zero: the control queue can lose its last consumer"]


def test_unscalable_or_drifted_compose_worker_is_caught(cfg) -> None:
    worker = cfg["services"]["worker-cpu"]
    worker["container_name"] = "ragscore-cpu"
    worker["stop_grace_period"] = "10s"
    command = worker["command"]
    command[command.index("prefork")] = "threads"
    problems = checks.check_compose_workers(cfg)
    assert "worker-cpu: container_name prevents docker compose up --scale" in problems
    assert any("stop_grace_period 10s" in p for p in problems)
    assert any("pool should be prefork" in p for p in problems)


def test_code_worker_privileges_are_caught(cfg) -> None:
    code = cfg["services"]["worker-code"]
    code["cap_drop"] = []
    code["networks"] = ["internal", "egress"]
    code["env_file"] = ["deploy/judge.env"]
    assert checks.check_compose_code_worker(cfg) == [
        "worker-code: capabilities not all dropped",
        "worker-code: receives secrets beyond the broker URL",
        "worker-code: on network 'egress', which has a route out",
    ]


def test_kustomization_forgetting_a_manifest_is_caught(tmp_path: Path) -> None:
    for path in checks.K8S_DIR.glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "worker-extra.yaml").write_text("kind: ConfigMap\n")
    assert checks.check_kustomization(tmp_path) == ["kustomization.yaml: worker-extra.yaml not listed"]
