"""What the connectors show of a broker URL in logs and errors: never a secret."""

from __future__ import annotations

import pytest

from rayflow._errors import ConfigError
from rayflow.connectors._wire import redact_url


class TestRedactUrl:
    @pytest.mark.parametrize(
        ("url", "shown"),
        [
            ("redis://:hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
            ("amqp://app:hunter2@mq/%2F?heartbeat=5", "amqp://app:***@mq/%2F?heartbeat=5"),
            ("redis://cache:6379/0?password=hunter2&db=1", "redis://cache:6379/0?password=***&db=1"),
            ("rediss://cache?Password=hunter2", "rediss://cache?Password=***"),
            ("amqps://mq/?ssl_key_password=hunter2#x", "amqps://mq/?ssl_key_password=***#x"),
            ("unix:///run/redis.sock?db=0&auth_token=hunter2", "unix:///run/redis.sock?db=0&auth_token=***"),
            ("redis://user:p%40ss@cache", "redis://user:***@cache"),
            ("nats://s3cr3tT0ken@nats:4222", "nats://***@nats:4222"),
            ("tls://s3cr3tT0ken@nats", "tls://***@nats"),
            ("redis://:hunter/2@cache:6379/0", "redis://:***@cache:6379/0"),
            ("redis://:hunter#2@cache:6379/0", "redis://:***@cache:6379/0"),
            ("amqp://app:hun?ter@2@mq/%2F?heartbeat=5", "amqp://app:***@mq/%2F?heartbeat=5"),
            ("amqp://app:a/b?c#d@mq/%2F", "amqp://app:***@mq/%2F"),
            ("nats://user:hunter2@nats?token=abc", "nats://user:***@nats?token=***"),
        ],
    )
    def test_a_password_in_the_user_info_or_the_query_is_replaced(self, url: str, shown: str) -> None:
        assert redact_url(url) == shown

    @pytest.mark.parametrize("secret", ["hunter2", "a/b", "a#b", "a?b", "a@b", "a:b", "p%40ss"])
    @pytest.mark.parametrize(
        "template", ["redis://:{}@cache/0", "amqp://app:{}@mq:5672/%2F?heartbeat=2", "nats://{}@nats:4222"]
    )
    def test_no_secret_survives_whatever_it_holds(self, template: str, secret: str) -> None:
        shown = redact_url(template.format(secret))
        assert secret not in shown and "***" in shown

    def test_a_url_without_secrets_is_unchanged(self) -> None:
        for url in ("redis://127.0.0.1:6379/0", "unix:///run/redis.sock?db=2", "amqp://mq:5672/%2F?heartbeat=5"):
            assert redact_url(url) == url

    def test_a_url_that_cannot_be_parsed_is_not_echoed(self) -> None:
        assert "hunter2" not in redact_url("redis://:hunter2@[::1:6379")
        assert "hunter2" not in redact_url("redis//:hunter2@cache")


class TestRefusedUrls:
    """A URL the spout refuses is named by its scheme only: a typo can leave the password
    anywhere in it."""

    def test_redis(self) -> None:
        pytest.importorskip("redis")
        from rayflow.connectors.redis import RedisStreamSpout

        with pytest.raises(ConfigError, match="url must be a redis://.* got a URL with scheme 'http'") as info:
            RedisStreamSpout("orders", "g", url="http://:hunter2@cache")
        assert "hunter2" not in str(info.value)
        for typo in ("redis//:hunter2@cache", "redis://:hunter2@[cache"):
            with pytest.raises(ConfigError, match="got a URL without a scheme, or malformed") as info:
                RedisStreamSpout("orders", "g", url=typo)
            assert "hunter2" not in str(info.value)

    def test_rabbitmq(self) -> None:
        pytest.importorskip("pika")
        from rayflow.connectors.rabbitmq import RabbitMQSpout

        with pytest.raises(ConfigError, match="url must be an amqp://.* got a URL with scheme 'http'") as info:
            RabbitMQSpout("events", url="http://guest:hunter2@mq")
        assert "hunter2" not in str(info.value)
        with pytest.raises(ConfigError, match="got a value of type int, not a URL"):
            RabbitMQSpout("events", url=5)  # type: ignore[arg-type]
