"""A parse child forked while the keyword index's writer is open must not
keep the index locked (tantivy's ``flock`` belongs to the open file, which a
forked child shares)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import tantivy

from ragsync.index.tantivy import _FORK_GUARD, TantivyKeywordIndex, release_inherited_index_locks


def _forked_child_while_writing(path: Path, release: bool) -> bool:
    """Fork while a writer is open, let the parent drop its writer, and say
    whether the parent can open a writer again while the child lives."""
    index = tantivy.Index.open(str(path))
    writer = index.writer()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what a parse worker does, then it lives on
        try:
            if release:
                release_inherited_index_locks()
            os.write(ready_w, b"x")
            # Lives until the parent kills it: a child that ended on its own
            # (a parent slowed by load) would release the lock and hide the failure.
            time.sleep(600)
        finally:
            os._exit(0)
    try:
        os.read(ready_r, 1)
        writer.commit()
        writer.wait_merging_threads()
        del writer
        try:
            index.writer().wait_merging_threads()
            return True
        except ValueError:
            return False
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(ready_r)
        os.close(ready_w)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_a_forked_child_that_releases_inherited_locks_leaves_the_index_writable(tmp_path: Path) -> None:
    TantivyKeywordIndex(str(tmp_path), create=True).close()
    if not _FORK_GUARD["registered"]:  # another test in this process may have opened a writer already
        assert _forked_child_while_writing(tmp_path, release=False) is False  # the failure this prevents
    assert _forked_child_while_writing(tmp_path, release=True) is True
    # Once a ragsync writer was opened in a process, every fork releases on its own.
    index = TantivyKeywordIndex(str(tmp_path))
    index._get_writer()
    index.close()
    assert _FORK_GUARD["registered"]
    assert _forked_child_while_writing(tmp_path, release=False) is True
