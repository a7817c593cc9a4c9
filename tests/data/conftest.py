"""Fixtures for the data tests."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))   # _data_helpers, also for workers

from _data_helpers import write_records  # noqa: E402


@pytest.fixture(scope="module")
def records_100(tmp_path_factory):
    """A record file of 100 encoded examples (see ``write_records``)."""
    return write_records(tmp_path_factory.mktemp("rec") / "r100.dgr", 100)
