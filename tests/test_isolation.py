"""Tests never touch the user's directories, fixtures set up once per file included."""

import os
from pathlib import Path

import pytest

from localspec.settings import data_dir


@pytest.fixture(scope="module")
def module_data_dir() -> Path:
    return data_dir()  # what a pair loaded by a module-scoped fixture reads and writes


def test_a_module_scoped_fixture_gets_a_data_dir_of_the_run(module_data_dir, tmp_path_factory):
    assert module_data_dir.is_relative_to(tmp_path_factory.getbasetemp())
    assert Path(os.environ["LOCALSPEC_DATA_DIR"]).is_relative_to(tmp_path_factory.getbasetemp())
