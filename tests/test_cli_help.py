"""``rayflow --help`` and each command's help: a flag takes no value, so no type is shown beside it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from rayflow._cli import app


def help_of(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    return result.output


class TestFlagsHaveNoType:
    @pytest.mark.parametrize(
        "command",
        [(), ("validate",), ("graph",), ("schema",), ("run",), ("submit",), ("list",), ("kill",)],
        ids=lambda c: " ".join(c) or "rayflow",
    )
    def test_no_bool_in_help(self, command: tuple[str, ...]) -> None:
        """``--help``, ``--version``, ``--inactive``: no ``<bool>`` anywhere."""
        output = help_of(*command)
        assert "--help" in output
        assert "<bool>" not in output

    def test_flags_keep_their_help_and_options_keep_their_type(self) -> None:
        """Only flags lose the type column: ``--set`` still shows ``KEY=VALUE``."""
        output = help_of("run")
        assert "Submit with the spouts deactivated." in output
        assert "KEY=VALUE" in output

    def test_version_still_works(self) -> None:
        result = CliRunner().invoke(app, ["--version"])
        assert result.exit_code == 0 and result.output.startswith("rayflow ")


class TestDetachedCommands:
    """``submit``, ``list``, ``activate``, ``deactivate`` and ``kill`` (Storm's CLI) say what they do."""

    def test_the_app_lists_them(self) -> None:
        output = help_of()
        for command in ("submit", "list", "activate", "deactivate", "kill"):
            assert f" {command} " in output

    def test_submit_says_it_runs_a_ray_job_and_how_to_reach_it(self) -> None:
        output = " ".join(help_of("submit").replace("│", " ").split())
        assert "Run a topology file on a Ray cluster as a Ray job, detached from this terminal." in output
        assert "Its Jobs API (the dashboard, http://HOST:8265) is found from there." in output
        assert "--working-dir" in output and "--start-timeout" in output
        assert "4: no topology" not in output  # submit never ends so

    @pytest.mark.parametrize("command", ["activate", "deactivate", "kill"])
    def test_the_commands_on_a_name_tell_their_exit_codes(self, command: str) -> None:
        output = " ".join(help_of(command).replace("│", " ").split())
        assert "NAME" in output
        assert "• 0: done" in output
        assert "• 4: no topology of that name runs on the cluster" in output

    def test_kill_says_how_storm_kills(self) -> None:
        output = " ".join(help_of("kill").replace("│", " ").split())
        assert "deactivate its spouts, wait, then kill it" in output
        assert "--wait" in output and "default: its message timeout" in output
