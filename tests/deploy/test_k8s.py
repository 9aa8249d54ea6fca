"""deploy/k8s: invariants on every manifest, and schema validation with kubernetes-validate (offline)."""

from __future__ import annotations

import copy
import re
import subprocess

import kubernetes_validate
import pytest
import yaml

from . import checks

#: The oldest Kubernetes the manifests target (appArmorProfile is a 1.30 field).
K8S_VERSION = "1.30.0"


def test_every_queue_the_app_routes_to_has_a_consumer(docs) -> None:
    assert checks.check_consumers(checks.k8s_consumers(docs), checks.app_queues(), "k8s") == []


def test_worker_deployments_keep_pool_defaults_and_grace(docs) -> None:
    workers = {"worker-cpu", "worker-embed", "worker-judge", "worker-target", "worker-code"}
    assert set(checks.k8s_worker_deployments(docs)) == workers
    assert checks.check_k8s_workers(docs) == []


def test_every_pod_gets_the_redis_password_from_the_secret(docs) -> None:
    assert checks.check_k8s_redis_password(docs) == []


def test_no_secret_is_written_in_plain_text(docs) -> None:
    assert checks.check_k8s_secrets(docs) == []
    assert any(d.get("kind") == "Secret" for _, d in docs)  # the template is scanned too


def test_requests_limits_probes_and_pinned_images(docs) -> None:
    assert checks.check_k8s_resources_and_probes(docs) == []


def test_embed_workers_get_a_gpu_on_gpu_nodes(docs) -> None:
    assert checks.check_k8s_gpu(docs) == []


def test_keda_scales_each_worker_kind_on_its_own_queue_list(docs) -> None:
    assert checks.check_keda(docs) == []


def test_kustomization_applies_every_manifest_but_the_template_and_the_job() -> None:
    assert checks.check_kustomization() == []


def test_only_judge_workers_get_provider_keys_and_only_target_workers_the_rag_token(docs) -> None:
    expected = {"worker-judge": ["ragscore-judge"], "worker-target": ["ragscore-target"]}
    for doc in checks.k8s_workloads(docs):
        refs = [r["secretRef"]["name"] for c in checks._containers(doc) for r in c.get("envFrom") or []]
        assert refs == expected.get(doc["metadata"]["name"], []), doc["metadata"]


def test_code_worker_pod_is_locked_down(docs) -> None:
    code = next(d for d in checks.k8s_of_kind(docs, "Deployment") if d["metadata"]["name"] == "worker-code")
    pod = code["spec"]["template"]["spec"]
    container = pod["containers"][0]["securityContext"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "ragscore/code-worker.json",
    }
    assert container["capabilities"]["drop"] == ["ALL"]
    assert container["readOnlyRootFilesystem"] is True and container["allowPrivilegeEscalation"] is False
    policies = {d["metadata"]["name"]: d for d in checks.k8s_of_kind(docs, "NetworkPolicy")}
    egress = policies["worker-code-egress"]["spec"]
    assert egress["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "worker-code"}
    assert "Egress" in egress["policyTypes"]
    assert {p["port"] for rule in egress["egress"] for p in rule["ports"]} == {6379, 53}


def _validate(doc: checks.Doc) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_core_manifests_match_the_kubernetes_schemas(docs) -> None:
    unknown = set()
    validated = 0
    for name, doc in docs:
        try:
            _validate(doc)
            validated += 1
        except kubernetes_validate.SchemaNotFoundError:
            unknown.add(doc["kind"])
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - the failure message
            pytest.fail(f"{name} {doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")
    assert unknown == checks.NON_CORE_KINDS  # no schema package ships KEDA's CRDs: check_keda covers them
    assert validated >= 15


def test_schema_validation_catches_a_typo(docs) -> None:
    deployment = copy.deepcopy(checks.k8s_of_kind(docs, "Deployment")[0])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limts"] = container["resources"].pop("limits")
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(deployment)


def test_the_documented_quickstart_job_command_pulls_the_pushed_image() -> None:
    """kustomize's ``set image`` rewrites only what kustomization.yaml lists, not the on-demand Job: created as it
    was, the Job pulled ``ragscore-cpu`` from Docker Hub."""
    readme = (checks.ROOT / "deploy" / "README.md").read_text()
    (rewrite,) = re.findall(r"^(sed .*quickstart-job\.yaml) \\$", readme, re.M)
    job = yaml.safe_load(subprocess.run(rewrite, shell=True, cwd=checks.ROOT, capture_output=True, text=True,
                                        check=True).stdout)  # fmt: skip
    images = {c["image"] for c in job["spec"]["template"]["spec"]["containers"]}
    assert images == {"REGISTRY/ragscore-cpu:0.1.0"}


def test_flower_runs_the_command_the_compose_stack_test_runs(docs, cfg) -> None:
    """``ragscore flower`` refuses a malformed setting (test_stack_commands runs the compose service's command);
    the k8s Flower runs that same command, not a bare ``celery ... flower`` that retries amqp for ever."""
    (flower,) = [d for d in checks.k8s_of_kind(docs, "Deployment") if d["metadata"]["name"] == "flower"]
    (container,) = flower["spec"]["template"]["spec"]["containers"]
    assert container.get("command", []) + container["args"] == cfg["services"]["flower"]["command"]
