"""A task's log on the driver: what the ``rayflow`` logger logs inside a task's process is kept
for the supervisor's long poll (``TaskLog``) and logged again on the driver (``replay``). On Ray
end to end: ``test_runtime.py::test_what_tasks_log_reaches_the_driver``."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from rayflow._runtime.task_logs import LogBatch, TaskLog, replay


def task_log(capacity: int = 10) -> tuple[TaskLog, logging.Logger]:
    log = TaskLog(capacity)
    log.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.Logger("task")  # not registered: nothing else sees its records
    logger.addHandler(log)
    return log, logger


class TestTaskLog:
    def test_a_waiting_poll_returns_once_something_is_logged(self) -> None:
        """From the event loop's thread or another one (a connector's), with the traceback."""
        log, logger = task_log()

        async def scenario() -> tuple[LogBatch, LogBatch]:
            poll = asyncio.ensure_future(log.next_batch())
            await asyncio.sleep(0)
            assert not poll.done()
            try:
                raise ValueError("boom")
            except ValueError:
                logger.exception("component 'count' task 3: execute failed")
            first = await asyncio.wait_for(poll, 10)
            poll = asyncio.ensure_future(log.next_batch())
            await asyncio.sleep(0)
            threading.Thread(target=logger.warning, args=("from a thread",)).start()
            return first, await asyncio.wait_for(poll, 10)

        first, second = asyncio.run(scenario())
        [(level, text)] = first.records
        assert level == logging.ERROR and text.startswith("component 'count' task 3: execute failed\nTraceback")
        assert "ValueError: boom" in text
        assert second.records == [(logging.WARNING, "from a thread")] and second.dropped == 0

    def test_the_newest_records_are_kept_and_the_others_counted(self) -> None:
        log, logger = task_log(capacity=3)
        for i in range(5):
            logger.error("error %d", i)
        batch = asyncio.run(log.next_batch())
        assert [text for _, text in batch.records] == ["error 2", "error 3", "error 4"] and batch.dropped == 2
        assert log.drain() == LogBatch(batch.pid, [], 0)

    def test_below_info_is_not_kept(self) -> None:
        log, logger = task_log()
        logger.setLevel(logging.DEBUG)
        logger.debug("chatter")
        logger.info("emit")
        assert log.drain().records == [(logging.INFO, "emit")]

    def test_while_closing_the_poll_leaves_the_records_to_shutdown(self) -> None:
        log, logger = task_log()

        async def scenario() -> bool:
            log.closing = True
            poll = asyncio.ensure_future(log.next_batch())
            logger.error("while closing")
            for _ in range(5):  # the wake-up has long been handled by then
                await asyncio.sleep(0)
            done = poll.done()
            poll.cancel()
            return done

        assert not asyncio.run(scenario())
        assert log.drain().records == [(logging.ERROR, "while closing")]


def test_replay_logs_each_record_at_its_level_saying_where_it_came_from(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rayflow")
    batch = LogBatch(4242, [(logging.INFO, "count:3 emit default ['a']"), (logging.ERROR, "boom\nTraceback")], 7)
    replay(logging.getLogger("rayflow"), "wc task 3 (bolt 'count')", batch)
    where = "[wc task 3 (bolt 'count'), pid 4242]"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"{where} count:3 emit default ['a']"),
        (logging.ERROR, f"{where} boom\nTraceback"),
        (logging.WARNING, f"{where} 7 earlier log record(s) dropped: more than 1000 waited for the driver"),
    ]
