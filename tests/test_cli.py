"""The command line as a script sees it: exit codes and ``--json`` shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_sources_events_and_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    code, out = _run(
        capsys, "sources", "add", "wiki", "--tenant", "acme", "--type", "wiki", "--home", home, "--json"
    )
    assert code == 0 and json.loads(out) == {
        "source_id": "wiki",
        "tenant_id": "acme",
        "type": "wiki",
        "uri": "",
    }
    events = tmp_path / "events.jsonl"
    good = {
        "source_id": "wiki",
        "doc_id": "p1",
        "op": "delete",
        "source_version": 2,
        "event_time": "2026-12-01T00:00:00Z",
    }
    events.write_text(
        json.dumps(good)
        + "\n"
        + "{not json\n"
        + "\n"
        + json.dumps({**good, "op": "move"})
        + "\n"
        + json.dumps(good)
        + "\n"
    )
    code, out = _run(capsys, "events", "push", str(events), "--home", home, "--json")
    data = json.loads(out)
    assert code == 1  # some lines were rejected
    assert (data["queued"], data["duplicates"]) == (1, 1)
    assert [r["line"] for r in data["rejected"]] == [2, 4]
    assert "'op' must be one of" in data["rejected"][1]["error"]

    code, out = _run(capsys, "status", "--home", home, "--json")
    status = json.loads(out)
    assert code == 0
    assert status["queue"]["depth"] == 1 and status["queue"]["by_state"] == {"pending": 1}
    assert status["documents"] == {} and status["dead_letters"] == {}
    assert status["pages_for_review"] == {"documents": 0, "pages": 0, "items": []}


def test_parse_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "page"  # no extension: detected from content
    page.write_text(
        "<html><body><h1>Title</h1><p>Body text.</p>"
        "<table><tr><th>a</th></tr><tr><td>1</td></tr></table></body></html>"
    )
    code, out = _run(capsys, "parse", str(page), "--json")
    data = json.loads(out)
    assert code == 0 and data["mime"] == "text/html" and data["lane"] == "fast" and data["error"] is None
    assert [(e["type"], e["text"]) for e in data["elements"]] == [
        ("heading", "Title"),
        ("paragraph", "Body text."),
        ("table", "| a |\n| --- |\n| 1 |"),
    ]
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 truncated")
    code, out = _run(capsys, "parse", str(broken), "--json")
    assert code == 2 and json.loads(out)["error"]["class"] == "corrupt"


def test_backfill_of_a_missing_folder_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["backfill", str(tmp_path / "nope"), "--home", str(tmp_path / "h")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_sources_add_refuses_what_the_api_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One registration path, one validation: an id the API refuses is refused here too."""
    home = str(tmp_path / "home")
    code = main(["sources", "add", "../wiki", "--tenant", "acme", "--type", "wiki", "--home", home])
    assert code == 2
    assert "source id '../wiki' must match" in capsys.readouterr().err
    code, out = _run(capsys, "sources", "list", "--tenant", "acme", "--home", home, "--json")
    assert code == 0 and json.loads(out) == []


