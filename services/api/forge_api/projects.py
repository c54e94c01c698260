"""Every resource belongs to a project. Until authentication lands, every caller works in the
``default`` project; the dependency is the one place that will change."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends

from forge_common import DEFAULT_PROJECT_ID


def current_project() -> uuid.UUID:
    return uuid.UUID(DEFAULT_PROJECT_ID)


ProjectDep = Annotated[uuid.UUID, Depends(current_project)]
