"""docker-compose.yml: invariants on the parsed file, and validation by the real compose binary (offline)."""

from __future__ import annotations

import json
from importlib.metadata import version as dist_version
from pathlib import Path

from . import checks
from .conftest import COMPOSE_ENV

WORKERS = {"worker-cpu", "worker-embed", "worker-judge", "worker-target", "worker-code"}


def test_every_queue_the_app_routes_to_has_a_consumer(cfg) -> None:
    queues = checks.app_queues()
    assert {"cpu", "embed", "judge", "code", "target", "control"} <= queues  # the app's own config, not a list here
    assert checks.check_consumers(checks.compose_consumers(cfg), queues, "compose") == []


def test_workers_scale_freely_and_keep_the_pool_defaults(cfg) -> None:
    assert WORKERS <= set(cfg["services"])
    assert checks.check_compose_workers(cfg) == []


def test_every_long_running_service_has_a_healthcheck(cfg) -> None:
    assert checks.check_compose_healthchecks(cfg) == []
    assert cfg["services"]["submit"]["restart"] == "no"  # the only one-shot service


def test_every_service_uses_the_redis_password(cfg) -> None:
    assert checks.check_compose_redis_password(cfg) == []


def test_redis_is_durable_and_never_evicts(cfg) -> None:
    script = cfg["services"]["redis"]["command"][-1]
    for option in ("--appendonly yes", "--maxmemory-policy noeviction", "redis-server -"):
        assert option in script
    assert "--requirepass" not in script  # the password goes through stdin, not argv


def test_embed_worker_reserves_a_gpu(cfg) -> None:
    assert checks.check_compose_gpu(cfg) == []


def test_images_are_pinned_and_ours_carry_the_project_version(cfg) -> None:
    assert checks.check_compose_images(cfg) == []
    version = dist_version("ragscore")
    ours = {svc["image"] for svc in cfg["services"].values() if "build" in svc}
    assert ours == {f"ragscore-cpu:{version}", f"ragscore-embed-gpu:{version}"}


def test_code_worker_runs_with_least_privilege(cfg) -> None:
    assert checks.check_compose_code_worker(cfg) == []
    profile = next(o for o in cfg["services"]["worker-code"]["security_opt"] if o.startswith("seccomp="))
    assert (checks.ROOT / profile.split("=", 1)[1]).is_file()


def test_no_secret_is_written_in_plain_text(cfg) -> None:
    assert checks.check_no_plain_secrets(cfg) == []
    for example in ("compose.env.example", "judge.env.example", "target.env.example"):
        for line in (checks.DEPLOY_DIR / example).read_text().splitlines():
            if line and not line.startswith("#"):
                assert line.endswith("="), f"{example}: {line!r} carries a value"


def test_real_env_files_stay_out_of_git() -> None:
    ignored = (checks.DEPLOY_DIR / ".gitignore").read_text().split()
    assert "judge.env" in ignored and "!*.env.example" in ignored
    assert "*.env" in ignored  # target.env too


def test_compose_binary_validates_the_file_offline(compose) -> None:
    result = compose("config", "-q")
    assert result.returncode == 0, result.stderr


def test_compose_refuses_to_start_without_a_redis_password(compose) -> None:
    result = compose("config", "-q", env={"FLOWER_BASIC_AUTH": COMPOSE_ENV["FLOWER_BASIC_AUTH"]})
    assert result.returncode != 0
    assert "REDIS_PASSWORD" in result.stderr


def test_compose_binary_rejects_a_broken_file(compose, tmp_path: Path) -> None:
    """The validation can fail: a GPU reservation with a misspelt key is refused."""
    broken = checks.COMPOSE_FILE.read_text().replace("capabilities: [gpu]", "capabilites: [gpu]")
    assert broken != checks.COMPOSE_FILE.read_text()
    path = tmp_path / "docker-compose.yml"
    path.write_text(broken)
    result = compose("config", "-q", file=path)
    assert result.returncode != 0
    assert "capabilites" in result.stderr


def test_gpu_worker_is_opt_in_by_profile(compose) -> None:
    default = set(compose("config", "--services").stdout.split())
    with_gpu = set(compose("--profile", "gpu", "config", "--services").stdout.split())
    assert with_gpu - default == {"worker-embed"}
    assert WORKERS <= with_gpu


def test_resolved_config_passes_the_password_to_every_service(compose) -> None:
    """After compose's own interpolation, every service holds the password the environment gave."""
    result = compose("--profile", "gpu", "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout)
    password = COMPOSE_ENV["REDIS_PASSWORD"]
    for name, svc in resolved["services"].items():
        assert password in json.dumps({k: svc.get(k) for k in ("command", "environment")}), name
    consumers = checks.compose_consumers(resolved)
    assert checks.check_consumers(consumers, checks.app_queues(), "resolved compose") == []
    assert not any("GROQ_API_KEY" in (svc.get("environment") or {}) for svc in resolved["services"].values())


def test_judge_keys_reach_the_judge_workers_only(compose, tmp_path: Path) -> None:
    """deploy/judge.env is optional; when present, only worker-judge receives its variables."""
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "judge.env").write_text("GROQ_API_KEY=test-only-value\n")
    file = tmp_path / "docker-compose.yml"
    file.write_text(checks.COMPOSE_FILE.read_text())
    result = compose("--profile", "gpu", "config", "--format", "json", file=file, project=tmp_path)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    holders = {name for name, svc in services.items() if "GROQ_API_KEY" in (svc.get("environment") or {})}
    assert holders == {"worker-judge"}
