"""``forge``: the command line for users (datasets, jobs, models) and operators (the stack).

Exit codes: 0 success (a watched job succeeded), 1 the watched job failed, 2 a usage or API
error, 3 the watched job was canceled, 4 it was stopped (its best model is kept).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from . import samples
from .client import ApiError, ForgeClient
from .follow import TERMINAL, JobFollower

app = typer.Typer(help="Forge: train models on immutable dataset versions.", no_args_is_help=True)
datasets_app = typer.Typer(help="Datasets and their immutable versions.", no_args_is_help=True)
jobs_app = typer.Typer(help="Training jobs.", no_args_is_help=True)
models_app = typer.Typer(help="Registered models and their versions.", no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")
app.add_typer(jobs_app, name="jobs")
app.add_typer(models_app, name="models")

console = Console()
err = Console(stderr=True)

EXIT = {"succeeded": 0, "failed": 1, "canceled": 3, "stopped": 4}

ApiOption = Annotated[str, typer.Option("--api", envvar="FORGE_API_URL", help="Forge API base URL")]
OutputOption = Annotated[str, typer.Option("--output", "-o", help="table or json")]


def _client(api: str) -> ForgeClient:
    return ForgeClient(api)


@contextlib.contextmanager
def connected(api: str) -> Iterator[ForgeClient]:
    """A client whose API errors end the command with the API's message (exit code 2)."""
    with ForgeClient(api) as client:
        try:
            yield client
        except ApiError as exc:
            raise _fail(exc) from None


def _fail(exc: ApiError) -> typer.Exit:
    err.print(f"[red]error:[/red] {exc.detail}")
    report = exc.body.get("report")
    if report:
        for problem in report.get("errors", [])[:50]:
            where = problem["file"] + (f":{problem['line']}" if problem.get("line") else "")
            err.print(f"  {where}: {problem['message']}")
    return typer.Exit(2)


def _print(data: Any, output: str, columns: list[str] | None = None) -> None:
    if output == "json" or columns is None:
        console.print_json(json.dumps(data, default=str))
        return
    rows = data if isinstance(data, list) else [data]
    table = Table(*columns)
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return str(value)


# ---- datasets -----------------------------------------------------------------------------------------


@datasets_app.command("create")
def datasets_create(name: str, description: str = "", api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """Create an empty dataset."""
    with connected(api) as c:
        _print(c.post("/v1/datasets", {"name": name, "description": description}), output, ["name", "description", "created_at"])


def _ensure_dataset(c: ForgeClient, name: str) -> None:
    try:
        c.post("/v1/datasets", {"name": name})
    except ApiError as exc:
        if exc.status != 409:  # 409: it exists already
            raise


def _archive(path: Path) -> tuple[Path, bool]:
    """An archive to upload: the file itself, or a temporary .tar.gz of a folder."""
    if path.is_file():
        return path, False
    if not path.is_dir():
        raise typer.BadParameter(f"{path} is neither a folder nor an archive")
    fd, tmp = tempfile.mkstemp(suffix=".tar.gz")
    os.close(fd)
    with tarfile.open(tmp, "w:gz") as tar:
        for item in sorted(path.rglob("*")):
            if (item.is_file() or item.is_dir()) and not item.is_symlink():  # folders too: an empty class folder is reported
                tar.add(item, arcname=item.relative_to(path).as_posix(), recursive=False)
    return Path(tmp), True


@datasets_app.command("upload")
def datasets_upload(
    name: str,
    path: Path,
    format: Annotated[str | None, typer.Option(help="Declare the format instead of detecting it")] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="A base model (forge base-models list) whose tokenizer counts the token lengths of LLM/VLM data")
    ] = None,
    create: Annotated[bool, typer.Option(help="Create the dataset if it does not exist")] = True,
    api: ApiOption = "http://127.0.0.1:8000",
    output: OutputOption = "table",
) -> None:
    """Upload a folder or an archive (.zip, .tar, .tar.gz) as the next version of a dataset."""
    archive, temporary = _archive(path)
    try:
        with _client(api) as c:
            if create:
                _ensure_dataset(c, name)
            version = c.upload_version(name, archive, format, tokenizer)
    except ApiError as exc:
        raise _fail(exc) from None
    finally:
        if temporary:
            archive.unlink(missing_ok=True)
    if output == "json":
        _print(version, output)
        return
    note = "new version" if version.get("created", True) else "identical content: existing version"
    console.print(f"{name} v{version['version']} ({version['format']}, {version['file_count']} files) — {note}")
    for w in version["report"].get("warnings", [])[:20]:
        console.print(f"  [yellow]warning[/yellow] {w['file']}: {w['message']}")


