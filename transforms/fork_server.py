"""Imported by the fork server that starts parse children, and only there.

:func:`transforms.parse.start_parse_children_from_a_fork_server` names this
module as the fork server's preload. On import, in that server:

- the server exits as soon as the pipeline process that started it is gone
  (SIGKILL included): multiprocessing would keep it alive while any child it
  forked still holds its "alive" pipe, and a pool child waiting for work
  never lets go;
- every child it forks from now on exits when the server is gone (the same
  watch ``ragsync.ops.lifecycle.install_child_watch`` gives forked children);
- it and its children ignore SIGINT and SIGTERM sent to the process group
  (a terminal's Ctrl-C): the pipeline process decides the stop and ends them;
- the parsers are imported once, so each child starts with them loaded;
- what they allocated is frozen out of the garbage collector (``gc.freeze``,
  as Python's docs advise before forking): the children share those pages
  instead of copying them when a collection touches them, and the server's
  own exit skips walking them (~0.4 s, with the pipeline's stdout and stderr
  still held open).
"""

from __future__ import annotations

import signal

from ragsync.ops import lifecycle

lifecycle.exit_when_parent_dies()
lifecycle.install_child_watch()
# The run's main process decides a stop, not its helpers: a terminal's Ctrl-C
# or a service manager's SIGTERM reaches the whole process group, and a parse
# child that died of it would be recorded as a crash of the document it was
# reading. The main process ends them (SIGKILL) once it stops.
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)

import gc  # noqa: E402

import transforms.parse  # noqa: E402,F401  (the parsers, imported once for every child)

gc.freeze()
