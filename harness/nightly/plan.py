"""A nightly plan: a TOML file naming the runs of a night and what each cell must show.

    name = "nightly"              # the plan's name (resume finds the latest night of it)
    budget = 480                  # minutes for the runs; runs not started in time are skipped
    seeds = [1, 2, 3]             # or a count: seeds = 3 means 1, 2, 3
    parallel = 1                  # runs at once (the command line's --parallel wins)

    [defaults]                    # `kchaos run` options of every run (TOML keys of --config)
    time_limit = 60
    nodes = 3

    [db_defaults.kafka]           # options of every run on one db, over the defaults
    kafka_version = "3.9.1"

    [matrix]                      # a cross product: dbs x workloads x nemeses x configurations
    dbs = ["kchaos", "kafka"]
    workloads = ["queue"]
    nemeses = ["partition", "kill-leader,pause"]
    [matrix.configurations.safe]  # a named option set; may carry `expect`
    acks = "all"
    [matrix.configurations.unclean]
    broker_config = {"unclean.leader.election.enable" = true, "min.insync.replicas" = 1}
    expect = {anomalies = ["lost-write"], attributed_to = "unclean-election", found_in = 2}

    [[cell]]                      # an explicit cell, for suites that are not a cross product
    name = "unclean-2013"
    dbs = ["kchaos"]              # default: the defaults' db, else kchaos
    seeds = [1, 2]                # default: the plan's
    options = {scenario = "unclean-2013"}
    expect = {anomalies = ["lost-write"], attributed_to = "unclean-election"}
    needs = ["shrink-isr-isolate-leader"]  # default: one of the cell's faults

    [[cell]]
    name = "acks1-kill-leader"
    options = {acks = "1", nemesis = "kill-leader"}
    expect = {anomalies = ["lost-write"], attributed_to = "clean-election"}
    [[cell]]                      # the control of a detection: valid, its options the cell's
    name = "acks1-kill-leader-control"  # but one key (the knob, version or setting tested)
    control_of = "acks1-kill-leader"
    options = {acks = "all", nemesis = "kill-leader"}
    [[cell]]                      # cells of one `compare` name form one side-by-side table
    name = "modes-zookeeper"      # on the night's pages: anomalies, failover, seconds
    compare = "modes"             # without an ok write (e.g. one schedule on three modes)
    options = {kafka_version = "3.9.1", metadata = "zookeeper", nemesis = "kill-leader"}

Every cell is one db and one option set; its name is stable and readable, because it is
the runs' test name (their store folder), the junit classname and the key of the store
index's trends: `<configuration>.<workload>.<nemesis>.<db>` for a matrix cell (a
nemesis list's commas become `+`; without `nemeses` the nemesis part is `default`,
without `configurations` the configuration is `default`) and `<name>.<db>` for an
explicit cell. A run's options are the defaults, then its db's `db_defaults`, then the
configuration's (or the cell's) options, tables such as `broker_config` merged key by
key; the night sets `name`, `seed`, `store` and `no_check` itself, so a plan may not.
Each cell's options are validated as `kchaos run --config` validates them, before
anything starts; as there, a `scenario`'s own settings (its time limit, keys, nemesis)
win over the plan's.

Expectations (`harness.nightly.verdicts` evaluates them): `expect = "valid"` (the
default) or a table `{anomalies = [...], any_of = [...], attributed_to = "...", found_in = N,
within = S, absent = [...]}`; `{absent = [...]}` alone is a valid cell that may not show
those types even where its configuration allows them, and a valid cell may say
`conclusive_in = N`. Every anomaly type named must be one a registered checker declares
(`checker.registry.anomaly_types`), `attributed_to` such a type or one without its
`-loss`; `found_in` and `within` belong to detections, `conclusive_in` to valid cells.

`needs` (a cell's, or a configuration's) names the faults that must each take effect
in a run for that run to count (be conclusive); without it, a cell whose runs ask for
faults needs at least one of them to take effect, and `needs = []` needs none. A
needed fault must be one the cell asks for (its nemesis, or its scenario's faults).
"""

from __future__ import annotations

