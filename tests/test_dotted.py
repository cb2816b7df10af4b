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
    that does not exist, as do ``pkgx.needs_pkg`` (``pkg``) and ``pkgx.modern`` (``pkgx.mo``)."""
    root = tmp_path / "pkgx"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "good.py").write_text(
        "def write(df, batch_id):\n    return batch_id\n\nclass Outer:\n    class Inner:\n        pass\n"
    )
    (root / "mod.py").write_text("import no_such_dependency\n\ndef write(df, batch_id):\n    pass\n")
    (root / "needs_pkg.py").write_text("import pkg\n")
    (root / "modern.py").write_text("import pkgx.mo\n")
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


@pytest.mark.parametrize(("module", "dependency"), [("needs_pkg", "pkg"), ("modern", "pkgx.mo")])
def test_a_missing_import_named_like_a_prefix_of_the_path_is_still_the_modules_own(
    package: str, module: str, dependency: str
) -> None:
    """``pkg`` and ``pkgx.mo`` are string prefixes of ``pkgx.needs_pkg`` and ``pkgx.modern``,
    not modules on their paths: the prefix test is at a dot."""
    with pytest.raises(DottedPathError, match=f"importing pkgx.{module} failed: No module named '{dependency}'"):
        resolve(f"pkgx.{module}.write")


def test_a_missing_submodule_of_a_package_is_named(package: str) -> None:
    with pytest.raises(DottedPathError, match="No module named 'pkgx.nomod'"):
        resolve("pkgx.nomod.sub.write")


def test_a_missing_name_inside_a_class_is_not_taken_for_a_module(package: str) -> None:
    """``Outer.Missing`` is looked up in the class, not imported as module ``pkgx.good.Outer``."""
    with pytest.raises(DottedPathError, match=r"no 'Inne' in pkgx.good.Outer \(did you mean 'Inner'\?\)"):
        resolve("pkgx.good.Outer.Inne")


@pytest.mark.parametrize("given", ["write", "pkgx..write", "pkgx.9x", ""])
def test_a_path_that_is_not_dotted_is_refused_as_a_config_error(given: str) -> None:
    with pytest.raises(ConfigError, match="is not a dotted import path like"):
        resolve(given)
