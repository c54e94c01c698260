from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Path, UploadFile
from fastapi.responses import JSONResponse, Response

from forge_common.errors import NotFound

from ..deps import ConnDep, ServicesDep
from ..projects import ProjectDep
from . import repository as repo
from . import service, tokenizers
from .schemas import Dataset, DatasetCreate, DatasetVersion, ImportIn

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


@router.post("", status_code=201, response_model=Dataset)
async def create_dataset(body: DatasetCreate, conn: ConnDep, project: ProjectDep) -> Dataset:
    """Create an empty dataset; add content with versions."""
    return Dataset.of(await service.create_dataset(conn, project, body.name, body.description))


@router.get("", response_model=list[Dataset])
async def list_datasets(conn: ConnDep, project: ProjectDep) -> list[Dataset]:
    return [Dataset.of(r) for r in await repo.list_datasets(conn, project)]


@router.get("/{name}", response_model=Dataset)
async def get_dataset(name: str, conn: ConnDep, project: ProjectDep) -> Dataset:
    row = await service.get_dataset(conn, project, name)
    rows = await repo.list_versions(conn, row["id"])
    return Dataset(
        name=row["name"], description=row["description"], latest_version=rows[-1]["version"] if rows else None, created_at=row["created_at"]
    )


@router.post(
    "/{name}/versions",
    status_code=201,
    response_model=DatasetVersion,
    responses={200: {"model": DatasetVersion, "description": "Identical content exists already: that version"}},
)
async def add_version(
    name: str,
    services: ServicesDep,
    project: ProjectDep,
    file: Annotated[UploadFile, File(description="A .zip, .tar or .tar.gz archive of the dataset")],
    format: Annotated[str | None, Form(description="Declare the format instead of detecting it")] = None,
    tokenizer: Annotated[str | None, Form(description="A base model whose tokenizer counts the token lengths of LLM/VLM data")] = None,
) -> JSONResponse:
    """Upload an archive as the next immutable version (identical content returns the existing one).
    Nothing is stored unless the whole archive is safe and valid; the report says what is wrong."""
    counter = await tokenizers.counter(services, project, tokenizer)
    row, created = await service.add_version(services, project, name, file, format, counter)
    version = DatasetVersion.of(name, row, created=created)
    return JSONResponse(status_code=201 if created else 200, content=version.model_dump(mode="json"))


@router.post("/{name}/imports", status_code=201, response_model=DatasetVersion, responses={200: {"model": DatasetVersion}})
async def import_version(name: str, body: ImportIn, services: ServicesDep, project: ProjectDep) -> JSONResponse:
    """The next version from an object-storage prefix (``s3://bucket/prefix``), checked like an upload."""
    counter = await tokenizers.counter(services, project, body.tokenizer)
    row, created = await service.import_version(services, project, name, body.uri, body.format, counter)
    version = DatasetVersion.of(name, row, created=created)
    return JSONResponse(status_code=201 if created else 200, content=version.model_dump(mode="json"))


@router.delete("/{name}/versions/{version}", status_code=204)
async def delete_version(name: str, version: Annotated[int, Path(ge=1)], services: ServicesDep, project: ProjectDep) -> Response:
    """Refused (409) while a model trained on it exists."""
    await service.delete_version(services, project, name, version)
    return Response(status_code=204)


@router.get("/{name}/versions", response_model=list[DatasetVersion])
async def list_versions(name: str, conn: ConnDep, project: ProjectDep) -> list[DatasetVersion]:
    dataset = await service.get_dataset(conn, project, name)
    return [DatasetVersion.of(name, r) for r in await repo.list_versions(conn, dataset["id"])]


@router.get("/{name}/versions/{version}", response_model=DatasetVersion)
async def get_version(name: str, version: Annotated[int, Path(ge=1)], conn: ConnDep, project: ProjectDep) -> DatasetVersion:
    dataset = await service.get_dataset(conn, project, name)
    row = await repo.get_version(conn, dataset["id"], version)
    if row is None:
        raise NotFound(f"dataset {name!r} has no version {version}", field="version")
    return DatasetVersion.of(name, row)