import difflib
import json
import re
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from checker.registry import anomaly_types
from harness.config import ConfigError, all_options, load_config
from harness.db.cluster_db import ClusterOptions
from harness.scenarios import SCENARIOS
from nemesis.package import FAULTS, expand

__all__ = ["Cell", "Expectation", "Plan", "PlanError", "load_plan", "parse_plan", "suite_path",
           "suites", "toml_text"]

SUITES = Path(__file__).parent / "suites"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")
SET_BY_NIGHT = ("name", "seed", "store", "no_check", "config")
TOP_KEYS = ("name", "description", "budget", "seeds", "parallel", "defaults", "db_defaults",
            "matrix", "cell")
MATRIX_KEYS = ("dbs", "workloads", "nemeses", "configurations")
CELL_KEYS = ("name", "description", "dbs", "seeds", "options", "expect", "needs", "control_of",
             "compare")
CONFIGURATION_KEYS = ("expect", "needs")
EXPECT_KEYS = ("anomalies", "any_of", "attributed_to", "found_in", "within", "absent",
               "conclusive_in")
DEFAULT = "default"


class PlanError(ConfigError):
    """A plan that cannot be used; the message names the file, the key and what to do."""


@dataclass(frozen=True)
class Expectation:
    """What a cell must show, judged over its conclusive runs. No anomalies and no
    attribution: every conclusive run valid, and at least `conclusive_in` of them (None:
    every seed). Otherwise a detection: every type in `anomalies` found (allowed or not),
    at least one type of `any_of` (a defect that shows differently from seed to seed),
    and, with `attributed_to` X, a checker reporting `X-loss` or `X`, in at least
    `found_in` conclusive runs (None: every seed), and with `within`, detected at most
    that many seconds after the fault episode that caused it. `absent`: types no run may
    show, even those its configuration allows (a version with the fix, where the one
    before finds them)."""

    anomalies: tuple[str, ...] = ()
    attributed_to: str | None = None
    found_in: int | None = None
    within: float | None = None
    any_of: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    conclusive_in: int | None = None

    @property
    def valid(self) -> bool:
        return not self.anomalies and not self.any_of and self.attributed_to is None

    def describe(self) -> str:
        without = f", without {' or '.join(self.absent)}" if self.absent else ""
        if self.valid:
            runs = ("every seed" if self.conclusive_in is None
                    else f"at least {self.conclusive_in} conclusive runs")
            return f"valid in {runs}" + without
        what = [" and ".join(self.anomalies)] if self.anomalies else []
        if self.any_of:
            what.append("one of " + ", ".join(self.any_of))
        text = "finds " + (" and ".join(what) or "an anomaly")
        if self.attributed_to:
            text += f" attributed to {self.attributed_to}"
        if self.within is not None:
            text += f" within {self.within:g} s of its fault"
        return text + (f" in at least {self.found_in} seeds" if self.found_in is not None
                       else " in every seed") + without

    def to_json(self) -> Any:
        if self.valid and not self.absent and self.conclusive_in is None:
            return "valid"
        body: dict[str, Any] = {"anomalies": list(self.anomalies)}
        for key in ("any_of", "absent"):
            if getattr(self, key):
                body[key] = list(getattr(self, key))
        for key in ("attributed_to", "found_in", "within", "conclusive_in"):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        return body


@dataclass(frozen=True)
class Cell:
    """One db and one option set, run once per seed. `faults`: those its runs ask for (its
    nemesis expanded, or its scenario's); `needs`: those that must each take effect for a
    run to be conclusive (None: at least one of `faults`)."""

    name: str
    label: str
    db: str
    configuration: str
    options: dict[str, Any]
    seeds: tuple[int, ...]
    expect: Expectation = field(default_factory=Expectation)
    time_limit: float = 60.0
    nodes: int = 5
    zookeepers: int = 0
    faults: tuple[str, ...] = ()
    needs: tuple[str, ...] | None = None
    control_of: str | None = None
    compare: str | None = None  # cells with one `compare` label form a side-by-side table

    def run_options(self, seed: int, store: Path) -> dict[str, Any]:
        """The `kchaos run` options of this cell's run with `seed` in the night `store`."""
        return {**self.options, "db": self.db, "name": self.name, "seed": seed,
                "store": str(store), "no_check": True}

    def needed(self) -> int:
        """How many conclusive runs must find a detection, or be valid for a valid cell."""
        count = self.expect.conclusive_in if self.expect.valid else self.expect.found_in
        return len(self.seeds) if count is None else count

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "db": self.db,
                "configuration": self.configuration, "options": self.options,
                "seeds": list(self.seeds), "expect": self.expect.to_json(),
                "time_limit": self.time_limit, "nodes": self.nodes,
                "zookeepers": self.zookeepers, "faults": list(self.faults),
                "needs": None if self.needs is None else list(self.needs),
                "control_of": self.control_of, "compare": self.compare}


