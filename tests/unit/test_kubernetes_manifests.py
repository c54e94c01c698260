"""Every manifest Forge gives Kubernetes is valid for Kubernetes 1.33 — checked strictly (wrong
types, missing and misspelled fields fail) with kubernetes-validate, since no API server can run
here — and says what the design needs: the Job's failure and stop semantics, labels, resources,
and object-storage credentials only ever through a Secret."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic_settings import BaseSettings

from forge_api.settings import ApiSettings
from forge_common.accelerators import PROFILES
from forge_common.settings import CommonSettings
from forge_log_relay.settings import LogRelaySettings
from forge_registrar.settings import RegistrarSettings
from forge_scheduler.executors.base import LaunchSpec
from forge_scheduler.executors.kubernetes import (
    RESULT_FILE,
    RUN_DIR,
    build_job,
    job_name,
    manifest,
    tolerations_for,
)
from forge_scheduler.settings import SchedulerSettings

ROOT = Path(__file__).resolve().parents[2]
KUBE_DIR = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.33"
JOB_ID = "6f1c1b52-3a7e-4c8e-9a0d-2f4b1e7c9d10"
SECRET_SENTINEL = "s3-secret-that-must-never-appear"
ACCESS_SENTINEL = "s3-access-that-must-never-appear"
SECRET_NAME = re.compile(r"(SECRET_KEY|ACCESS_KEY|PASSWORD|DATABASE_URL|TOKEN)$")  # values, not names of Secrets


def validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def settings(**overrides: Any) -> SchedulerSettings:
    base: dict[str, Any] = {
        "kube_namespace": "ml",
        "kube_image": "registry.example/forge/trainer",
        "kube_image_tag": "1.2.3",
        "kube_s3_secret_name": "forge-s3",
        "kube_cpu_request": "2",
        "kube_memory_request": "8Gi",
        "kube_ttl_seconds": 600,
        "kube_node_selector": {"nvidia": {"nvidia.com/gpu.present": "true"}, "*": {"pool": "training"}},
        "kube_tolerations": {"nvidia": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }
    return SchedulerSettings(**{**base, **overrides})


def spec(**overrides: Any) -> LaunchSpec:
    values: dict[str, Any] = {
        "job_id": JOB_ID,
        "attempt": 2,
        "run_ref": f"ml/{job_name(JOB_ID, 2)}",
        "command": ["python", "-m", "forge_trainers.classification"],
        "env": {
            "OUTPUT_DIR": "s3://forge/jobs/x/2",
            "CONFIG_JSON": '{"epochs": 3}',
            "S3_ENDPOINT": "minio:9000",
            # what the scheduler passes today: the executor must drop these
            "S3_ACCESS_KEY": ACCESS_SENTINEL,
            "S3_SECRET_KEY": SECRET_SENTINEL,
        },
        "stop_grace_seconds": 45.5,
        "labels": {"forge.job-id": JOB_ID, "forge.attempt": "2"},
    }
    return LaunchSpec(**{**values, **overrides})


CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "cpu": ({}, {}),
    "cpu-with-time-limit": ({"time_limit_seconds": 3600}, {}),
    "nvidia-4-devices": ({"accelerator": "nvidia", "devices": 4, "time_limit_seconds": 7200}, {}),
    "amd": ({"accelerator": "amd"}, {}),
    "intel": ({"accelerator": "intel", "devices": 2}, {}),
    "custom-image-with-pull-secret": (
        {"image": "registry.example/team/my-trainer:7", "accelerator": "nvidia", "command": []},
        {"kube_image_pull_secret": "regcred", "kube_service_account": "forge-trainer", "kube_memory_limit": "12Gi"},
    ),
    "custom-image-with-the-jobs-own-pull-secret": (
        {"image": "private.example/team/trainer:1", "command": [], "image_pull_secret": "team-registry"},
        {"kube_image_pull_secret": "regcred"},
    ),
}


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest) -> tuple[LaunchSpec, SchedulerSettings, dict[str, Any]]:
    spec_overrides, settings_overrides = CASES[request.param]
    s, sett = spec(**spec_overrides), settings(**settings_overrides)
    return s, sett, manifest(build_job(s, sett))


def container_of(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


# ---- the executor's Jobs ----------------------------------------------------------------------------


def test_every_job_manifest_is_valid_kubernetes(case: tuple[LaunchSpec, SchedulerSettings, dict[str, Any]]) -> None:
    _, _, doc = case
    validate(doc)
    assert (doc["apiVersion"], doc["kind"]) == ("batch/v1", "Job")


def test_the_job_runs_once_and_never_replaces_its_pod(case: tuple[LaunchSpec, SchedulerSettings, dict[str, Any]]) -> None:
    s, sett, doc = case
    job = doc["spec"]
    assert job["backoffLimit"] == 0 and job["completions"] == 1 and job["parallelism"] == 1
    assert job["podReplacementPolicy"] == "Failed"
    (rule,) = job["podFailurePolicy"]["rules"]
    assert rule == {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert job["ttlSecondsAfterFinished"] == sett.kube_ttl_seconds
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["terminationGracePeriodSeconds"] == math.ceil(s.stop_grace_seconds) == 46
    if s.time_limit_seconds:
        assert job["activeDeadlineSeconds"] == s.time_limit_seconds
    else:
        assert "activeDeadlineSeconds" not in job


def test_names_and_labels_find_the_attempt(case: tuple[LaunchSpec, SchedulerSettings, dict[str, Any]]) -> None:
    s, _, doc = case
    name = doc["metadata"]["name"]
    assert s.run_ref == f"ml/{name}" and doc["metadata"]["namespace"] == "ml"
    for labels in (doc["metadata"]["labels"], doc["spec"]["template"]["metadata"]["labels"]):
        assert labels["forge.job-id"] == JOB_ID and labels["forge.attempt"] == "2"
        assert labels["forge.run"] == name and labels["forge.profile"] == s.accelerator
        assert labels["app.kubernetes.io/managed-by"] == "forge-scheduler" and labels["app.kubernetes.io/part-of"] == "forge"


def test_resources_come_from_the_profile_and_the_settings(case: tuple[LaunchSpec, SchedulerSettings, dict[str, Any]]) -> None:
    s, sett, doc = case
    resources = container_of(doc)["resources"]
    profile = PROFILES[s.accelerator]
    assert resources["requests"]["cpu"] == sett.kube_cpu_request and resources["requests"]["memory"] == sett.kube_memory_request
    assert resources["limits"]["memory"] == (sett.kube_memory_limit or sett.kube_memory_request)
    for kind in ("requests", "limits"):
        assert all(isinstance(v, str) for v in resources[kind].values()), "quantities are strings"
        gpus = {k: v for k, v in resources[kind].items() if k not in ("cpu", "memory")}
        assert gpus == ({profile.resource: str(s.devices)} if profile.resource else {})


def test_the_image_is_the_profiles_or_the_custom_one(case: tuple[LaunchSpec, SchedulerSettings, dict[str, Any]]) -> None:
    s, sett, doc = case
    pod = doc["spec"]["template"]["spec"]
    expected = s.image or f"registry.example/forge/trainer{PROFILES[s.accelerator].image_suffix}:1.2.3"
    assert container_of(doc)["image"] == expected
    if s.command:
        assert container_of(doc)["command"] == s.command
    else:
        assert "command" not in container_of(doc), "a custom image without a command runs its own entrypoint"
    if sett.kube_image_pull_secret:
        expected_secrets = [{"name": "regcred"}] + ([{"name": s.image_pull_secret}] if s.image_pull_secret else [])
        assert pod["imagePullSecrets"] == expected_secrets
    else:
        assert "imagePullSecrets" not in pod
    assert pod["automountServiceAccountToken"] is False
    assert pod.get("serviceAccountName") == sett.kube_service_account


def test_node_selector_and_tolerations_per_profile(case: tuple[LaunchSpec, SchedulerSettings, dict[str, Any]]) -> None:
    s, _, doc = case
    pod = doc["spec"]["template"]["spec"]
    if s.accelerator == "nvidia":
        assert pod["nodeSelector"] == {"pool": "training", "nvidia.com/gpu.present": "true"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    else:
        assert pod["nodeSelector"] == {"pool": "training"} and "tolerations" not in pod


def test_object_storage_credentials_only_come_from_the_secret(case: tuple[LaunchSpec, SchedulerSettings, dict[str, Any]]) -> None:
    _, _, doc = case
    text = json.dumps(doc)
    assert SECRET_SENTINEL not in text and ACCESS_SENTINEL not in text, "an S3 credential is inline in the Job"
    env = {e["name"]: e for e in container_of(doc)["env"]}
    for key in ("S3_ACCESS_KEY", "S3_SECRET_KEY"):
        assert env[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": "forge-s3", "key": key}}}
    assert env["S3_ENDPOINT"]["value"] == "minio:9000"  # not a secret: passed on as given


def test_the_outcome_and_the_scratch_folder_live_in_the_writable_run_volume(
    case: tuple[LaunchSpec, SchedulerSettings, dict[str, Any]],
) -> None:
    _, _, doc = case
    container = container_of(doc)
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
    assert mounts[RUN_DIR] == "run" and volumes["run"] == {"name": "run", "emptyDir": {}}
    assert env["FORGE_RESULT_FILE"] == RESULT_FILE and env["FORGE_RESULT_FILE"].startswith(RUN_DIR + "/")
    assert env["FORGE_WORK_DIR"].startswith(RUN_DIR + "/") and env["PYTHONUNBUFFERED"] == "1"
    # the kubelet bind-mounts the termination-log file: the SDK's rename onto it would fail (EBUSY)
    assert container["terminationMessagePath"] == "/dev/termination-log" != env["FORGE_RESULT_FILE"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory"} and mounts["/dev/shm"] == "shm"


def test_job_names_are_dns_labels_and_deterministic() -> None:
    dns_label = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    assert job_name(JOB_ID, 1) == f"forge-{JOB_ID}-1" == job_name(JOB_ID, 1)
    odd = ["Job_With.Caps/and spaces", "x" * 100, "-leading", JOB_ID.upper()]
    names = {job_name(i, 12) for i in odd} | {job_name(JOB_ID, 12)}
    assert len(names) == len(odd) + 1, "different ids must not share a Job name"
    for name in names:
        assert dns_label.match(name) and len(name) <= 63, name


def test_a_misspelled_toleration_is_refused_with_the_setting_named() -> None:
    bad = settings(kube_tolerations={"nvidia": [{"key": "nvidia.com/gpu", "efect": "NoSchedule"}]})
    with pytest.raises(ValueError, match=r"kube_tolerations\['nvidia'\].*efect"):
        tolerations_for(bad, "nvidia")


def test_strict_validation_catches_what_it_must() -> None:
    """The checks above mean something only if the validator rejects bad manifests."""
    good = manifest(build_job(spec(), settings()))
    misspelled = json.loads(json.dumps(good))
    misspelled["spec"]["backofLimit"] = 0
    wrong_type = json.loads(json.dumps(good))
    wrong_type["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = {"cores": 2}
    missing = json.loads(json.dumps(good))
    del missing["spec"]["template"]["spec"]["containers"][0]["name"]
    for bad in (misspelled, wrong_type, missing):
        with pytest.raises(kubernetes_validate.ValidationError):
            validate(bad)


# ---- deploy/kubernetes ------------------------------------------------------------------------------


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(KUBE_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        out.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return out


DOCS = documents()


def kustomization() -> dict[str, Any]:
    return yaml.safe_load((KUBE_DIR / "kustomization.yaml").read_text())  # type: ignore[no-any-return]


def find(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def env_vars(*classes: type[BaseSettings]) -> set[str]:
    return {f"{cls.model_config.get('env_prefix', '')}{name}".upper() for cls in classes for name in cls.model_fields}


@pytest.mark.parametrize(("filename", "doc"), DOCS, ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in DOCS])
def test_every_deploy_document_is_valid_kubernetes(filename: str, doc: dict[str, Any]) -> None:
    validate(doc)
    if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
        assert doc["metadata"].get("namespace") == "forge", f"{filename}: {doc['kind']} outside the forge namespace"


def test_the_kustomization_lists_every_manifest_and_its_generated_secrets() -> None:
    k = kustomization()
    assert k["kind"] == "Kustomization" and k["namespace"] == "forge"
    listed = set(k["resources"])
    present = {p.name for p in KUBE_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present, f"not listed: {present - listed}; listed but missing: {listed - present}"
    ignored = (KUBE_DIR / ".gitignore").read_text()
    for generator in k["secretGenerator"]:
        for env_file in generator["envs"]:
            assert (KUBE_DIR / f"{env_file}.example").exists(), f"{env_file} has no .example to start from"
            assert "secrets/*.env" in ignored, "the real secret files must be git-ignored"
    assert k["generatorOptions"]["disableNameSuffixHash"] is True  # the scheduler names forge-s3 in every pod


def _env_entries(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    template = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [(c["name"], e) for c in template.get("containers", []) for e in c.get("env", [])]


@pytest.mark.parametrize(("filename", "doc"), DOCS, ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in DOCS])
def test_no_secret_is_inline(filename: str, doc: dict[str, Any]) -> None:
    for container, entry in _env_entries(doc):
        if SECRET_NAME.search(entry["name"]):
            assert "value" not in entry and "secretKeyRef" in entry.get("valueFrom", {}), f"{filename}/{container}: {entry['name']}"
    if doc["kind"] == "ConfigMap":
        leaked = [k for k in doc["data"] if SECRET_NAME.search(k)]
        assert not leaked, f"{filename}: secrets in a ConfigMap: {leaked}"
    assert doc["kind"] != "Secret", f"{filename}: Secrets are generated from git-ignored files, never committed"


def test_the_config_only_sets_variables_the_services_read() -> None:
    data = find("ConfigMap", "forge-config")["data"]
    known = env_vars(CommonSettings, ApiSettings, SchedulerSettings, LogRelaySettings, RegistrarSettings)
    assert set(data) <= known, f"variables no setting reads: {set(data) - known}"
    assert all(isinstance(v, str) for v in data.values())
    assert data["FORGE_SCHEDULER_EXECUTOR"] == "kubernetes"
    generated = {g["name"] for g in kustomization()["secretGenerator"]}
    assert data["FORGE_SCHEDULER_KUBE_S3_SECRET_NAME"] in generated
    accounts = {d["metadata"]["name"] for _, d in DOCS if d["kind"] == "ServiceAccount"}
    assert data["FORGE_SCHEDULER_KUBE_SERVICE_ACCOUNT"] in accounts


SERVICES = {"api": (ApiSettings, "port"), "scheduler": (SchedulerSettings, "health_port"), "log-relay": (LogRelaySettings, "health_port")}
SERVICES["registrar"] = (RegistrarSettings, "health_port")


@pytest.mark.parametrize("name", list(SERVICES))
def test_each_service_is_a_deployment_with_probes_on_its_port(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    deployment, service = find("Deployment", name), find("Service", name)
    config = find("ConfigMap", "forge-config")["data"]
    for key, value in config.items():
        monkeypatch.setenv(key, value)
    settings_cls, field = SERVICES[name]
    port = getattr(settings_cls(), field)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == port, f"{name} listens on {port}"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert service["spec"]["ports"][0]["port"] == port and service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert container["envFrom"] == [{"configMapRef": {"name": "forge-config"}}]
    secret_env = {e["name"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert {"FORGE_DATABASE_URL", "FORGE_S3_ACCESS_KEY", "FORGE_S3_SECRET_KEY"} <= secret_env
    assert not any(v.get("hostPath") or v["name"] == "runs" for v in pod.get("volumes", [])), "no run folder on Kubernetes"


def test_the_infrastructure_is_there() -> None:
    nats = find("StatefulSet", "nats")["spec"]
    assert "-js" in nats["template"]["spec"]["containers"][0]["args"] and nats["volumeClaimTemplates"]
    for name in ("nats", "postgres", "minio"):
        stateful = find("StatefulSet", name)["spec"]
        assert stateful["serviceName"] == name and find("Service", name)
        assert stateful["template"]["spec"]["containers"][0]["readinessProbe"]


def _rules(kind: str, name: str) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in find(kind, name)["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_the_scheduler_may_do_what_the_executor_does_and_no_more() -> None:
    role = _rules("Role", "forge-scheduler")
    assert role[("batch", "jobs")] >= {"create", "get", "list", "watch", "delete"}
    assert role[("", "pods")] >= {"get", "list", "watch", "delete"} and role[("", "pods/log")] == {"get"}
    cluster = _rules("ClusterRole", "forge-scheduler-capacity")
    assert cluster[("", "nodes")] >= {"list"} and cluster[("", "pods")] >= {"list"}
    assert all(not ({"create", "delete", "update", "patch"} & verbs) for verbs in cluster.values()), "cluster-wide: read only"
    binding = find("ClusterRoleBinding", "forge-scheduler-capacity")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "forge-scheduler", "namespace": "forge"}]
    assert find("Deployment", "scheduler")["spec"]["template"]["spec"]["serviceAccountName"] == "forge-scheduler"
    namespace_env = [e for _, e in _env_entries(find("Deployment", "scheduler")) if e["name"] == "FORGE_SCHEDULER_KUBE_NAMESPACE"]
    assert namespace_env[0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_log_relay_may_read_pod_logs() -> None:
    role = _rules("Role", "forge-log-relay")
    assert role[("", "pods")] >= {"list"} and role[("", "pods/log")] == {"get"}
    assert find("Deployment", "log-relay")["spec"]["template"]["spec"]["serviceAccountName"] == "forge-log-relay"


def test_the_trainer_image_builds_every_profile_variant() -> None:
    text = (ROOT / "deploy" / "trainer.Dockerfile").read_text()
    for source in re.findall(r"^COPY (\S+) ", text, flags=re.M):
        assert (ROOT / source).exists(), f"trainer.Dockerfile copies {source}, which does not exist"
    assert re.search(r"^ARG VARIANT=cpu$", text, flags=re.M) and re.search(r"^ARG TORCH_INDEX=", text, flags=re.M)
    variants = set(re.findall(r"^\s+(\w+)\) index=", text, flags=re.M))
    assert {p.image_suffix.lstrip("-") or "cpu" for p in PROFILES.values()} == variants
    assert "trainers/sdk" in text and "trainers/builtin" in text and "USER 10001" in text
