"""Generate small parser fixtures the project owns (no corpus files copied)."""

from __future__ import annotations

from pathlib import Path

from ragsync import samples

MARKDOWN_EXTRA = """---
title: Security FAQ
owner: security-team
---

Security FAQ
============

Intro paragraph with a [link](https://example.com) and **bold** text.

Passwords
---------

- Use a password manager.
  - Nested: rotate shared secrets yearly.
- Enable MFA everywhere.

```bash
ssh-keygen -t ed25519
```

| Control | Owner |
|---|---|
| MFA | IT |
| Backups | Ops |
"""

HTML_EXTRA = """<html><head><title>Benefits</title></head><body>
<nav>Home | HR | IT</nav>
<div class="content"><h1>Benefits</h1><p>Loose <b>text</b> here.</p>
<ul><li>Health insurance<ul><li>Dental included</li></ul></li><li>Gym subsidy</li></ul>
<table><tr><td>Benefit</td><td>Value</td></tr><tr><td>Gym</td><td>30 EUR</td></tr></table>
</div><footer>Footer text</footer></body></html>
"""


def write_fixtures(dest: Path) -> dict[str, Path]:
    """Write every fixture into ``dest``.

    Args:
        dest: an existing or new folder.

    Returns:
        Fixture name -> path (names are the golden file stems).
    """
    dest.mkdir(parents=True, exist_ok=True)
    title, sentences = next(iter(samples.TOPICS.items()))
    files: dict[str, bytes] = {
        "wiki_page.md": samples.markdown_page(title, sentences).encode(),
        "security_faq.md": MARKDOWN_EXTRA.encode(),
        "intranet.html": samples.html_page(title, sentences).encode(),
        "benefits.html": HTML_EXTRA.encode(),
        "policy.docx": samples.docx_bytes(title, sentences),
        "note.txt": samples.text_note(title, sentences).encode(),
        "handbook.pdf": samples.policy_pdf_bytes(4),
        "two_column.pdf": samples.two_column_pdf_bytes(),
    }
    out: dict[str, Path] = {}
    for name, data in files.items():
        path = dest / name
        path.write_bytes(data)
        out[name] = path
    return out