@dataclass(frozen=True)
class Plan:
    name: str
    source: str
    cells: tuple[Cell, ...]
    budget_minutes: float | None = None
    parallel: int = 1
    description: str = ""

    def runs(self) -> list[tuple[Cell, int]]:
        """Every (cell, seed), seed by seed: each cell's first seed runs before any cell's
        second, so a budget cut leaves every cell with its earlier seeds."""
        most = max((len(cell.seeds) for cell in self.cells), default=0)
        return [(cell, cell.seeds[i]) for i in range(most) for cell in self.cells
                if i < len(cell.seeds)]


def suites() -> list[str]:
    """The names of the plans shipped in the package (`--suite NAME`)."""
    return sorted(path.stem for path in SUITES.glob("*.toml"))


def suite_path(name: str) -> Path:
    path = SUITES / f"{name}.toml"
    if not NAME.match(name) or not path.is_file():
        raise PlanError(f"--suite {name}: no such suite; shipped suites: "
                        f"{', '.join(suites()) or 'none'}")
    return path


def load_plan(path: Path) -> Plan:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise PlanError(f"{path}: cannot read the plan: {error.strerror}") from error
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PlanError(f"{path}: not valid TOML: {error}") from error
    return parse_plan(data, str(path))


def parse_plan(data: Mapping[str, Any], source: str) -> Plan:
    """The plan a parsed TOML document describes; PlanError names `source` and the key."""
    _known_keys(data, TOP_KEYS, source, "")
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or not NAME.match(name):
        raise PlanError(f"{source}: name must be a plain name (letters, digits, . _ + -), "
                        f"got {name!r}")
    budget = data.get("budget")
    if budget is not None and not _positive(budget):
        raise PlanError(f"{source}: budget must be minutes > 0, got {budget!r}")
    parallel = data.get("parallel", 1)
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise PlanError(f"{source}: parallel must be an integer >= 1, got {parallel!r}")
    seeds = _seeds(data.get("seeds", [1]), source, "seeds")
    defaults = _options(data.get("defaults", {}), source, "defaults")
    by_db = data.get("db_defaults", {})
    if not isinstance(by_db, Mapping):
        raise PlanError(f"{source}: db_defaults must be tables [db_defaults.DB] of options")
    db_defaults = {db: _options(options, source, f"db_defaults.{db}")
                   for db, options in by_db.items()}
    cells: list[Cell] = []
    if "matrix" in data:
        cells += _matrix(data["matrix"], defaults, db_defaults, seeds, source)
    entries = data.get("cell", [])
    if not isinstance(entries, list):
        raise PlanError(f"{source}: cell must be an array of tables ([[cell]] entries)")
    for i, entry in enumerate(entries):
        cells += _explicit(entry, defaults, db_defaults, seeds, source, f"cell[{i}]")
    if not cells:
        raise PlanError(f"{source}: no cells; add a [matrix] or [[cell]] entries")
    seen: dict[str, Cell] = {}
    for cell in cells:
        if cell.name in seen:
            raise PlanError(f"{source}: two cells are named {cell.name!r}; give them "
                            f"different names or configurations")
        seen[cell.name] = cell
    labels = {cell.label for cell in cells}
    for cell in cells:
        if cell.control_of is not None and cell.control_of not in labels:
            raise PlanError(f"{source}: cell {cell.label}: control_of names no cell of the "
                            f"plan: {cell.control_of!r}; known: {', '.join(sorted(labels))}")
    return Plan(name, source, tuple(cells), float(budget) if budget is not None else None,
                parallel, str(data.get("description", "")))


