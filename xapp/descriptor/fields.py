"""What every model of the descriptor shares: the pydantic configuration (camelCase aliases,
attribute docstrings as descriptions, frozen), the field types used in several places, and
when a change of a setting takes effect in a running xApp (``x-applies``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

MODEL_CONFIG = ConfigDict(
    populate_by_name=True,
    alias_generator=to_camel,
    extra="forbid",
    frozen=True,
    allow_inf_nan=False,  # JSON Schema bounds let NaN through (every comparison is false)
    use_attribute_docstrings=True,
)

Quantile = Annotated[float, Field(gt=0, lt=1)]
Port = Annotated[int, Field(ge=1, le=65535)]
# A model's name: its directory's in the repository, and a segment of its routes' paths.
ModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
# A cell as the REST API and the A1 policies name it. No "/": a cell is addressed in paths
# (/v1/cells/{id}/forecast), where one could not be.
MAX_CELL_ID = 256
CELL_ID_PATTERN = r"^[^/]+$"
CellId = Annotated[str, Field(min_length=1, max_length=MAX_CELL_ID, pattern=CELL_ID_PATTERN)]
MessageTypes = list[Annotated[str, Field(min_length=1)]]

# When a change of a setting takes effect in a running xApp, declared on the field as
# ``x-applies`` (in the schemas and the configuration reference; a field without one takes its
# parent's, and the controls are "live"): live, at once; reload, once the models are reloaded
# (a new ONNX Runtime session, which the change starts); restart, at the next start only (the
# change is refused while the xApp runs).
Applies = Literal["live", "reload", "restart"]
APPLIES = "x-applies"
ON_RELOAD: dict[str, Applies] = {APPLIES: "reload"}
ON_RESTART: dict[str, Applies] = {APPLIES: "restart"}


def applies(field: FieldInfo, inherited: Applies = "live") -> Applies:
    """When a change of ``field`` takes effect (``inherited``: its parent's)."""
    extra = field.json_schema_extra
    return extra.get(APPLIES, inherited) if isinstance(extra, dict) else inherited


def changed(old: BaseModel, new: BaseModel, when: Applies, inherited: Applies = "live",
            prefix: str = "") -> list[str]:
    """The settings (their dotted names, as in the descriptor) whose values differ between
    ``old`` and ``new`` and take effect ``when``."""
    found = []
    for name, field in type(old).model_fields.items():
        before, after = getattr(old, name), getattr(new, name)
        if before == after:
            continue
        own = applies(field, inherited)
        key = prefix + (field.alias or name)
        if isinstance(before, BaseModel) and type(before) is type(after):
            found += changed(before, after, when, own, key + ".")
        elif own == when:
            found.append(key)
    return found



def unique_items(values: list | None, what: str = "the items") -> list | None:
    """The schema's uniqueItems; pydantic has no list-uniqueness constraint of its own."""
    if values is not None and len(set(values)) != len(values):
        raise ValueError(f"{what} must be unique")
    return values