def test_sources_add_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["sources", "add", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    (tenant,) = [line for line in out.splitlines() if line.startswith("  --tenant TENANT")]
    assert tenant.split(None, 2)[2] == "the tenant that owns the source"


def test_help_loads_no_heavy_module() -> None:
    """``ragsync --help`` and a command's help start without Beam, torch,
    the catalog's SQLAlchemy or pydantic (they made every call take seconds)."""
    import subprocess
    import sys

    heavy = ("apache_beam", "torch", "sqlalchemy", "pydantic")
    probe = (
        "import sys\nfrom cli.main import main\n"
        "for argv in (['--help'], ['sources', 'add', '--help'], ['tenants', 'create', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit as stop:\n        assert stop.code == 0\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def _in_a_fresh_process(commands: list[list[str]], home: str) -> tuple[list[int], list[str], str]:
    """Run ``commands`` (``ragsync`` argument lists, each with ``--home home``)
    one after the other in a new Python process: their exit codes, which of
    Beam and torch that process imported, and its stderr."""
    import subprocess
    import sys

    probe = (
        "import json, sys\nfrom cli.main import main\n"
        f"codes = [main([*argv, '--home', {home!r}]) for argv in {commands!r}]\n"
        "print(json.dumps([codes, sorted(m for m in ('apache_beam', 'torch') if m in sys.modules)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    codes, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    return codes, heavy, done.stderr


def test_light_commands_load_no_pipeline_code(tmp_path: Path) -> None:
    """Registering a source, listing sources, status, dead letters and pushing
    events touch only the catalog: they run without Beam or torch (with Beam,
    ``sources add`` took 2.2 s instead of 0.5 s)."""

    folder = tmp_path / "docs"
    folder.mkdir()
    events = tmp_path / "events.jsonl"
    events.write_text(
        json.dumps(
            {
                "source_id": "docs",
                "doc_id": "a.txt",
                "op": "delete",
                "source_version": "1",
                "event_time": "2026-01-05T10:00:00Z",
            }
        )
        + "\n"
    )
    home = str(tmp_path / "home")
    commands = [
        ["sources", "add", "docs", "--type", "object_store", "--uri", str(folder), "--tenant", "acme"],
        ["sources", "list", "--json"],
        ["events", "push", str(events)],
        ["dead-letters", "list", "--json"],
        ["status", "--json"],
    ]
    codes, heavy, err = _in_a_fresh_process(commands, home)
    assert (codes, heavy) == ([0, 0, 0, 0, 0], []), err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    import ragsync

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"ragsync {ragsync.__version__}\n"
    # One version: the installed package's metadata (setup.py) reads the same.
    assert importlib.metadata.version("ragsync") == ragsync.__version__


def test_status_and_dead_letters_cut_reasons_between_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragsync.config import Settings, open_catalog
    from ragsync.model import DeadLetter

    home = str(tmp_path / "home")
    words = "neither PDFium nor pdfminer could open the file because its cross reference table is " * 3
    catalog = open_catalog(Settings(home=home))
    try:
        catalog.dead_letters.add_dead_letter(
            DeadLetter(stage="parse", doc_id="d1", uri="a.pdf", error_class="corrupt", message=words.strip())
        )
    finally:
        catalog.close()
    code, out = _run(capsys, "status", "--home", home)
    (line,) = [x for x in out.splitlines() if "a.pdf" in x]
    assert code == 0 and line.endswith("…")
    shown = line.split("a.pdf: ", 1)[1].removesuffix("…").split()
    assert len(line.split("a.pdf: ", 1)[1]) <= 120
    assert shown == words.split()[: len(shown)]  # whole words only
    code, out = _run(capsys, "dead-letters", "list", "--home", home)
    shown = out.strip().split("a.pdf: ", 1)[1]
    assert code == 0 and shown.endswith("…") and len(shown) <= 100
    assert shown.removesuffix("…").split() == words.split()[: len(shown.removesuffix("…").split())]


def test_reading_commands_where_nothing_was_indexed_say_so_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``query`` in a directory without a home created ``./ragsync-data`` and
    answered "no results"; it now says where it looked and what to do."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAGSYNC_HOME", raising=False)
    for argv in (
        ["query", "laptop policy", "--groups", "everyone"],
        ["status"],
        ["reconcile"],
        ["sources", "list"],
        ["dead-letters", "list"],
        ["sync", "docs"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"nothing is indexed at {tmp_path / 'ragsync-data'}" in err, (argv, err)
        assert "ragsync backfill FOLDER" in err and "--home" in err
    assert list(tmp_path.iterdir()) == []
    # --home names it the same way; a home with a catalog answers as before.
    home = tmp_path / "elsewhere"
    assert main(["status", "--home", str(home)]) == 2
    assert f"nothing is indexed at {home} " in capsys.readouterr().err and not home.exists()
    assert main(["sources", "add", "docs", "--type", "wiki", "--tenant", "t", "--home", str(home)]) == 0
    assert main(["status", "--home", str(home), "--json"]) == 0


def test_unknown_ids_are_answered_without_loading_beam(tmp_path: Path) -> None:
    """An unknown source id, model name or folder is refused before Beam is
    imported (the import took the 3.5-7 s such an answer took; the figures
    are measured outside the tests, not asserted)."""

    home = str(tmp_path / "home")
    commands = [
        ["sources", "add", "docs", "--type", "wiki", "--tenant", "acme"],
        ["sync", "nosuch"],
        ["identities", "sync", "--source", "nosuch", "--tenant", "acme"],
        ["reembed", "--model", "nosuch"],
        ["backfill", str(tmp_path / "nosuch")],
    ]
    codes, heavy, err = _in_a_fresh_process(commands, home)
    assert (codes, heavy) == ([0, 2, 2, 2, 2], []), err
    assert err.count("unknown source 'nosuch'") == 2
    assert "unknown embedding model 'nosuch'" in err and "does not exist" in err


def test_parse_of_a_folder_reads_each_file_a_backfill_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ragsync parse DIR`` ended in a traceback (IsADirectoryError, exit 1):
    it now parses each file a backfill of the folder would list, one line each,
    and exits 2 when any of them would be dead-lettered (as for one file)."""
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# Parking\n\nThe garage closes in May.\n")
    (folder / "sub" / "b.html").write_text("<html><body><h1>B</h1><p>Body text.</p></body></html>")
    (folder / "sub" / "broken.pdf").write_bytes(b"%PDF-1.4 truncated")
    (folder / ".hidden.md").write_text("# Hidden\n\nNot listed.\n")
    (folder / "empty.txt").write_bytes(b"")
    code, out = _run(capsys, "parse", str(folder), "--json")
    files = json.loads(out)["files"]
    assert code == 2
    assert [
        (Path(f["file"]).relative_to(folder).as_posix(), f["error"] and f["error"]["class"]) for f in files
    ] == [
        ("a.md", None),
        ("empty.txt", "empty"),
        ("sub/b.html", None),
        ("sub/broken.pdf", "corrupt"),
    ]
    assert [e["text"] for e in files[0]["elements"]] == ["Parking", "The garage closes in May."]
    code, out = _run(capsys, "parse", str(folder))
    lines = out.splitlines()
    assert code == 2 and len(lines) == 5
    assert lines[0] == f"{folder / 'a.md'}: text/markdown (fast lane) 2 elements"
    assert lines[3].endswith("dead letter [corrupt]")
    assert lines[4] == "4 files: 2 parsed, 2 would be dead-lettered"
    (folder / "sub" / "broken.pdf").unlink()
    (folder / "empty.txt").unlink()
    assert _run(capsys, "parse", str(folder))[0] == 0
    # A file that cannot be read is one line and exit 2, not a traceback.
    assert main(["parse", str(tmp_path / "missing.pdf")]) == 2
    assert "missing.pdf" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("uri", "meant"),
    [
        ("wiki.example.com/w/api.php", "https://wiki.example.com/w/api.php"),
        ("localhost:8931/api.php", "http://localhost:8931/api.php"),
        ("127.0.0.1:8931/w/api.php", "http://127.0.0.1:8931/w/api.php"),
    ],
)
def test_a_wiki_url_without_its_scheme_is_not_called_a_folder(
    uri: str, meant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = str(tmp_path / "home")
    code = main(["sources", "add", "w", "--tenant", "acme", "--type", "wiki", "--uri", uri, "--home", home])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{uri!r} has no scheme" in err and f"did you mean {meant!r}" in err
    assert "folder" not in err and "unsupported location scheme" not in err