def _known_keys(table: Mapping[str, Any], known: tuple[str, ...], source: str,
                where: str) -> None:
    if not isinstance(table, Mapping):
        raise PlanError(f"{source}: {where.rstrip('.')} must be a table")
    for key in table:
        if key not in known:
            raise PlanError(f"{source}: unknown key {where}{key}; known keys there: "
                            f"{', '.join(known)}")


def _seeds(value: Any, source: str, where: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return tuple(range(1, value + 1))
    if (isinstance(value, list) and value
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
            and len(set(value)) == len(value)):
        return tuple(value)
    raise PlanError(f"{source}: {where} must be a count >= 1 or a list of distinct integers "
                    f">= 0, got {value!r}")


def _options(value: Any, source: str, where: str) -> dict[str, Any]:
    """A table of `kchaos run` options, keys normalised to underscores."""
    if not isinstance(value, Mapping):
        raise PlanError(f"{source}: {where} must be a table of `kchaos run` options")
    known = all_options()
    options = {}
    for key, item in value.items():
        name = key.replace("-", "_")
        if name in SET_BY_NIGHT:
            raise PlanError(f"{source}: {where}.{key}: set by the night itself; remove it "
                            f"(seeds come from `seeds`, the store from --store)")
        if name not in known:
            raise PlanError(f"{source}: {where}.{key}: not a `kchaos run` option; see "
                            f"`kchaos run --help` (known: {', '.join(sorted(known))})")
        options[name] = item
    return options


def _merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Options layer over layer; tables (broker_config) merge key by key."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = dict(value) if isinstance(value, Mapping) else value
    return merged


def _names(value: Any, source: str, where: str) -> list[str]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, str) and v for v in value)):
        raise PlanError(f"{source}: {where} must be a non-empty list of strings, got {value!r}")
    return value


def _positive(value: Any) -> bool:
    """A number (not a bool) above 0."""
    return not isinstance(value, bool) and isinstance(value, int | float) and value > 0


