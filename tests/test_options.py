"""Every setting is reachable as a pipeline option, a ``ragsync`` flag and a
``RAGSYNC_*`` environment variable (``ragsync.options``), and the README's
command forms parse, Beam options after ``--`` included."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from cli.main import build_parser, parse_command, settings_from_args
from ragsync.config import Settings
from ragsync.errors import ConfigurationError
from ragsync.index.backends import register_vector_backend
from ragsync.ingest.chunking import ChunkerConfig
from ragsync.options import (
    CHUNK_PREFIX,
    SETTING_OPTIONS,
    option,
    option_values,
    parse_pipeline_args,
    setting_flags,
    setting_names,
    settings_from,
    settings_from_pipeline_args,
)
from tests.pipeline_options import RagsyncOptions

DEFAULTS = Settings(home="/tmp/ragsync-defaults")


def _default(name: str) -> Any:
    if name.startswith(CHUNK_PREFIX):
        return getattr(DEFAULTS.chunker, name[len(CHUNK_PREFIX) :])
    return getattr(DEFAULTS, name)


class _OtherVectors:
    """A second vector backend, registered so ``vector_index`` has a valid
    value other than the default (never opened here)."""

    name = "other-vectors"

    def one_process(self, settings: Any) -> str:
        return "held in this process's memory"


_OTHER_VECTORS = _OtherVectors()
register_vector_backend(_OTHER_VECTORS)  # type: ignore[arg-type]


def _value(name: str) -> Any:
    """A valid value that is not the default."""
    default = _default(name)
    if name == "home":
        return "/tmp/ragsync-opt-home"
    if name == "embed_backend":  # one of a closed set
        return "onnx"
    if name == "keyword_index":  # one of a closed set
        return "milvus"
    if name == "vector_index":  # a registered backend's name
        return _OTHER_VECTORS.name
    if name == "plugins":  # modules that must import
        return "tests.fake_connector"
    if name == "ocr_languages":  # traineddata names joined by '+'
        return "deu+eng"
    if isinstance(default, bool):
        raise AssertionError(f"{name}: boolean settings need a value here")
    if isinstance(default, int):
        return default + 7
    if isinstance(default, float):
        return round(default / 2 + 0.01, 4)
    return f"value-of-{name}"


def _read(settings: Settings, name: str) -> Any:
    if name.startswith(CHUNK_PREFIX):
        return getattr(settings.chunker, name[len(CHUNK_PREFIX) :])
    return getattr(settings, name)


def test_every_settings_field_has_one_option_with_help() -> None:
    fields = [f.name for f in dataclasses.fields(Settings) if f.name != "chunker"]
    fields += [CHUNK_PREFIX + f.name for f in dataclasses.fields(ChunkerConfig)]
    assert sorted(setting_names()) == sorted(fields)
    assert sorted(o.name for o in SETTING_OPTIONS) == sorted(fields)
    for o in SETTING_OPTIONS:
        assert len(o.help) > 15, o.name
        default = _default(o.name)
        assert default is None or o.type is type(default), o.name  # None: "the model's own"
    assert {o.name for o in SETTING_OPTIONS if o.secret} == {"milvus_token", "es_api_key", "es_password"}


@pytest.mark.parametrize("name", setting_names())
def test_each_setting_from_pipeline_options_env_and_flag(name: str, tmp_path: Path) -> None:
    value = _value(name)
    expected = os.path.abspath(value) if name == "home" else value
    home = {} if name == "home" else {"home": str(tmp_path)}
    # Pipeline option (as Beam, the template launcher and `ragsync CMD -- ...` give it).
    settings, values, rest = settings_from_pipeline_args([f"--{name}={value}", "--runner=DirectRunner"])
    assert _read(settings, name) == expected and rest == ["--runner=DirectRunner"]
    view = PipelineOptions([f"--{name}={value}"]).view_as(RagsyncOptions).get_all_options()
    assert view[name] == value
    # Environment variable (a string, converted).
    env = {option(name).env: str(value)}
    assert _read(settings_from({**option_values(env=env), **home}), name) == expected
    # ragsync flag, dashed.
    args = parse_command(build_parser(), ["status", option(name).flag, str(value)])
    assert _read(settings_from_args(args), name) == expected


def test_precedence_flag_then_pipeline_option_then_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RAGSYNC_ES_URL", "http://env:9200")
    monkeypatch.setenv("RAGSYNC_MAX_BYTES", "1000")
    monkeypatch.setenv("RAGSYNC_MILVUS_TOKEN", "env-token")
    argv = ["backfill", str(tmp_path), "--home", str(tmp_path), "--es-url", "http://flag:9200"]
    argv += ["--", "--es_url=http://opt:9200", "--max_bytes=2000", "--runner=DirectRunner"]
    args = parse_command(build_parser(), argv)
    settings = settings_from_args(args)
    assert settings.es_url == "http://flag:9200"
    assert settings.max_bytes == 2000
    assert settings.milvus_token == "env-token"
    assert args.beam_args == ["--runner=DirectRunner"]  # ragsync's options never reach Beam
    assert "env-token" not in repr(settings)  # secrets stay out of logs


def test_a_bad_environment_value_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSYNC_MAX_BYTES", "lots")
    with pytest.raises(ConfigurationError, match="RAGSYNC_MAX_BYTES='lots': max_bytes must be a int"):
        option_values()
    monkeypatch.setenv("RAGSYNC_MAX_BYTES", "-1")
    with pytest.raises(ConfigurationError, match="must be positive"):
        settings_from(option_values())


def test_api_key_and_basic_auth_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        Settings(home=str(tmp_path), es_api_key="k", es_username="u", es_password="p")


@pytest.mark.parametrize(
    "argv,beam,source",
    [
        # The README's forms, verbatim.
        (
            ["backfill", "DIR", "--", "--runner=DirectRunner", "--s3_endpoint_url=http://127.0.0.1:9000"],
            ["--runner=DirectRunner", "--s3_endpoint_url=http://127.0.0.1:9000"],
            "DIR",
        ),
        (
            [
                "backfill",
                "s3://docs/kb",
                "--tenant",
                "acme",
                "--acl-groups",
                "staff",
                "--",
                "--runner=DirectRunner",
                "--s3_endpoint_url=http://127.0.0.1:9000",
                "--s3_access_key_id=k",
                "--s3_secret_access_key=s",
            ],
            [
                "--runner=DirectRunner",
                "--s3_endpoint_url=http://127.0.0.1:9000",
                "--s3_access_key_id=k",
                "--s3_secret_access_key=s",
            ],
            "s3://docs/kb",
        ),
        (
            [
                "backfill",
                "gs://b/p",
                "--tenant",
                "acme",
                "--acl-groups",
                "staff",
                "--catalog-url",
                "postgresql://x",
                "--milvus-uri",
                "http://m:19530",
                "--es-url",
                "https://es:9200",
                "--",
                "--runner=DataflowRunner",
                "--project",
                "P",
                "--region",
                "R",
                "--temp_location",
                "gs://t",
            ],
            ["--runner=DataflowRunner", "--project", "P", "--region", "R", "--temp_location", "gs://t"],
            "gs://b/p",
        ),
    ],
)
def test_readme_backfill_forms_parse(argv: list[str], beam: list[str], source: str) -> None:
    args = parse_command(build_parser(), argv)
    assert args.source == source and args.beam_args == beam


def test_other_pipeline_commands_take_beam_args_after_dashes() -> None:
    parser = build_parser()
    sync = parse_command(parser, ["sync", "wiki", "--full", "--", "--runner=DirectRunner", "--es_index=kw"])
    assert sync.beam_args == ["--runner=DirectRunner"] and sync.pipeline_values == {"es_index": "kw"}
    stream = parse_command(parser, ["stream", "--until-idle", "--", "--runner=DirectRunner"])
    assert stream.beam_args == ["--runner=DirectRunner"] and stream.until_idle
    query = parse_command(parser, ["query", "--groups", "g", "--", "-minus"])
    assert query.text == "-minus"  # no pipeline: `--` keeps its argparse meaning


def test_setting_flags_rebuild_the_settings_in_a_child(tmp_path: Path) -> None:
    settings = Settings(
        home=str(tmp_path),
        es_url="http://es:9200",
        max_bytes=99,
        es_api_key="secret",
        chunker=ChunkerConfig(max_tokens=300),
    )
    flags = setting_flags(settings)
    assert "secret" not in flags
    rebuilt = settings_from_args(parse_command(build_parser(), ["status", *flags]))
    assert rebuilt == dataclasses.replace(settings, es_api_key="")


def test_stream_lanes_from_flag_pipeline_option_or_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.stream import _lanes

    parser = build_parser()
    assert _lanes(parse_command(parser, ["stream"])) == "all"
    assert _lanes(parse_command(parser, ["stream", "--", "--lanes=slow"])) == "slow"
    monkeypatch.setenv("RAGSYNC_LANES", "priority,fast")
    assert _lanes(parse_command(parser, ["stream"])) == "priority,fast"
    assert _lanes(parse_command(parser, ["stream", "--lanes", "slow"])) == "slow"


def _readme_commands() -> list[str]:
    """Every ``ragsync ...`` command line in the bash blocks of the README and
    docs/ (continuations joined)."""
    root = Path(__file__).resolve().parents[1]
    text = "\n".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    commands: list[str] = []
    in_bash = False
    pending = ""
    for line in text.splitlines():
        if line.startswith("```"):
            in_bash = line.strip() == "```bash" and not in_bash
            continue
        if not in_bash:
            continue
        line = pending + line.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        command = line.split("ragsync ", 1)
        if line.startswith("ragsync ") or (len(command) == 2 and line.split()[0].startswith("RAGSYNC_")):
            commands.append("ragsync " + command[1])
    return commands


def test_every_readme_command_line_parses() -> None:
    import shlex

    commands = _readme_commands()
    assert len(commands) >= 10
    assert any("-- --runner=DirectRunner" in c and "s3://" in c for c in commands)
    parser = build_parser()
    for command in commands:
        argv = shlex.split(command, comments=True)[1:]
        # The shell's part of the line (redirections, a pipe, backgrounding) is not the command's.
        for i, token in enumerate(argv):
            if token in ("|", "&", "&&", ";") or token.startswith((">", "2>", "<")):
                argv = argv[:i]
                break
        try:
            parse_command(parser, argv)
        except SystemExit as exc:  # argparse's refusal
            raise AssertionError(f"README command does not parse: {command}") from exc


def test_settings_from_a_pipeline_options_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.pipeline_options import settings_from_pipeline_options

    monkeypatch.setenv("RAGSYNC_FETCH_TIMEOUT_S", "12.5")
    options = PipelineOptions([f"--home={tmp_path}", "--es_url=http://es:9200", "--runner=DirectRunner"])
    settings = settings_from_pipeline_options(options)
    assert (settings.home, settings.es_url, settings.fetch_timeout_s) == (
        str(tmp_path),
        "http://es:9200",
        12.5,
    )


def _subcommand_help(*path: str) -> str:
    parser: Any = build_parser()
    for name in path:
        parser = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[name]
    return str(parser.format_help())


@pytest.mark.parametrize("path", [("backfill",), ("sources", "add"), ("serve",), ("stream",), ("query",)])
def test_help_shows_the_commands_own_arguments_before_the_shared_settings(path: tuple[str, ...]) -> None:
    """Each subcommand's usage names its own arguments and ends in [SETTINGS];
    the ~45 shared settings come after them, under one heading."""
    text = _subcommand_help(*path)
    usage, _, body = text.partition("\n\n")
    assert usage.rstrip().endswith("[SETTINGS]")
    assert "--catalog-url" not in usage and "--home" not in usage
    own = body.index("options:\n")
    shared = body.index("settings shared by every command")
    assert own < shared
    assert body.index("--catalog-url", own) > shared and body.index("--home", own) > shared


def test_shared_settings_still_parse_after_the_commands_own_arguments() -> None:
    args = build_parser().parse_args(["status", "--json", "--home", "h", "--catalog-url", "sqlite:///c.db"])
    assert (args.json, args.home, args.catalog_url) == (True, "h", "sqlite:///c.db")


@pytest.mark.parametrize(
    ("given", "value"),
    [
        (["--until_idle"], True),  # a flag, as its help says
        (["--until_idle=1"], True),  # what templates and scripts pass: kept
        (["--until_idle=true"], True),
        (["--until_idle=0"], False),
        (["--until_idle=false"], False),
        (["--reread"], True),
        (["--reread=1"], True),
        (["--reread=no"], False),
        ([], None),
    ],
)
def test_yes_no_options_are_flags_that_also_take_a_value(given: list[str], value: bool | None) -> None:
    """``until_idle`` and ``reread`` are flags: given bare they are on; a
    value (1/0, true/false, yes/no, on/off), as a Flex Template passes
    parameters, still works."""
    values, rest = parse_pipeline_args([*given, "--runner=DirectRunner"])
    assert rest == ["--runner=DirectRunner"]
    name = given[0].lstrip("-").split("=")[0] if given else "until_idle"
    assert values.get(name) is value
    assert all(isinstance(v, bool) for k, v in values.items() if k in ("until_idle", "reread"))


def test_a_yes_no_option_refuses_other_values_and_reads_the_environment() -> None:
    with pytest.raises(SystemExit):  # argparse: "invalid yes/no value: 'maybe'"
        parse_pipeline_args(["--until_idle=maybe"])
    assert option_values(env={"RAGSYNC_UNTIL_IDLE": "1"})["until_idle"] is True
    assert option_values(env={"RAGSYNC_UNTIL_IDLE": "off"})["until_idle"] is False
    with pytest.raises(ConfigurationError, match="RAGSYNC_UNTIL_IDLE='maybe': until_idle must be 1 or 0"):
        option_values(env={"RAGSYNC_UNTIL_IDLE": "maybe"})


@pytest.mark.parametrize(
    "argv",
    [["stream", "--until-idle"], ["stream", "--until_idle"], ["stream", "--", "--until_idle"]],
)
def test_stream_until_idle_is_a_flag_in_every_spelling(argv: list[str], tmp_path: Path) -> None:
    """With nothing queued the stream returns at once (no pipeline): the
    flag was read. ``-- --until_idle`` was refused ("expected one argument")
    and ``-- --until_idle=1`` ignored."""
    from cli.main import main

    code = main([*argv[:1], "--home", str(tmp_path), "--quiet", "--json", *argv[1:]])
    assert code == 0
