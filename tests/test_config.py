"""Config: Storm's topology settings, validated, under their Python names or Storm's keys."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rayflow._config import Config
from rayflow._errors import ConfigError, RayflowError
from rayflow._pending import DEFAULT_MAX_SPOUT_PENDING

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
            ("rayflow.stream.handshake.secs", 20.0, "handshake_secs"),
            ("rayflow.stream.max.handshakes", 512, "max_handshakes"),
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

    def test_storm_workers_is_kept_but_said_to_have_no_effect(self):
        """A Storm user's ``topology.workers`` reaches the components, and rayflow says what sets
        the number of processes instead; a config without such a key gets no advice."""
        conf = Config.of({"topology.workers": 4, "my.db.url": "sqlite://"})
        (advice,) = conf.storm_settings_without_effect()
        assert advice.startswith("topology.workers is kept for the components but rayflow does not use it")
        assert "parallelism" in advice
        assert Config.of({"my.db.url": "sqlite://"}).storm_settings_without_effect() == []

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
            ({"rayflow.stream.handshake.secs": 0}, "rayflow.stream.handshake.secs"),
            ({"rayflow.stream.max.handshakes": 0}, "rayflow.stream.max.handshakes"),
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


class TestOneSpellingPerSetting:
    def test_name_and_storm_key_together_is_an_error_naming_both(self):
        """A setting given by its Storm key and by its name is refused, whichever comes first."""
        with pytest.raises(ConfigError, match=r"'topology.acker.executors' and 'ackers' both set ackers"):
            Config.of({"topology.acker.executors": 1, "ackers": 2})
        with pytest.raises(ConfigError, match=r"'ackers' and 'topology.acker.executors' both set ackers"):
            Config.model_validate({"ackers": 2, "topology.acker.executors": 1})

    def test_also_in_overrides(self):
        """A per-component override giving both spellings is refused too (not last-one-wins)."""
        with pytest.raises(ConfigError, match="both set tick_tuple_freq_secs"):
            Config().merged({"tick_tuple_freq_secs": 1, "topology.tick.tuple.freq.secs": 2})

    def test_setting_names_the_field_a_key_sets(self):
        """Both spellings lead to the field; a user key is its own setting."""
        assert Config.setting("topology.acker.executors") == Config.setting("ackers") == "ackers"
        assert Config.setting("my.key") == "my.key"


class TestTypos:
    @pytest.mark.parametrize(
        ("key", "hint"),
        [
            ("rayflow.batch.sise", "unknown rayflow config key (did you mean 'rayflow.batch.size'?)"),
            ("rayflow.whatever", "unknown rayflow config key"),
            ("topology.max.spout.pendng", "unknown config key (did you mean 'topology.max.spout.pending'?)"),
        ],
    )
    def test_a_typo_of_a_known_key_is_refused(self, key: str, hint: str):
        """rayflow's namespace is its own, and a key a letter away from a known one is a typo:
        both are refused rather than silently handed to the components."""
        with pytest.raises(ConfigError, match=re.escape(f"{key}: {hint}")):
            Config.of({key: 1})


class TestTickFrequency:
    @pytest.mark.parametrize("value", ["abc", -1, 0])
    def test_bad_values_refused(self, value: Any):
        """The tick frequency is a Config field: a non-number or a non-positive value is refused."""
        with pytest.raises(ConfigError, match="topology.tick.tuple.freq.secs"):
            Config.of({"topology.tick.tuple.freq.secs": value})

    def test_by_name_or_storm_key(self):
        """Set by either spelling, as every field is."""
        assert Config.of({"topology.tick.tuple.freq.secs": "2.5"}).tick_tuple_freq_secs == 2.5
        assert Config().merged({"tick_tuple_freq_secs": 1}).to_conf()["topology.tick.tuple.freq.secs"] == 1.0


class TestProblems:
    def test_one_problem_per_key_in_the_mapping_order(self):
        """``Config.problems`` lists every problem with the key as given, so a file can place it."""
        problems = Config.problems(
            {"ackers": -1, "my.key": 1, "rayflow.batch.sise": 2, "topology.acker.executors": 3, "debug": "maybe"}
        )
        assert [p.key for p in problems] == ["ackers", "rayflow.batch.sise", "topology.acker.executors", "debug"]
        assert problems[0].error is not None and problems[0].error["type"] == "greater_than_equal"
        assert problems[2].same_as == "ackers"
        assert str(problems[0]) == "ackers: Input should be greater than or equal to 0, got -1"

    def test_none_for_a_good_mapping(self):
        """No problems means ``Config.of`` succeeds."""
        good = {"topology.acker.executors": 2, "my.key": "x", "tick_tuple_freq_secs": 1}
        assert Config.problems(good) == []
        assert Config.of(good).ackers == 2