@datasets_app.command("list")
def datasets_list(api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    with connected(api) as c:
        _print(c.get("/v1/datasets"), output, ["name", "latest_version", "description", "created_at"])


@datasets_app.command("show")
def datasets_show(name: str, version: int | None = None, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "json") -> None:
    """A dataset's versions (or one version) with format, stats and validation report."""
    with connected(api) as c:
        path = f"/v1/datasets/{name}/versions" + (f"/{version}" if version else "")
        _print(c.get(path), output, ["version", "format", "tasks", "file_count", "size_bytes", "content_hash", "created_at"])


@datasets_app.command("import")
def datasets_import(
    name: str,
    uri: str,
    format: Annotated[str | None, typer.Option(help="Declare the format instead of detecting it")] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="A base model (forge base-models list) whose tokenizer counts the token lengths of LLM/VLM data")
    ] = None,
    create: Annotated[bool, typer.Option(help="Create the dataset if it does not exist")] = True,
    api: ApiOption = "http://127.0.0.1:8000",
    output: OutputOption = "table",
) -> None:
    """Import an object-storage prefix (s3://bucket/prefix) as the next version of a dataset."""
    with connected(api) as c:
        if create:
            _ensure_dataset(c, name)
        version = c.post(f"/v1/datasets/{name}/imports", {"uri": uri, "format": format, "tokenizer": tokenizer})
    _print(version, output, ["dataset", "version", "format", "tasks", "file_count", "created"])


@datasets_app.command("delete")
def datasets_delete(name: str, version: int, api: ApiOption = "http://127.0.0.1:8000") -> None:
    """Delete a version (refused while a model trained on it exists)."""
    with connected(api) as c:
        c.request("DELETE", f"/v1/datasets/{name}/versions/{version}")
    console.print(f"deleted {name} v{version}")


@datasets_app.command("sample")
def datasets_sample(
    dest: Path,
    per_class: Annotated[int, typer.Option(min=2)] = 24,
    size: Annotated[int, typer.Option(min=16)] = 48,
    seed: int = 0,
) -> None:
    """Generate a small image-classification dataset (coloured shapes) into DEST."""
    samples.shapes(dest, per_class=per_class, size=size, seed=seed)
    console.print(f"wrote {len(samples.SHAPES) * per_class} images in {len(samples.SHAPES)} class folders under {dest}")


# ---- jobs ---------------------------------------------------------------------------------------------

JOB_COLUMNS = ["id", "name", "task", "state", "progress", "epochs_completed", "created_at"]


def _load_spec(path: Path) -> dict[str, Any]:
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}") from None
    if not isinstance(spec, dict):
        raise typer.BadParameter(f"{path} must hold a mapping (name, task, dataset, base_model, hyperparameters, …)")
    return spec


@jobs_app.command("submit")
def jobs_submit(
    spec: Path,
    start: Annotated[bool, typer.Option("--start/--draft", help="Queue it now, or keep it as a draft")] = True,
    watch: Annotated[bool, typer.Option(help="Follow it until it ends")] = False,
    api: ApiOption = "http://127.0.0.1:8000",
    output: OutputOption = "table",
) -> None:
    """Submit a job from a YAML or JSON spec."""
    body = {**_load_spec(spec), "start": start}
    with connected(api) as c:
        job = c.post("/v1/jobs", body)
        if not watch:
            _print(job, output, JOB_COLUMNS)
            return
        console.print(f"job {job['id']} ({job['name']}) {job['state']}")
        raise typer.Exit(_watch(c, job["id"], output))


