"""Plug-ins: modules outside ragsync that register what they add when imported.

A plug-in module calls ``ragsync.source_types.register_source_type`` (a
connector) or ``ragsync.index.backends.register_keyword_backend`` (a keyword
store) at import. The setting ``plugins`` (``--plugins``, pipeline option
``--plugins=``, ``RAGSYNC_PLUGINS``) names the modules, comma-separated; they
are imported:

* by every ``ragsync.config.Settings`` when it is made (the CLI's commands,
  ``ragsync serve`` before it builds its app, a pipeline's launcher) and when
  a pipeline worker unpickles its copy (``Settings.__setstate__``), so every
  process that holds the settings holds the registrations;
* by ``ragsync`` before it builds its parser (``cli.main.main``), so
  ``sources add --type`` offers the plug-ins' types.

Importing a module twice is a no-op (Python keeps it in ``sys.modules``).
"""

from __future__ import annotations

import importlib
import re

from ragsync.errors import ConfigurationError

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def plugin_modules(text: str) -> list[str]:
    """The module names of a ``plugins`` setting (``"a.b, c"`` -> ``["a.b", "c"]``).

    Raises:
        ConfigurationError: a name that is not a dotted module name.
    """
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    for name in names:
        if not _MODULE.match(name):
            raise ConfigurationError(f"plugins: {name!r} is not a module name (a.b.c)")
    return names


def load_plugins(text: str) -> list[str]:
    """Import every module of the ``plugins`` setting ``text``, in order.

    Returns:
        The module names imported (or already imported).

    Raises:
        ConfigurationError: a malformed name, or a module that cannot be
            found (errors the module itself raises propagate unchanged).
    """
    names = plugin_modules(text)
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise ConfigurationError(f"plugin {name!r} cannot be imported: {exc}") from None
    return names
