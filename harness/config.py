"""A test's configuration: defaults, then a TOML file, then a scenario, then the command line.

Every option is declared by the part it belongs to (`harness.options`): `RunOptions`
here (the test itself), `BackendOptions` (where nodes run), the selected db's, the
selected workload's and the nemesis package's. `load_config(toml_path, overrides)`
merges the layers and validates, raising `ConfigError` that names the source (file or
option), the key and what is expected. Table options (`broker_config`) merge key by key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.control.backends import BackendOptions
from harness.db.registry import DBS
from harness.options import ConfigError, Declared, build, declared, layered, origins
from harness.scenarios import SCENARIOS
from nemesis.package import NemesisOptions
from workloads.registry import WORKLOADS

__all__ = ["ConfigError", "RunOptions", "TestConfig", "declaring_parts", "load_config",
           "sections"]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """The test's own options: its parts by name, its size and duration, where it is stored."""

    name: str | None = field(default=None, metadata={
        "help": "test name, the store folder (default: the workload's name)"})
    db: str = field(default="kchaos", metadata={"help": "system under test",
                                                "choices": tuple(DBS)})
    workload: str = field(default="queue", metadata={"help": "workload",
                                                      "choices": tuple(WORKLOADS)})
    checker: str | None = field(default=None, metadata={
        "help": "checkers to run, comma-separated (default: the workload's)",
        "metavar": "A,B,..."})
    nodes: int = field(default=5, metadata={"help": "brokers"})
    time_limit: float = field(default=60.0, metadata={
        "help": "seconds of workload under faults", "metavar": "SECONDS"})
    scenario: str | None = field(default=None, metadata={
        "help": "a staged scenario instead of random faults; 'list' lists them",
        "metavar": "NAME", "choices": (*SCENARIOS, "list"), "const": "list"})
    recovery_seconds: float = field(default=10.0, metadata={"help": "wait after healing"})
    final_read_seconds: float = field(default=60.0, metadata={"help": "bound on final reads"})
    seed: int | None = field(default=None, metadata={
        "help": "seed of every random choice (default: random, printed)"})
    store: str = field(default="store", metadata={"help": "store folder", "metavar": "DIR"})
    spark_master: str | None = field(default=None, metadata={
        "help": "Spark master for the checkers (default: local[*], or this process for a "
                "small history)", "metavar": "URL"})
    no_check: bool = field(default=False, metadata={
        "help": "end the run once its history and node logs are stored: no check, no report "
                "(`kchaos check` or `kchaos nightly` checks it later)"})

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 99:
            raise ValueError("nodes must be 1 to 99")
        if self.time_limit <= 0:
            raise ValueError(f"time_limit must be > 0 seconds, got {self.time_limit:g}")
        if self.recovery_seconds < 0:
            raise ValueError(f"recovery_seconds must be >= 0, got {self.recovery_seconds:g}")
        if self.final_read_seconds <= 0:
            raise ValueError(f"final_read_seconds must be > 0, got {self.final_read_seconds:g}")
        if self.name is not None and (not self.name or "/" in self.name
                                      or self.name.startswith(".")):
            raise ValueError(f"name must be a plain folder name, got {self.name!r}")


@dataclass(frozen=True)
class TestConfig:
    """Every option of a test, by the part that declares it."""

    __test__ = False  # not a pytest test class, despite its name

    run: RunOptions = field(default_factory=RunOptions)
    backend: BackendOptions = field(default_factory=BackendOptions)
    db: Any = field(default_factory=lambda: DBS["kchaos"].options())
    workload: Any = field(default_factory=lambda: WORKLOADS["queue"].options())
    nemesis: NemesisOptions = field(default_factory=NemesisOptions)

    def to_json(self) -> dict[str, Any]:
        """The declared options of every part, by section (test.json's "config")."""
        return {section: {o.name: _jsonable(getattr(getattr(self, section), o.name))
                          for o in declared(type(getattr(self, section)))}
                for section in ("run", "backend", "db", "workload", "nemesis")}


def _jsonable(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def sections(db: str = "kchaos", workload: str = "queue") -> dict[str, type]:
    """The options dataclass of each section, for the named db and workload."""
    return {"run": RunOptions, "backend": BackendOptions, "db": DBS[db].options,
            "workload": WORKLOADS[workload].options, "nemesis": NemesisOptions}


def declaring_parts() -> list[tuple[str, type]]:
    """Every registered part that declares options, by name ("run", "backend", "nemesis",
    "db NAME", "workload NAME"), with its options dataclass."""
    parts: list[tuple[str, type]] = [("run", RunOptions), ("backend", BackendOptions),
                                     ("nemesis", NemesisOptions)]
    parts += [(f"db {name}", kind.options) for name, kind in DBS.items()]
    parts += [(f"workload {name}", kind.options) for name, kind in WORKLOADS.items()]
    return parts


def all_options() -> dict[str, list[tuple[str, Declared]]]:
    """Every option any registered part declares: name -> [(owner, declaration)]."""
    found: dict[str, list[tuple[str, Declared]]] = {}
    for owner, options in declaring_parts():
        for option in declared(options):
            found.setdefault(option.name, []).append((owner, option))
    return found


def load_config(toml_path: Path | None = None,
                overrides: Mapping[str, Any] | None = None) -> TestConfig:
    """Defaults, then the TOML file, then the scenario's settings, then `overrides`
    (command-line values that were given; None means not given)."""
    layers: list[tuple[str, dict[str, Any]]] = []
    if toml_path is not None:
        layers.append((str(toml_path), {key.replace("-", "_"): value
                                        for key, value in _read_toml(toml_path).items()}))
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    known = all_options()
    for source, values in layers:
        for key in values:
            if key not in known:
                raise ConfigError(f"{source}: unknown key {key!r}; known keys: "
                                  f"{', '.join(sorted(known))}")
    layers.append(("command line", given))
    run_values = layered(declared(RunOptions), layers)
    run = build(RunOptions, run_values, origins(layers, run_values))
    scenario = SCENARIOS.get(run.scenario or "")
    if scenario is not None:
        layers.insert(-1, (f"scenario {scenario.name}",
                           {**scenario.config, "broker_config": dict(scenario.broker_config)}))
    chosen = sections(run.db, run.workload)
    parts: dict[str, Any] = {}
    for section, options in chosen.items():
        values = layered(declared(options), layers)
        parts[section] = build(options, values, origins(layers, values))
    _refuse_foreign(layers, chosen, known)
    return TestConfig(**parts)


def _refuse_foreign(layers: list[tuple[str, dict[str, Any]]], chosen: Mapping[str, type],
                    known: Mapping[str, list[tuple[str, Declared]]]) -> None:
    """An option of a db or workload that is not the selected one is an error."""
    used = {option.name for options in chosen.values() for option in declared(options)}
    for source, layer in layers:
        for name in layer:
            if name in known and name not in used:
                owners = ", ".join(owner for owner, _ in known[name])
                raise ConfigError(f"{source}: {name} belongs to {owners}, which this test "
                                  f"does not use")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from error

