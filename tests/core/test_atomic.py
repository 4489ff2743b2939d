"""probe.core.atomic.check_writable: refused before any work, in one line, by what the file
system answers (os.access alone says yes to root almost everywhere)."""
import os
from pathlib import Path

import pytest

from probe.core.atomic import check_writable
from probe.core.errors import ProbeError


def test_a_writable_place_is_accepted_and_left_as_it_was(tmp_path):
    check_writable(tmp_path / "new" / "run")
    assert list(tmp_path.iterdir()) == []          # the probe folder it made is gone


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_place_that_refuses_folders_is_refused_for_root_too():
    # /proc grants root W_OK by its mode bits, and makes no folder for anyone.
    with pytest.raises(ProbeError, match=r"cannot write --out /proc/probe-run: /proc refuses a new folder "
                                         r"\(.+\); choose another --out"):
        check_writable(Path("/proc/probe-run"))


def test_a_file_in_the_way_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ProbeError, match="afile is a file, not a folder"):
        check_writable(tmp_path / "afile" / "run")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0500 folder")
def test_a_folder_without_write_permission_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ProbeError, match="is not writable \\(permission denied\\)"):
            check_writable(locked / "run")
    finally:
        locked.chmod(0o700)
