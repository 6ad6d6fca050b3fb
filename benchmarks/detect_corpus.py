"""Type detection over the whole shared corpus: misdetections before and after, in one run.

For every file of ``../shared/corpus/MANIFEST.tsv`` (documents, ground truth,
retrieval sets: every byte of the corpus) the script runs

* **before**: ``ragsync/ingest/detect.py`` as committed on ``--before-ref`` (default
  ``main``), loaded from git into its own module;
* **after**: the working tree's ``ragsync.ingest.detect.detect_mime``;
* **after + magika** (when ``magika`` is installed): the same, except that when
  our answer is only ``text/plain`` or ``application/octet-stream`` and Magika
  (Google's file-type model, shipped inside its wheel, offline) names a type we
  parse with score >= 0.9, Magika's type is taken. This measures whether Magika
  earns its place as evidence (accuracy gained vs milliseconds per file).

**What a file is** (the judge): its extension gives the acceptable types
(``detect_extensions.tsv``: a ``.html`` file is ``text/html``, a ``.csv`` is ``text/csv``...),
and a short table of named files (``detect_overrides.tsv``, each with the reason, from
reading the file) covers files whose content is not what their name says (an
e-mail saved as ``.txt``, a DOCX named ``.doc``, an encrypted OOXML file).
The manifest's ``mime_detected`` column (libmagic's opinion when the corpus was
built) is printed next to each miss but is not the judge: it is wrong on
exactly the cases this script is about. A file with no rule is reported as
``unjudged`` (not counted either way).

For each file whose type changed, both types are parsed (``ragsync.parsing.parse``)
and the outcomes are printed, so a "fix" that makes the parser fail shows up.

``--extra-html DIR`` adds HTML pages from a folder (``*.html``/``*.htm``, or
``*.html.gz``), all judged ``text/html``: e.g. the public article pages of
scrapinghub's article-extraction-benchmark, where libmagic calls 106 of 181
real news pages ``application/javascript``.

Usage::

    python benchmarks/detect_corpus.py [--before-ref main] [--extra-html DIR] [--no-magika]
        [--no-parse] [--json]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CORPUS = Path(os.environ.get("RAGSYNC_CORPUS", ROOT.parent / "shared" / "corpus"))

from ragsync.ingest.detect import detect_mime  # noqa: E402

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ENCRYPTED = "application/encrypted"


def _load_table(path: Path) -> dict[str, tuple[frozenset[str], str]]:
    """A tab-separated judge table next to this script: ``{key: (acceptable
    types, note)}`` from its lines ``key, comma-separated types[, note]``
    (``#`` lines are comments)."""
    table: dict[str, tuple[frozenset[str], str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, types, *note = line.split("\t")
            table[key] = (frozenset(types.split(",")), note[0] if note else "")
    return table


_HERE = Path(__file__).resolve().parent
# Acceptable types per extension (lower-case, without the dot).
_BY_EXT = {ext: types for ext, (types, _note) in _load_table(_HERE / "detect_extensions.tsv").items()}
# Files whose content is not what their extension says (read by hand), with the reason.
_OVERRIDES = _load_table(_HERE / "detect_overrides.tsv")


def expected_types(rel: str, data: bytes) -> tuple[frozenset[str] | None, str]:
    """What a corpus file is: acceptable MIME types and why (``None`` when no rule applies)."""
    if rel in _OVERRIDES:
        return _OVERRIDES[rel]
    name = rel.rsplit("/", 1)[-1]
    if not data:
        return frozenset({"application/x-empty"}), "zero bytes"
    if "_protected_passtika" in name and name.endswith((".docx", ".xlsx", ".pptx")):
        return frozenset({ENCRYPTED}), "password-protected OOXML (OLE EncryptedPackage)"
    if data.startswith(b"\xd0\xcf\x11\xe0") and b"E\x00n\x00c\x00r\x00y\x00p\x00t\x00e\x00d\x00P\x00" in data:
        return frozenset({ENCRYPTED}), "OLE EncryptedPackage"
    if "." not in name:
        return frozenset({"text/plain", "text/markdown"}), "no extension (licence texts, some setext-styled)"
    ext = name.rsplit(".", 1)[-1].lower()
    if ext == "doc" and data.startswith(b"PK\x03\x04"):
        return frozenset({DOCX}), "a DOCX named .doc"
    if ext == "doc" and data.lstrip().startswith(b"<?xml"):
        return frozenset({"text/xml", "application/xml"}), "Word 2003 XML named .doc"
    if ext == "ppt" and data.startswith(b"PK\x03\x04"):
        return frozenset({PPTX}), "a PPTX named .ppt"
    if ext == "odt" and not data.startswith(b"PK"):
        return frozenset({"application/vnd.oasis.opendocument.text"}), "broken ODT (text, named .odt)"
    if ext == "pdf" and b"%PDF-" not in data[:1024]:
        return frozenset({"application/pdf"}), "a PDF with junk before its header"
    found = _BY_EXT.get(ext)
    return (found, f"extension .{ext}") if found is not None else (None, f"no rule for .{ext}")


def load_before(ref: str) -> Callable[[bytes, str], str]:
    """``detect_mime`` from ``ragsync/ingest/detect.py`` at git ``ref``, as its own module."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:ragsync/ingest/detect.py"], check=True, capture_output=True
    ).stdout
    with tempfile.NamedTemporaryFile("wb", suffix="_detect_before.py", delete=False) as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location("detect_before", fh.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(fh.name)
    return module.detect_mime  # type: ignore[no-any-return]


class MagikaEvidence:
    """Magika as a tie-breaker for our weakest answers (plain text, unknown binary)."""

    AMBIGUOUS = ("text/plain", "application/octet-stream")

    def __init__(self) -> None:
        from magika import Magika

        from ragsync.parsing import supported_mimes

        self.model = Magika()
        self.parseable = set(supported_mimes()) | {"text/xml", "application/xml"}
        self.seconds = 0.0

    def refine(self, data: bytes, ours: str) -> str:
        started = time.perf_counter()
        result = self.model.identify_bytes(data)
        self.seconds += time.perf_counter() - started
        if ours not in self.AMBIGUOUS:
            return ours
        label = result.output.mime_type
        if label in self.parseable and label != ours and result.score >= 0.9:
            return str(label)
        return ours


def _outcome(data: bytes, mime: str, name: str) -> str:
    from ragsync.errors import RagsyncError
    from ragsync.parsing import parse

    try:
        result = parse(data, mime, filename=name)
    except RagsyncError as exc:
        return exc.error_class
    except Exception as exc:  # noqa: BLE001 - a bug: show it
        return f"internal:{type(exc).__name__}"
    return f"parsed({len(result.elements)} el)"


def _inputs(extra_html: str) -> list[tuple[str, str, bytes]]:
    """(label, manifest mime, bytes) for the manifest files, then the extra pages."""
    rows: list[tuple[str, str, bytes]] = []
    with open(CORPUS / "MANIFEST.tsv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            rows.append((row["path"], row["mime_detected"], (CORPUS / row["path"]).read_bytes()))
    if extra_html:
        for path in sorted(Path(extra_html).rglob("*")):
            if path.name.endswith(".html.gz"):
                rows.append((f"extra:{path.name[:-3]}", "", gzip.decompress(path.read_bytes())))
            elif path.suffix.lower() in (".html", ".htm"):
                rows.append((f"extra:{path.name}", "", path.read_bytes()))
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    before_fn = load_before(args.before_ref)
    magika = None
    if not args.no_magika:
        try:
            magika = MagikaEvidence()
        except ImportError:
            print("magika not installed: no magika column", file=sys.stderr)
    records: list[dict[str, Any]] = []
    seconds = Counter[str]()
    for rel, manifest_mime, data in _inputs(args.extra_html):
        name = rel.rsplit("/", 1)[-1].removeprefix("extra:")
        started = time.perf_counter()
        before = before_fn(data, name)
        seconds["before"] += time.perf_counter() - started
        started = time.perf_counter()
        after = detect_mime(data, name)
        seconds["after"] += time.perf_counter() - started
        with_magika = magika.refine(data, after) if magika is not None else ""
        if rel.startswith("extra:"):
            want: frozenset[str] | None = frozenset({"text/html"})
            why = "extra HTML page"
        else:
            want, why = expected_types(rel, data)
        rec: dict[str, Any] = {
            "file": rel,
            "set": "extra" if rel.startswith("extra:") else "corpus",
            "manifest": manifest_mime,
            "before": before,
            "after": after,
            "magika": with_magika,
            "expected": sorted(want) if want is not None else None,
            "why": why,
        }
        if want is not None:
            rec["before_ok"] = before in want
            rec["after_ok"] = after in want
            rec["magika_ok"] = with_magika in want if magika is not None else None
        if before != after and not args.no_parse:
            rec["parse_before"] = _outcome(data, before, name)
            rec["parse_after"] = _outcome(data, after, name)
        records.append(rec)
    if magika is not None:
        seconds["magika"] = magika.seconds
    return {"records": records, "seconds": dict(seconds), "before_ref": args.before_ref}


def _summary(records: list[dict[str, Any]], subset: str) -> dict[str, Any]:
    rows = [r for r in records if r["set"] == subset]
    judged = [r for r in rows if r["expected"] is not None]
    out: dict[str, Any] = {"files": len(rows), "judged": len(judged), "unjudged": len(rows) - len(judged)}
    for side in ("before", "after", "magika"):
        key = f"{side}_ok"
        if judged and judged[0].get(key) is None:
            continue
        out[f"{side}_misdetected"] = sum(1 for r in judged if not r.get(key))
    return out


def report(result: dict[str, Any]) -> str:
    records = result["records"]
    n = len(records)
    secs = result["seconds"]
    lines = [
        f"Detection over {n} files (before = {result['before_ref']}:ragsync/ingest/detect.py, "
        "after = working tree)",
        "",
        "| set | files | judged | misdetected before | after | after + magika |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for subset in ("corpus", "extra"):
        s = _summary(records, subset)
        if not s["files"]:
            continue
        lines.append(
            f"| {subset} | {s['files']} | {s['judged']} | {s.get('before_misdetected', '')} | "
            f"{s.get('after_misdetected', '')} | {s.get('magika_misdetected', 'n/a')} |"
        )
    lines += [
        "",
        "| detector | ms/file (mean) |",
        "|---|---:|",
        *(f"| {k} | {1000 * v / max(1, n):.2f} |" for k, v in secs.items()),
        "",
        "Misdetected after (corpus and extra):",
    ]
    for r in records:
        if r.get("after_ok") is False:
            lines.append(
                f"  {r['file']}: got {r['after']}, want {'/'.join(r['expected'])} "
                f"({r['why']}; manifest {r['manifest'] or '-'})"
            )
    lines += ["", "Fixed (misdetected before, right after):"]
    fixed = Counter(
        (r["before"], r["after"]) for r in records if r.get("before_ok") is False and r.get("after_ok")
    )
    lines += [f"  {count:4d}  {b} -> {a}" for (b, a), count in fixed.most_common()]
    broken = [r for r in records if r.get("before_ok") and r.get("after_ok") is False]
    lines += ["", f"Broken (right before, misdetected after): {len(broken)}"]
    lines += [f"  {r['file']}: {r['before']} -> {r['after']}" for r in broken]
    changed = [r for r in records if "parse_before" in r]
    outcome = Counter((r["parse_before"].split("(")[0], r["parse_after"].split("(")[0]) for r in changed)
    lines += ["", f"Parse outcome of the {len(changed)} files whose type changed (before -> after):"]
    lines += [f"  {count:4d}  {b} -> {a}" for (b, a), count in outcome.most_common()]
    if any(r.get("magika_ok") is not None for r in records):
        gained = [r for r in records if r.get("magika_ok") and not r.get("after_ok")]
        lost = [r for r in records if r.get("after_ok") and r.get("magika_ok") is False]
        lines += ["", f"Magika as evidence: fixes {len(gained)}, breaks {len(lost)}"]
        lines += [f"  + {r['file']}: {r['after']} -> {r['magika']}" for r in gained]
        lines += [f"  - {r['file']}: {r['after']} -> {r['magika']}" for r in lost]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before-ref", default="main", help="git ref of the 'before' detect.py")
    parser.add_argument("--extra-html", default="", help="folder of extra HTML pages (.html or .html.gz)")
    parser.add_argument("--no-magika", action="store_true", help="skip the magika column")
    parser.add_argument("--no-parse", action="store_true", help="do not parse files whose type changed")
    parser.add_argument("--json", action="store_true", help="print the records as JSON")
    args = parser.parse_args()
    if not (CORPUS / "MANIFEST.tsv").is_file():
        print(f"shared corpus not found at {CORPUS} (set RAGSYNC_CORPUS)", file=sys.stderr)
        return 2
    result = run(args)
    print(json.dumps(result, indent=1) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
