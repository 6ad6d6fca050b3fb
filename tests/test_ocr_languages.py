"""OCR languages (``Settings.ocr_languages``, env ``RAGSYNC_OCR_LANGUAGES``).

Tesseract reads scans with the languages it is given; with ``eng`` alone it
cannot write ``ü`` or ``ß``. The list is checked for its form where the
settings are made and against Tesseract's installed traineddata where it
runs; it is part of the parser version, so changing it makes the next run
read every document again. The real Tesseract reads a rendered German page
(``tesseract-ocr-deu`` is installed by ``scripts/setup.sh``).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ragsync.config import Settings, open_catalog
from ragsync.errors import ConfigurationError
from ragsync.options import option_values, settings_from
from ragsync.parsing import PARSER_VERSION, checked_ocr_languages, parse, parser_version
from ragsync.parsing.tesseract import check_languages, installed_languages

ROOT = Path(__file__).resolve().parents[1]
GERMAN = [
    "Der braune Fuchs springt über",
    "den faulen Hund an der Straße.",
    "Größere Füße tragen schöne Schuhe.",
]


@pytest.mark.parametrize(
    ("given", "kept"),
    [("eng", "eng"), (" eng+deu ", "eng+deu"), ("chi_sim+eng", "chi_sim+eng"), ("deu_latf", "deu_latf")],
)
def test_a_language_list_of_traineddata_names_is_kept(given: str, kept: str) -> None:
    assert checked_ocr_languages(given) == kept


@pytest.mark.parametrize(
    "given",
    [
        "",
        "+",
        "eng+",
        "+eng",
        "eng++deu",
        "ENG",
        "eng deu",
        "eng;rm -rf /",
        "../eng",
        "e",
        "eng+" * 8 + "deu",
    ],
)
def test_anything_else_is_refused_with_the_form_it_needs(given: str) -> None:
    with pytest.raises(ConfigurationError, match=r"joined by '\+' \(e\.g\. eng or eng\+deu\)"):
        checked_ocr_languages(given)


def test_the_parser_version_names_the_languages_only_when_they_are_not_the_default() -> None:
    assert parser_version() == parser_version("eng") == PARSER_VERSION
    assert parser_version("eng+deu") == f"{PARSER_VERSION}+ocr.eng+deu"
    assert parser_version("deu") != parser_version("eng+deu")


def test_the_setting_comes_from_the_environment_and_is_checked() -> None:
    settings = settings_from(option_values(env={"RAGSYNC_OCR_LANGUAGES": "eng+deu"}))
    assert (settings.ocr_languages, settings.parser_version) == ("eng+deu", f"{PARSER_VERSION}+ocr.eng+deu")
    assert Settings().parser_version == PARSER_VERSION
    with pytest.raises(ConfigurationError, match="ocr_languages"):
        settings_from(option_values(env={"RAGSYNC_OCR_LANGUAGES": "eng;id"}))


def _german_scan() -> bytes:
    """A PNG at 300 dpi of the three ``GERMAN`` lines, 40 px DejaVu Sans."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype("DejaVuSans.ttf", 40)
    image = Image.new("L", (1400, 420), 255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(GERMAN):
        draw.text((60, 80 + i * 90), line, font=font, fill=0)
    buf = io.BytesIO()
    image.save(buf, format="PNG", dpi=(300, 300))
    return buf.getvalue()


def _text(languages: str) -> str:
    result = parse(_german_scan(), "image/png", filename="brief.png", ocr_languages=languages)
    return " ".join(e.text for e in result.elements)


def test_german_letters_are_read_with_german_and_not_with_english_alone() -> None:
    assert {"eng", "deu"} <= installed_languages()
    both = _text("deu+eng")  # the main language first: with eng+deu "über" is read "Uber"
    assert [w for w in ("über", "Straße.", "Größere", "Füße", "schöne") if w not in both.split()] == []
    english = _text("eng")
    assert not {"über", "Straße.", "Füße"} & set(english.split())


def test_a_language_tesseract_lacks_is_a_configuration_error_naming_its_package() -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_languages("eng+xqz")
    message = str(caught.value)
    assert "xqz not installed" in message and "apt-get install tesseract-ocr-xqz" in message
    assert "eng" in message.split("installed: ", 1)[1]
    check_languages("eng+deu")  # installed: no error
    with pytest.raises(ConfigurationError, match="tesseract-ocr-chi-sim"):
        parse(_german_scan(), "image/png", ocr_languages="eng+chi_sim")


def _cli(*args: str) -> Any:
    """``ragsync ARGS --quiet --json`` in a fresh process: its JSON output."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "cli.main", *args, "--json"]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _scan_text(home: Path) -> str:
    """The indexed text of ``brief.png``: the query's hits from that file."""
    hits = _cli("query", "Fuchs springt Hund", "--groups", "everyone", "-k", "5", "--home", str(home))
    return " ".join(h["text"] for h in hits if h["uri"].endswith("brief.png"))


def test_changing_the_languages_reads_the_scans_again_with_them(tmp_path: Path) -> None:
    src, home = tmp_path / "src", tmp_path / "home"
    src.mkdir()
    (src / "brief.png").write_bytes(_german_scan())
    (src / "note.md").write_text("# Note\n\nThe parking garage opens at seven in the morning.\n")
    backfill = ("backfill", str(src), "--home", str(home), "--quiet")

    cold = _cli(*backfill)
    assert (cold["documents_indexed"], cold["dead_lettered"]) == (2, 0)
    english = _scan_text(home)
    assert "Fuchs" in english.split() and "über" not in english.split()

    german = _cli(*backfill, "--ocr-languages", "deu+eng")
    assert german["pipeline_skipped"] == 0
    assert german["documents_unread"] == 0  # both read again: their parser version changed
    assert german["dead_lettered"] == 0
    assert "über" in _scan_text(home).split()
    again = _cli(*backfill, "--ocr-languages", "deu+eng")
    assert (again["pipeline_skipped"], again["documents_unread"]) == (1, 2)

    cat = open_catalog(Settings(home=str(home)))
    try:
        versions = {
            d.source_object_id: d.parser_version
            for d in cat.documents.documents_for_source(cat.syncs.source_states()[0].source_id)
        }
    finally:
        cat.close()
    assert versions == {
        "brief.png": f"{PARSER_VERSION}+ocr.deu+eng",
        "note.md": f"{PARSER_VERSION}+ocr.deu+eng",
    }


def test_a_missing_language_dead_letters_the_scan_only_and_names_the_package(tmp_path: Path) -> None:
    src, home = tmp_path / "src", tmp_path / "home"
    src.mkdir()
    (src / "brief.png").write_bytes(_german_scan())
    (src / "note.md").write_text("# Note\n\nThe parking garage opens at seven in the morning.\n")

    run = _cli("backfill", str(src), "--home", str(home), "--quiet", "--ocr-languages", "eng+xqz")
    assert (run["documents_indexed"], run["dead_lettered"]) == (1, 1)
    letters = _cli("dead-letters", "list", "--home", str(home))
    assert [(Path(d["uri"]).name, d["stage"], d["error_class"]) for d in letters] == [
        ("brief.png", "parse", "configuration")
    ]
    assert "apt-get install tesseract-ocr-xqz" in letters[0]["message"]
