"""The topology file format, as pydantic models (``rayflow schema`` prints their JSON Schema).

name: wordcount
includes: [{file: base.yaml, override: false}]   # merged in before validation
config: {topology.acker.executors: 2}             # rayflow.Config; Storm's keys accepted
spouts:
  - {id: sentences, class: examples.wordcount.SentenceSpout, parallelism: 1}
bolts:
  - {id: split, class: examples.wordcount.SplitSentence, parallelism: 2, args: [], kwargs: {}}
  - {id: top, class: examples.windowed_wordcount.TopWords,
     window: {length: {seconds: 10}, timestamp_field: ts, lag_secs: 5, late_stream: late}}
streams:
  - {from: sentences, to: split, grouping: {type: shuffle}}
  - {from: split, to: count, grouping: {type: fields, fields: [word]}}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from .._config import Config
from .._resources import Resources
from .._windows.bolt import WindowedBolt
from .._windows.lengths import Count, Duration, Length

__all__ = [
    "GROUPING_TYPES",
    "ComponentEntry",
    "ConfigMapping",
    "ResourcesMapping",
    "GroupingSpec",
    "IncludeSpec",
    "LengthSpec",
    "SessionSpec",
    "StreamSpec",
    "TopologySpec",
    "WindowSpec",
]

_GroupingName = Literal[
    "shuffle", "fields", "all", "global", "none", "direct", "local_or_shuffle", "partial_key", "custom"
]
GROUPING_TYPES: tuple[str, ...] = get_args(_GroupingName)
GroupingType = Annotated[
    _GroupingName,
    WithJsonSchema({"type": "string", "enum": [*GROUPING_TYPES, *(t.upper() for t in GROUPING_TYPES)]}),
]
"""A grouping's type: lower case, or all upper case as Flux spells it (``FIELDS``); the JSON
Schema lists both spellings, so editors accept what the loader accepts."""
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


ResourcesMapping = Annotated[
    dict[str, Any],
    WithJsonSchema({**Resources.model_json_schema(), "title": "Resources"}),
]
"""A component's ``resources:`` mapping, checked like ``config:``: the schema only checks it is a
mapping, ``rayflow.Resources`` checks its keys and values (the loader puts each problem on its
line). Editors get ``Resources``' own JSON Schema for it."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IncludeSpec(_Spec):
    """Another file merged into this one. Its path is relative to the including file."""

    file: str = Field(min_length=1)
    override: bool = Field(False, description="true: the included file's values win over this file's")


class LengthSpec(_Spec):
    """A window's length or slide: ``{count: n}`` tuples or ``{seconds: s}``."""

    count: int | None = Field(None, ge=1)
    seconds: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_of(self) -> LengthSpec:
        if (self.count is None) == (self.seconds is None):
            raise ValueError("give one of 'count' (tuples) or 'seconds'")
        return self

    def length(self) -> Length:
        return Count(self.count) if self.count is not None else Duration(self.seconds or 0)


class SessionSpec(_Spec):
    """Session windows: per ``key_field``, tuples less than ``gap_secs`` apart (event time)."""

    gap_secs: float = Field(gt=0)
    key_field: str = Field(min_length=1)


class WindowSpec(_Spec):
    """A windowed bolt's window: what ``WindowedBolt.with_window`` and friends set."""

    length: LengthSpec | None = Field(None, description="the window's length; or give 'session'")
    session: SessionSpec | None = Field(None, description="session windows instead of a length")
    slide: LengthSpec | None = Field(None, description="how often the window fires; absent: tumbling (= length)")
    timestamp_field: str | None = Field(None, min_length=1, description="event time: ms since the epoch")
    lag_secs: float | None = Field(None, gt=0, description="event time: how late a tuple may arrive")
    watermark_interval_secs: float | None = Field(None, gt=0, description="event time: default 1")
    late_stream: str | None = Field(None, min_length=1, description="event time: where late tuples go")
    idle_timeout_secs: float | None = Field(None, gt=0, description="event time: leave a quiet upstream task out")

    @model_validator(mode="after")
    def _length_or_session(self) -> WindowSpec:
        if (self.length is None) == (self.session is None):
            raise ValueError("give one of 'length' (with an optional 'slide') or 'session'")
        if self.session is not None and self.slide is not None:
            raise ValueError("a session window has no 'slide': it closes after its gap")
        return self

    def apply(self, bolt: WindowedBolt) -> None:
        """Set this window on ``bolt``."""
        if self.session is not None:
            bolt.with_session_window(Duration(self.session.gap_secs), self.session.key_field)
        elif self.length is not None:
            length = self.length.length()
            bolt.with_window(length, self.slide.length() if self.slide is not None else length)
        if self.timestamp_field is not None:
            bolt.with_timestamp_field(self.timestamp_field)
        if self.lag_secs is not None:
            bolt.with_lag(Duration(self.lag_secs))
        if self.watermark_interval_secs is not None:
            bolt.with_watermark_interval(Duration(self.watermark_interval_secs))
        if self.late_stream is not None:
            bolt.with_late_tuple_stream(self.late_stream)
        if self.idle_timeout_secs is not None:
            bolt.with_idle_timeout(Duration(self.idle_timeout_secs))


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
    resources: ResourcesMapping = Field(
        default_factory=dict, description="Ray actor options of each task: num_cpus, num_gpus, memory, resources, ..."
    )
    window: WindowSpec | None = Field(None, description="a rayflow.WindowedBolt's window")
    batch_size: int | None = Field(None, ge=1, description="a rayflow.BatchBolt's tuples per batch, at most")
    batch_timeout_ms: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="a rayflow.BatchBolt's wait for a partial batch, at most"
    )

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
        # Flux spells the types in upper case (SHUFFLE, FIELDS, ...); mixed case is neither.
        return value.lower() if isinstance(value, str) and value.isupper() else value

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
