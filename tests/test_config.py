"""Config: Storm's topology settings, validated, under their Python names or Storm's keys."""

from __future__ import annotations

from typing import Any

import pytest

from rayflow.config import DEFAULT_MAX_SPOUT_PENDING, Config
from rayflow.errors import ConfigError, RayflowError

STORM_KEYS = {
    "message_timeout_secs": "topology.message.timeout.secs",
    "ackers": "topology.acker.executors",
    "max_spout_pending": "topology.max.spout.pending",
    "enable_message_timeouts": "topology.enable.message.timeouts",
    "debug": "topology.debug",
}


class TestDefaults:
    def test_storm_defaults(self):
        """The defaults are Storm's: 30 s timeout, one acker, no pending limit, timeouts on."""
        conf = Config()
        assert conf.message_timeout_secs == 30.0
        assert conf.ackers == 1
        assert conf.max_spout_pending == DEFAULT_MAX_SPOUT_PENDING
        assert conf.enable_message_timeouts is True
        assert conf.debug is False


class TestStormKeys:
    @pytest.mark.parametrize(
        ("storm_key", "value", "field"),
        [
            ("topology.message.timeout.secs", 5, "message_timeout_secs"),
            ("topology.acker.executors", 0, "ackers"),
            ("topology.max.spout.pending", 100, "max_spout_pending"),
            ("topology.enable.message.timeouts", False, "enable_message_timeouts"),
            ("topology.debug", True, "debug"),
        ],
    )
    def test_dotted_alias(self, storm_key: str, value: Any, field: str):
        """Each field is set by its Storm key as well as by its name."""
        assert getattr(Config.of({storm_key: value}), field) == value
        assert getattr(Config.of({field: value}), field) == value

    def test_python_names_as_keywords(self):
        """Keyword arguments use the Python names."""
        assert Config(ackers=2, max_spout_pending=10).max_spout_pending == 10


class TestUnknownKeys:
    def test_kept_and_passed_to_components(self):
        """Keys rayflow does not know are kept and reach the components' conf unchanged."""
        conf = Config.of({"topology.workers": 4, "my.db.url": "sqlite://", "ackers": 2})
        passed = conf.to_conf()
        assert passed["topology.workers"] == 4
        assert passed["my.db.url"] == "sqlite://"

    def test_conf_has_names_and_storm_keys(self):
        """Components find every setting under its name and under its Storm key."""
        passed = Config(message_timeout_secs=12).to_conf()
        for field, storm_key in STORM_KEYS.items():
            assert passed[field] == passed[storm_key]
        assert passed["topology.message.timeout.secs"] == 12.0


class TestInvalid:
    @pytest.mark.parametrize(
        ("conf", "named"),
        [
            ({"ackers": -1}, "ackers"),
            ({"topology.acker.executors": "two"}, "topology.acker.executors"),
            ({"message_timeout_secs": 0}, "message_timeout_secs"),
            ({"topology.max.spout.pending": 0}, "topology.max.spout.pending"),
            ({"enable_message_timeouts": "sometimes"}, "enable_message_timeouts"),
            ({"batch_size": 0}, "batch_size"),
        ],
    )
    def test_bad_value_names_the_field(self, conf: dict[str, Any], named: str):
        """A bad value raises ConfigError naming the key it was given under."""
        with pytest.raises(ConfigError, match=rf"invalid config: {named}: "):
            Config.of(conf)

    def test_every_bad_value_listed(self):
        """All the bad values are reported in one error."""
        with pytest.raises(ConfigError) as info:
            Config.of({"ackers": -1, "message_timeout_secs": -5})
        assert "ackers" in str(info.value)
        assert "message_timeout_secs" in str(info.value)

    def test_keyword_construction(self):
        """Config(...) with a bad value raises ConfigError too, not a bare pydantic error."""
        with pytest.raises(ConfigError, match="ackers"):
            Config(ackers=-1)

    def test_assignment(self):
        """Assigning a bad value raises ConfigError and leaves the old value."""
        conf = Config()
        with pytest.raises(ConfigError, match="max_spout_pending"):
            conf.max_spout_pending = 0
        assert conf.max_spout_pending == DEFAULT_MAX_SPOUT_PENDING

    def test_is_a_rayflow_error(self):
        """ConfigError is one of rayflow's errors."""
        assert issubclass(ConfigError, RayflowError)

    def test_not_a_config(self):
        """Something neither a dict nor a Config is refused by type."""
        with pytest.raises(ConfigError, match="not list"):
            Config.of([("ackers", 1)])  # type: ignore[arg-type]


class TestOf:
    def test_none(self):
        """None gives the defaults."""
        assert Config.of(None) == Config()

    def test_config(self):
        """A Config is taken as it is."""
        conf = Config(ackers=3)
        assert Config.of(conf) is conf

    def test_dict(self):
        """A dict may mix Python names and Storm keys."""
        conf = Config.of({"ackers": 2, "topology.message.timeout.secs": 3})
        assert (conf.ackers, conf.message_timeout_secs) == (2, 3.0)


class TestMerged:
    def test_component_override_by_name(self):
        """A per-component override under the Python name wins over the topology's value."""
        assert Config(max_spout_pending=10).merged({"max_spout_pending": 2}).max_spout_pending == 2

    def test_component_override_by_storm_key(self):
        """A per-component override under the Storm key wins too."""
        assert Config(max_spout_pending=10).merged({"topology.max.spout.pending": 2}).max_spout_pending == 2

    def test_keeps_the_rest(self):
        """Settings not overridden, and unknown keys on either side, are kept."""
        merged = Config.of({"ackers": 2, "my.key": 1}).merged({"tick_tuple_freq_secs": 1.0})
        assert merged.ackers == 2
        assert merged.to_conf()["my.key"] == 1
        assert merged.to_conf()["tick_tuple_freq_secs"] == 1.0

    def test_nothing_to_merge(self):
        """No overrides gives the same Config back."""
        conf = Config()
        assert conf.merged(None) is conf
        assert conf.merged({}) is conf

    def test_bad_override(self):
        """A bad override raises ConfigError."""
        with pytest.raises(ConfigError, match="ackers"):
            Config().merged({"ackers": -2})
