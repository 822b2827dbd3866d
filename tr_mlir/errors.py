"""The root of tr-mlir's error classes.

Every error that reports something the user (a model, a plugin, a command line, a dataset) did
wrong derives from :class:`TrMlirError`, so a caller can catch them all in one place and tell them
apart from internal errors (``tr-opt`` and ``tr-train`` print those as a bug of tr-mlir).
:class:`PluginError` is the root of what the extension API (:mod:`tr_mlir.extend`) reports: a
registration that is incomplete or inconsistent, a plugin that cannot be loaded.
"""

from __future__ import annotations


class TrMlirError(Exception):
    """Something the user gave tr-mlir is wrong; the message names it and what to do."""


class PluginError(TrMlirError, ValueError):
    """A plugin, or one of its registrations, is wrong or incomplete; the message names the
    plugin or the registered thing and what is missing."""