def _unknown(source: str, where: str, what: str, name: str, known: set[str]) -> PlanError:
    """The error for a name that is not one of `known`, with the closest known name."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
    hint = (f"did you mean {close[0]!r}?" if close
            else f"known: {', '.join(sorted(known))}")
    return PlanError(f"{source}: {where}: unknown {what} {name!r}; {hint}")


def _anomaly_types(value: Mapping[str, Any], key: str, source: str,
                   where: str) -> tuple[str, ...]:
    types = value.get(key, [])
    if not isinstance(types, list) or not all(isinstance(a, str) and a for a in types):
        raise PlanError(f"{source}: {where}.{key} must be a list of anomaly types, "
                        f"e.g. [\"lost-write\"], got {types!r}")
    known = set(anomaly_types())
    for kind in types:
        if kind not in known:
            raise _unknown(source, f"{where}.{key}", "anomaly type (no checker reports it)",
                           kind, known)
    return tuple(types)


def _causes() -> set[str]:
    """What `attributed_to` may name: a reported type, or one without its `-loss`."""
    return {kind.removesuffix("-loss") for kind in anomaly_types()} | set(anomaly_types())


def _count(value: Mapping[str, Any], key: str, source: str, where: str) -> int | None:
    count = value.get(key)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or count < 1):
        raise PlanError(f"{source}: {where}.{key} must be a number of runs >= 1, "
                        f"got {count!r}")
    return count


def _expectation(value: Any, source: str, where: str) -> Expectation:
    if value is None or value == "valid":
        return Expectation()
    if not isinstance(value, Mapping):
        raise PlanError(f"{source}: {where} must be \"valid\" or a table {{anomalies = [...], "
                        f"any_of = [...], attributed_to = \"...\", found_in = N, "
                        f"within = SECONDS, absent = [...]}}, got {value!r}")
    _known_keys(value, EXPECT_KEYS, source, f"{where}.")
    anomalies = _anomaly_types(value, "anomalies", source, where)
    any_of = _anomaly_types(value, "any_of", source, where)
    absent = _anomaly_types(value, "absent", source, where)
    attributed = value.get("attributed_to")
    if attributed is not None and (not isinstance(attributed, str) or not attributed):
        raise PlanError(f"{source}: {where}.attributed_to must be a cause such as "
                        f"\"unclean-election\", got {attributed!r}")
    if attributed is not None and attributed not in _causes():
        raise _unknown(source, f"{where}.attributed_to", "cause (no checker reports it)",
                       attributed, _causes())
    found_in = _count(value, "found_in", source, where)
    conclusive_in = _count(value, "conclusive_in", source, where)
    if not anomalies and not any_of and attributed is None and not absent \
            and conclusive_in is None:
        raise PlanError(f"{source}: {where}: a detection needs anomalies, any_of or "
                        f"attributed_to; "
                        f"write expect = \"valid\" for a cell that must find nothing")
    within = value.get("within")
    if within is not None and not _positive(within):
        raise PlanError(f"{source}: {where}.within must be seconds > 0, got {within!r}")
    detection = bool(anomalies or any_of or attributed is not None)
    for key in ("found_in", "within"):
        if not detection and key in value:
            raise PlanError(f"{source}: {where}.{key}: only a detection (anomalies, any_of "
                            f"or attributed_to) is found in some runs or within a time; a "
                            f"valid cell must be valid in every conclusive run: remove "
                            f"{key} (conclusive_in says how many runs must be conclusive)")
    if detection and conclusive_in is not None:
        raise PlanError(f"{source}: {where}.conclusive_in: a detection counts only conclusive "
                        f"runs already (found_in of them); remove conclusive_in")
    return Expectation(anomalies, attributed, found_in,
                       float(within) if within is not None else None, any_of, absent,
                       conclusive_in)


def _needs(value: Any, source: str, where: str) -> tuple[str, ...] | None:
    """A `needs` list of fault names (None when absent)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PlanError(f"{source}: {where}.needs must be a list of fault names, e.g. "
                        f"[\"strand-follower\"], or [] for none, got {value!r}")
    for name in value:
        if name not in FAULTS:
            raise _unknown(source, f"{where}.needs", "fault (`kchaos run --nemesis list`)",
                           name, set(FAULTS))
    return tuple(dict.fromkeys(value))


def _matrix(matrix: Any, defaults: dict[str, Any], db_defaults: Mapping[str, dict[str, Any]],
            seeds: tuple[int, ...], source: str) -> list[Cell]:
    _known_keys(matrix, MATRIX_KEYS, source, "matrix.")
    dbs = _names(matrix.get("dbs", [defaults.get("db", "kchaos")]), source, "matrix.dbs")
    workloads = _names(matrix.get("workloads", [defaults.get("workload", "queue")]), source,
                       "matrix.workloads")
    nemeses = (_names(matrix["nemeses"], source, "matrix.nemeses") if "nemeses" in matrix
               else [None])
    configurations = matrix.get("configurations", {DEFAULT: {}})
    if not isinstance(configurations, Mapping) or not configurations:
        raise PlanError(f"{source}: matrix.configurations must be tables "
                        f"[matrix.configurations.NAME] of options")
    cells = []
    for config_name, body in configurations.items():
        where = f"matrix.configurations.{config_name}"
        if not NAME.match(config_name):
            raise PlanError(f"{source}: {where}: a configuration's name must be a plain name "
                            f"(letters, digits, . _ + -)")
        if not isinstance(body, Mapping):
            raise PlanError(f"{source}: {where} must be a table of options")
        expect = _expectation(body.get("expect"), source, f"{where}.expect")
        needs = _needs(body.get("needs"), source, where)
        options = _options({k: v for k, v in body.items() if k not in CONFIGURATION_KEYS},
                           source, where)
        for workload in workloads:
            for nemesis in nemeses:
                for db in dbs:
                    label = ".".join((config_name, workload,
                                      (nemesis or DEFAULT).replace(",", "+"), db))
                    layer = {"workload": workload, **({"nemesis": nemesis} if nemesis else {})}
                    cells.append(_cell(label, label, db, config_name,
                                       _merge(defaults, db_defaults.get(db, {}), options,
                                              layer), seeds, expect, needs, source))
    return cells


