"""Dotted import paths, as a topology file or a ``DataFrameSink`` names user code: what is found,
and what a user is told when it is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayflow import ConfigError
from rayflow._dotted import DottedPathError, resolve


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``pkgx`` with ``pkgx.good`` (defines ``write``) and ``pkgx.mod``, which imports a module
    that does not exist."""
    root = tmp_path / "pkgx"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "good.py").write_text(
        "def write(df, batch_id):\n    return batch_id\n\nclass Outer:\n    class Inner:\n        pass\n"
    )
    (root / "mod.py").write_text("import no_such_dependency\n\ndef write(df, batch_id):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "pkgx"


def test_a_function_and_a_nested_class_are_found(package: str) -> None:
    assert resolve("pkgx.good.write")(None, 7) == 7
    assert resolve("pkgx.good.Outer.Inner").__name__ == "Inner"


def test_a_misspelt_name_gets_a_suggestion(package: str) -> None:
    with pytest.raises(DottedPathError, match=r"no 'wirte' in pkgx.good \(did you mean 'write'\?\)"):
        resolve("pkgx.good.wirte")


def test_a_missing_import_inside_the_module_is_the_modules_own_failure(package: str) -> None:
    """Not "no 'mod' in 'pkgx'": the module exists, and what it imports does not."""
    with pytest.raises(DottedPathError, match="importing pkgx.mod failed: No module named 'no_such_dependency'"):
        resolve("pkgx.mod.write")


def test_a_module_prefix_is_matched_at_a_dot(package: str) -> None:
    """``pkgx_other`` is not inside ``pkgx``: a missing ``pkgx_other`` is reported as missing."""
    with pytest.raises(DottedPathError, match="No module named 'pkgx_other'"):
        resolve("pkgx_other.mod.write")


@pytest.mark.parametrize("given", ["write", "pkgx..write", "pkgx.9x", ""])
def test_a_path_that_is_not_dotted_is_refused_as_a_config_error(given: str) -> None:
    with pytest.raises(ConfigError, match="is not a dotted import path like"):
        resolve(given)
