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
        "command", [(), ("validate",), ("graph",), ("schema",), ("run",)], ids=lambda c: " ".join(c) or "rayflow"
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