def _explicit(entry: Any, defaults: dict[str, Any], db_defaults: Mapping[str, dict[str, Any]],
              seeds: tuple[int, ...], source: str, where: str) -> list[Cell]:
    _known_keys(entry, CELL_KEYS, source, f"{where}.")
    label = entry.get("name")
    if not isinstance(label, str) or not NAME.match(label):
        raise PlanError(f"{source}: {where}.name must be a plain name (letters, digits, "
                        f". _ + -), got {label!r}")
    where = f"cell {label}"
    options = _options(entry.get("options", {}), source, f"{where}.options")
    if "db" in options:
        raise PlanError(f"{source}: {where}.options.db: name the dbs with `dbs = [...]`")
    dbs = _names(entry.get("dbs", [defaults.get("db", "kchaos")]), source, f"{where}.dbs")
    cell_seeds = _seeds(entry["seeds"], source, f"{where}.seeds") if "seeds" in entry else seeds
    expect = _expectation(entry.get("expect"), source, f"{where}.expect")
    needs = _needs(entry.get("needs"), source, where)
    control_of = entry.get("control_of")
    if control_of is not None and (not isinstance(control_of, str) or control_of == label):
        raise PlanError(f"{source}: {where}.control_of must name another cell, "
                        f"got {control_of!r}")
    compare = entry.get("compare")
    if compare is not None and (not isinstance(compare, str) or not NAME.match(compare)):
        raise PlanError(f"{source}: {where}.compare must be a plain name (the table the "
                        f"cell is shown in, side by side with the others of that name), "
                        f"got {compare!r}")
    return [replace(_cell(f"{label}.{db}", label, db, "",
                          _merge(defaults, db_defaults.get(db, {}), options),
                          cell_seeds, expect, needs, source), control_of=control_of,
                    compare=compare)
            for db in dbs]


def _cell(name: str, label: str, db: str, configuration: str, options: dict[str, Any],
          seeds: tuple[int, ...], expect: Expectation, needs: tuple[str, ...] | None,
          source: str) -> Cell:
    """The cell, its options validated as `kchaos run` validates them."""
    options = {k: v for k, v in options.items() if k != "db"}
    for key in ("found_in", "conclusive_in"):
        count = getattr(expect, key)
        if count is not None and count > len(seeds):
            raise PlanError(f"{source}: cell {name}: expect.{key} is {count} but the cell "
                            f"has {len(seeds)} seeds")
    with tempfile.TemporaryDirectory(prefix="kchaos-plan-") as folder:
        path = Path(folder) / f"{name}.toml"
        path.write_text(toml_text({**options, "db": db, "name": name, "no_check": True}),
                        encoding="utf-8")
        try:  # as the child run will read it: a scenario's settings win over the file's
            config = load_config(path)
        except ConfigError as error:
            message = str(error).replace(f"{path}: ", "")
            raise PlanError(f"{source}: cell {name}: {message}") from error
    zookeepers = config.db.zookeeper_nodes() if isinstance(config.db, ClusterOptions) else 0
    scenario = SCENARIOS.get(config.run.scenario or "")
    faults = tuple(scenario.faults if scenario is not None
                   else expand(config.nemesis.nemesis))
    missing = [fault for fault in needs or () if fault not in faults]
    if missing:
        raise PlanError(f"{source}: cell {name}: needs {', '.join(missing)}, which its runs "
                        f"never ask for (they ask for {', '.join(faults) or 'no fault'}); "
                        f"add it to the nemesis or remove it from needs")
    return Cell(name, label, db, configuration, options, seeds, expect,
                config.run.time_limit, config.run.nodes, zookeepers, faults, needs)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    raise PlanError(f"option value {value!r}: only strings, numbers, booleans and tables "
                    f"of them are `kchaos run` options")


def toml_text(options: Mapping[str, Any]) -> str:
    """Options (scalars, and one level of tables) as a TOML document for `--config`."""
    lines = [f"{json.dumps(key)} = {_toml_value(value)}" for key, value in options.items()
             if not isinstance(value, Mapping)]
    for key, table in options.items():
        if isinstance(table, Mapping):
            lines.append(f"\n[{json.dumps(key)}]")
            lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
