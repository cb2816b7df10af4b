"""The topology file format, as pydantic models (``rayflow schema`` prints their JSON Schema).

name: wordcount
includes: [{file: base.yaml, override: false}]   # merged in before validation
config: {topology.acker.executors: 2}             # rayflow.Config; Storm's keys accepted
spouts:
  - {id: sentences, class: examples.wordcount.SentenceSpout, parallelism: 1}
bolts:
  - {id: split, class: examples.wordcount.SplitSentence, parallelism: 2, args: [], kwargs: {}}
streams:
  - {from: sentences, to: split, grouping: {type: shuffle}}
  - {from: split, to: count, grouping: {type: fields, fields: [word]}}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from .._config import Config

__all__ = [
    "GROUPING_TYPES",
    "ComponentEntry",
    "ConfigMapping",
    "GroupingSpec",
    "IncludeSpec",
    "StreamSpec",
    "TopologySpec",
]

GroupingType = Literal[
    "shuffle", "fields", "all", "global", "none", "direct", "local_or_shuffle", "partial_key", "custom"
]
GROUPING_TYPES: tuple[str, ...] = get_args(GroupingType)
KEYED_GROUPINGS = ("fields", "partial_key")
SECTIONS = ("spouts", "bolts")
"""The top-level keys that list components, spouts first (the order they are checked in)."""


ConfigMapping = Annotated[
    dict[str, Any],
    WithJsonSchema({**Config.model_json_schema(by_alias=True), "title": "Config"}),
]
"""A ``config:`` mapping. The schema only checks it is a mapping; its keys and values are
``rayflow.Config``'s to check (the loader asks ``Config.problems`` and puts each on its line).
Editors get ``Config``'s own JSON Schema for it."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IncludeSpec(_Spec):
    """Another file merged into this one. Its path is relative to the including file."""

    file: str = Field(min_length=1)
    override: bool = Field(False, description="true: the included file's values win over this file's")


class ComponentEntry(_Spec):
    """A spout or a bolt: built as ``class(*args, **kwargs)``, run by ``parallelism`` tasks."""

    id: str = Field(min_length=1)
    class_: str = Field(
        alias="class", min_length=1, description="dotted import path, e.g. examples.wordcount.SplitSentence"
    )
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    parallelism: int = Field(1, ge=1)
    config: ConfigMapping = Field(default_factory=dict, description="per-component config, e.g. tick_tuple_freq_secs")

    @field_validator("id")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.startswith("__"):
            raise ValueError("ids starting with '__' are reserved for rayflow's own tasks")
        return value


class GroupingSpec(_Spec):
    """How a stream's tuples are spread over the subscribing bolt's tasks."""

    type: GroupingType
    fields: list[str] | None = Field(None, description=f"required by the {' and '.join(KEYED_GROUPINGS)} groupings")
    stream: str = Field("default", min_length=1, description="the source's stream to subscribe to")
    class_: str | None = Field(
        None, alias="class", description="custom grouping: dotted path of a class with prepare and choose_tasks"
    )
    args: list[Any] = Field(default_factory=list, description="custom grouping: constructor arguments")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="custom grouping: constructor keyword arguments")

    @field_validator("type", mode="before")
    @classmethod
    def _lower_case(cls, value: Any) -> Any:
        # Flux spells the types in upper case (SHUFFLE, FIELDS, ...).
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _fits_type(self) -> GroupingSpec:
        if self.type in KEYED_GROUPINGS and not self.fields:
            raise ValueError(f"a {self.type} grouping needs 'fields': the field names to group by")
        if self.type not in KEYED_GROUPINGS and self.fields is not None:
            raise ValueError(f"'fields' only applies to {' and '.join(KEYED_GROUPINGS)} groupings, not {self.type}")
        if self.type == "custom" and not self.class_:
            raise ValueError("a custom grouping needs 'class': the dotted path of the grouping class")
        if self.type != "custom" and (self.class_ or self.args or self.kwargs):
            raise ValueError(f"'class', 'args' and 'kwargs' only apply to custom groupings, not {self.type}")
        return self


class StreamSpec(_Spec):
    """A bolt (``to``) subscribing to a stream of a component (``from``)."""

    from_: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    grouping: GroupingSpec
    name: str | None = Field(None, description="a label, for people reading the file")


class TopologySpec(_Spec):
    """A whole topology file."""

    name: str = Field(min_length=1)
    includes: list[IncludeSpec | str] = Field(
        default_factory=list, description="files merged into this one before validation (a string is {file: ...})"
    )
    config: ConfigMapping = Field(default_factory=dict, description="rayflow.Config; Storm's keys accepted")
    spouts: list[ComponentEntry] = Field(min_length=1)
    bolts: list[ComponentEntry] = Field(default_factory=list)
    streams: list[StreamSpec] = Field(default_factory=list)