@jobs_app.command("list")
def jobs_list(state: str | None = None, limit: int = 50, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    with connected(api) as c:
        _print(c.get("/v1/jobs", state=state, limit=limit), output, JOB_COLUMNS)


@jobs_app.command("show")
def jobs_show(job_id: str, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "json") -> None:
    with connected(api) as c:
        _print(c.get(f"/v1/jobs/{job_id}"), output, [*JOB_COLUMNS, "best_metrics", "error"])


@jobs_app.command("start")
def jobs_start(job_id: str, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """Queue a draft."""
    with connected(api) as c:
        _print(c.post(f"/v1/jobs/{job_id}/start"), output, JOB_COLUMNS)


@jobs_app.command("stop")
def jobs_stop(job_id: str, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """Stop a job: after ≥1 completed epoch it keeps its best model (stopped); before, nothing (canceled)."""
    with connected(api) as c:
        _print(c.post(f"/v1/jobs/{job_id}/stop"), output, JOB_COLUMNS)


@jobs_app.command("resume")
def jobs_resume(job_id: str, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """A new attempt of a stopped or failed job, from its last checkpoint."""
    with connected(api) as c:
        _print(c.post(f"/v1/jobs/{job_id}/resume"), output, JOB_COLUMNS)


@jobs_app.command("duplicate")
def jobs_duplicate(job_id: str, name: str | None = None, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """A new draft with the same spec (start it with `forge jobs start`)."""
    with connected(api) as c:
        _print(c.post(f"/v1/jobs/{job_id}/duplicate", {"name": name} if name else None), output, JOB_COLUMNS)


@jobs_app.command("deploy")
def jobs_deploy(
    job_id: str,
    wait: Annotated[bool, typer.Option(help="Wait until the model version is registered")] = True,
    api: ApiOption = "http://127.0.0.1:8000",
    output: OutputOption = "table",
) -> None:
    """Register a succeeded or stopped job's model (jobs with registration: manual). Idempotent."""
    with connected(api) as c:
        job = c.post(f"/v1/jobs/{job_id}/deploy")
        deadline = time.monotonic() + 120
        while wait and not job.get("model") and time.monotonic() < deadline:
            time.sleep(0.5)
            job = c.get(f"/v1/jobs/{job_id}")
    if output == "json":
        _print(job, output)
    elif job.get("model"):
        console.print(f"model: {job['model']['name']} v{job['model']['version']}")
    else:
        console.print(f"registration of {job['name']} requested; `forge jobs show {job_id}` shows its model once registered")
    if wait and not job.get("model"):
        raise typer.Exit(1)


@jobs_app.command("priority")
def jobs_priority(job_id: str, priority: str, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """Re-prioritise a queued job (low, normal or high)."""
    with connected(api) as c:
        _print(c.request("PATCH", f"/v1/jobs/{job_id}", json={"priority": priority}), output, [*JOB_COLUMNS, "queue_position"])


@app.command("queue")
def queue(api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """Each accelerator's queue with positions and estimated starts."""
    with connected(api) as c:
        data = c.get("/v1/queue")
    if output == "json":
        _print(data, output)
        return
    for q in data:
        console.print(f"[bold]{q['accelerator']}[/bold]: {q['running']} running on {q['slots']} slot(s), {len(q['queued'])} queued")
        if q["queued"]:
            _print(q["queued"], output, ["position", "name", "task", "priority", "estimated_start", "id"])


@app.command("accelerators")
def accelerators(api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """The accelerator profiles this installation can allocate, with counts and grades."""
    with connected(api) as c:
        _print(c.get("/v1/accelerators"), output, ["name", "count", "resource", "grades", "detail"])


@jobs_app.command("logs")
def jobs_logs(
    job_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends")] = False,
    api: ApiOption = "http://127.0.0.1:8000",
) -> None:
    with connected(api) as c:
        # A job that has ended reads its output from the database (its stream's history may have
        # expired); one that runs is followed live.
        if not follow or c.get(f"/v1/jobs/{job_id}")["state"] in TERMINAL:
            after = 0
            while True:
                page = c.get(f"/v1/jobs/{job_id}/logs", after=after, limit=5000)
                for line in page["lines"]:
                    console.print(line["text"], markup=False, highlight=False)
                if not page["lines"]:
                    return
                after = page["next_after"]
        follower = JobFollower()
        for event, _, data in c.events(job_id):
            follower.feed(event, data)
            if event == "logs":
                for line in data["data"]["lines"]:
                    console.print(line["text"], markup=False, highlight=False)
            if (follower.ended and follower.output_read) or follower.never_ran:
                return  # the trainer is gone and its output was read to the end, or it never ran


@jobs_app.command("watch")
def jobs_watch(job_id: str, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """Follow a job with a progress bar until it ends; the exit code says how it ended."""
    with connected(api) as c:
        raise typer.Exit(_watch(c, job_id, output))


def _watch(c: ForgeClient, job_id: str, output: str) -> int:
    follower = JobFollower()
    total = None
    deadline: float | None = None
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.2f}/{task.total} epochs"),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=output == "json",
    ) as progress:
        bar = progress.add_task("queued", total=None, info="")
        for event, _, data in c.events(job_id):
            follower.feed(event, data)
            progress.update(bar, description=follower.state)
            if event == "snapshot":
                total = data.get("total_epochs")
                progress.update(bar, total=total)
            elif event == "metrics":
                d = data["data"]
                if d.get("progress") is not None and total:
                    progress.update(bar, completed=d["progress"] * total)
                progress.update(bar, info=" ".join(f"{k}={v:.4g}" for k, v in d["metrics"].items() if k in ("loss", "lr")))
            elif event == "epoch-completed":
                d = data["data"]
                total = d.get("total_epochs") or total
                progress.update(bar, completed=d["epoch"], total=total)
                progress.console.print(
                    f"epoch {d['epoch']}: "
                    + " ".join(f"{k}={v:.4g}" for k, v in d["metrics"].items())
                    + (" (best)" if d["is_best"] else "")
                )
            if follower.settled:
                break
            if follower.ended:
                deadline = deadline or time.monotonic() + 30  # give the registrar a moment
                if time.monotonic() > deadline:
                    break
        if follower.state == "succeeded":
            progress.update(bar, completed=total)
    job = c.get(f"/v1/jobs/{job_id}")
    if output == "json":
        _print(job, "json")
    else:
        console.print(f"[bold]{job['name']}[/bold] {job['state']} after {job['epochs_completed']} epoch(s)")
        if job.get("best_metrics"):
            console.print("best: " + " ".join(f"{k}={v:.4g}" for k, v in job["best_metrics"].items()))
        if job.get("error"):
            e = job["error"]
            err.print(f"[red]{e['reason']}[/red]: {e['message']}" + (f"\nhint: {e['hint']}" if e.get("hint") else ""))
        if job.get("model"):
            console.print(f"model: {job['model']['name']} v{job['model']['version']}")
    return EXIT.get(job["state"], 2)


# ---- base models --------------------------------------------------------------------------------------

base_models_app = typer.Typer(help="The base-model pool: what jobs start from.", no_args_is_help=True)
app.add_typer(base_models_app, name="base-models")


@base_models_app.command("list")
def base_models_list(task: str | None = None, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    with connected(api) as c:
        _print(c.get("/v1/base-models", task=task), output, ["name", "family", "tasks", "description"])


@base_models_app.command("show")
def base_models_show(name: str, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "json") -> None:
    with connected(api) as c:
        _print(c.get(f"/v1/base-models/{name}"), output, ["name", "family", "tasks", "source", "digest"])


@base_models_app.command("add")
def base_models_add(
    name: str,
    family: Annotated[str, typer.Option(help="timm, rt-detr, rt-detr-v2, segformer, qwen2, llama, causal-lm, qwen2-vl, idefics3, llava")],
    source: Annotated[str, typer.Option(help="A folder, s3://bucket/prefix, hub:<id>, or config:<file.json>")],
    architecture: Annotated[str | None, typer.Option(help="timm: the architecture of the checkpoint")] = None,
    license: str = "",
    description: str = "",
    api: ApiOption = "http://127.0.0.1:8000",
    output: OutputOption = "table",
) -> None:
    """Add a checkpoint (checked: files, config, weights) or a configuration to the pool."""
    config: dict[str, Any] = {"architecture": architecture} if architecture else {}
    if source.startswith("s3://"):
        src: dict[str, Any] = {"kind": "s3", "uri": source}
    elif source.startswith("hub:"):
        src = {"kind": "hub", "uri": source[4:]}
    elif source.startswith("config:"):
        src = {"kind": "config"}
        config.update(json.loads(Path(source[7:]).read_text()))
    else:
        src = {"kind": "local", "uri": str(Path(source).resolve())}
    if config:
        src["config"] = config
    with connected(api) as c:
        entry = c.post("/v1/base-models", {"name": name, "family": family, "source": src, "license": license, "description": description})
    _print(entry, output, ["name", "family", "tasks", "size_bytes", "digest"])
    if output != "json":  # JSON carries them in "warnings" (and must stay parseable)
        for warning in entry.get("warnings", []):
            console.print(f"[yellow]warning[/yellow] {warning}")


# ---- trainers ----------------------------------------------------------------------------------------

trainers_app = typer.Typer(help="Trainers: the built-in ones and those users register (a script or an image).", no_args_is_help=True)
app.add_typer(trainers_app, name="trainers")


@trainers_app.command("list")
def trainers_list(
    task: str | None = None, accelerator: str | None = None, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table"
) -> None:
    """Built-in and registered trainers; with --task/--accelerator only those that serve it there.
    A job names a registered one with `trainer: <name>` in its spec."""
    with connected(api) as c:
        rows = c.get("/v1/trainers", task=task, accelerator=accelerator)
    if output != "json":
        for r in rows:
            r["accelerators"] = ", ".join(f"{k} ({v['grade']})" for k, v in r["accelerators"].items())
    _print(rows, output, ["name", "version", "tasks", "accelerators", "main_metric", "builtin"])


@trainers_app.command("show")
def trainers_show(name: str, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "json") -> None:
    """A trainer's profile: tasks, accelerators with images and grades, hyperparameters schema, metrics."""
    with connected(api) as c:
        _print(c.get(f"/v1/trainers/{name}"), output, ["name", "version", "tasks", "main_metric"])


@trainers_app.command("register")
def trainers_register(profile: Path, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """Register a trainer from its capability profile (YAML or JSON): name, version, tasks,
    accelerators (image and grade each), script_uri, hyperparameters (JSON Schema), metrics."""
    body = _load_spec(profile)
    with connected(api) as c:
        _print(c.post("/v1/trainers", body), output, ["name", "version", "tasks", "main_metric"])


# ---- models -------------------------------------------------------------------------------------------


@models_app.command("list")
def models_list(api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    with connected(api) as c:
        _print(c.get("/v1/models"), output, ["name", "versions", "latest_version", "created_at"])


@models_app.command("show")
def models_show(name: str, version: int | None = None, api: ApiOption = "http://127.0.0.1:8000", output: OutputOption = "table") -> None:
    """A model's versions (or one version) with metrics and lineage."""
    with connected(api) as c:
        path = f"/v1/models/{name}/versions" + (f"/{version}" if version else "")
        _print(c.get(path), output, ["version", "job_id", "dataset", "base_model", "metrics", "created_at"])


@models_app.command("download")
def models_download(
    name: str,
    version: int,
    file: Annotated[
        str, typer.Option(help="onnx, weights, or a part the version lists under files (adapter, merged, …; folders come as .tar)")
    ] = "onnx",
    dest: Annotated[Path | None, typer.Option("--to", help="Where to write it")] = None,
    api: ApiOption = "http://127.0.0.1:8000",
) -> None:
    try:
        with (
            _client(api) as c,
            c.http.stream("GET", f"/v1/models/{name}/versions/{version}/download", params={"file": file}, follow_redirects=True) as r,
        ):
            if not r.is_success:
                r.read()
                c._check(r)
            sent = re.search(r'filename="([^"/\\]+)"', r.headers.get("content-disposition", ""))
            target = dest or Path(sent.group(1) if sent else f"{name}-v{version}-{file}")
            with open(target, "wb") as out:
                for chunk in r.iter_bytes():
                    out.write(chunk)
    except ApiError as exc:
        raise _fail(exc) from None
    console.print(f"wrote {target}")


# ---- operators ----------------------------------------------------------------------------------------

stack_app = typer.Typer(help="Run Forge on this machine (embedded NATS, PostgreSQL and object store).", no_args_is_help=True)
app.add_typer(stack_app, name="stack")


@stack_app.command("up")
def stack_up() -> None:
    """Start the embedded stack in the foreground; Ctrl-C stops all of it."""
    from .stack import up

    raise typer.Exit(up())


def main() -> None:
    app()
