"""Shared pytest setup for the cross-package tests.

The fixtures ``rng`` (seeded per test) and ``device`` come from the
``dragon_sdk.testing`` pytest plugin, which the installed ``dragon-sdk``
wheel registers through the ``pytest11`` entry point (``make test``
installs the checkout's SDK first).
"""
