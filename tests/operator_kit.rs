//! The operator's kit in `deploy/` names only metrics the services export, and its alert
//! rules parse and pass their own unit tests.
//!
//! - [`every_metric_the_dashboard_and_rules_use_is_exported`]: a scheduler and a synthesis
//!   replica export OTLP into a real receiver ([`otlp`]) while traffic against a fake OpenAI
//!   vendor records every instrument the kit reads (429s, cooldowns, failovers, an exhausted
//!   request, quota gauges, a stream's first audio); the received names are translated the
//!   way `deploy/otel-collector.yaml`'s `prometheus` exporter names them ([`prometheus_series`])
//!   and every metric named by `deploy/grafana/voxpool-dashboard.json` (panel targets and
//!   template variables) and `deploy/prometheus/voxpool-rules.yaml` must be among them.
//! - [`rules_parse_and_their_unit_tests_pass`]: `promtool check rules` on the rule file and on
//!   the dashboard's expressions, `promtool test rules` on `voxpool-rules.test.yaml`. promtool
//!   comes with the Debian package `prometheus` (`.ci/run` installs it).
//!
//! The receiver is polled until every needed name arrived (with a deadline), and the pool
//! status until the cooled keys are back: signals, not sleeps.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use opentelemetry_proto::tonic::metrics::v1::{Metric, metric::Data};
use tokio_stream::StreamExt;
use voxpool_e2e::{Service, binary, otlp, start, workspace_root};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Fault, Step, VendorKind};
use voxpool_proto::{
    scheduler::v1 as spb,
    synthesis::v1::{self as pb, synthesize_request::Voice},
};

const DASHBOARD: &str = "deploy/grafana/voxpool-dashboard.json";
const RULES: &str = "deploy/prometheus/voxpool-rules.yaml";
const RULE_TESTS: &str = "deploy/prometheus/voxpool-rules.test.yaml";
const COLLECTOR: &str = "deploy/otel-collector.yaml";
/// The fake snapshot's tts model id for provider `openai`.
const POOL: &str = "openai-fake";

// ---------------------------------------------------------------------------------------
// OTLP -> Prometheus names
// ---------------------------------------------------------------------------------------

/// What the exporter sees of an OTLP metric's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Gauge,
    /// A monotonic sum (an OTel counter).
    Counter,
    /// A non-monotonic sum (an up-down counter): a Prometheus gauge, but not `_ratio`.
    UpDownSum,
    Histogram,
    ExponentialHistogram,
    Summary,
}

impl Kind {
    fn of(m: &Metric) -> Option<Self> {
        Some(match m.data.as_ref()? {
            Data::Gauge(_) => Kind::Gauge,
            Data::Sum(s) if s.is_monotonic => Kind::Counter,
            Data::Sum(_) => Kind::UpDownSum,
            Data::Histogram(_) => Kind::Histogram,
            Data::ExponentialHistogram(_) => Kind::ExponentialHistogram,
            Data::Summary(_) => Kind::Summary,
        })
    }
}

/// UCUM unit -> Prometheus unit word (`unitMap` of the translator below).
fn unit_word(unit: &str) -> &str {
    match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "1" => "",
        "%" => "percent",
        other => other,
    }
}

/// The "per" half of a rate unit (`perUnitMap`).
fn per_unit_word(unit: &str) -> &str {
    match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

/// Splits on every character that is not a letter or digit, dropping empty pieces
/// (Go's `strings.FieldsFunc(s, !IsLetter && !IsDigit)`).
fn fields(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The Prometheus metric name the OpenTelemetry Collector's `prometheus` exporter gives an
/// OTLP metric, with suffixes on (`add_metric_suffixes`, default true; feature gate
/// `pkg.translator.prometheus.NormalizeName`, enabled by default in the collector
/// deploy/docker-compose.yml runs, 0.111.0).
///
/// Source: opentelemetry-collector-contrib `pkg/translator/prometheus/normalize_name.go`
/// (`BuildCompliantName` -> `normalizeName`; the README of that package and of
/// `exporter/prometheusexporter` describe the same rules), which the exporter calls for every
/// metric it serves:
/// 1. the name is split into tokens at every character that is not a letter or digit (dots
///    and underscores alike), empty tokens dropped;
/// 2. the unit is split at the first `/`; its main part, unless empty or containing `{` / `}`
///    (an annotation such as `{lease}` is dropped), is mapped by the UCUM table above
///    (`s` -> `seconds`, `ms` -> `milliseconds`, `By` -> `bytes`, `1` -> nothing, others kept),
///    cleaned to letters/digits and appended unless already a token; a per part is appended as
///    `per` + its word (`m/s` -> `meters_per_second`) under the same conditions;
/// 3. a monotonic sum gets `total` (moved to the end if present); a *gauge* of unit `1` gets
///    `ratio` likewise (not sums: see the upstream comment);
/// 4. `namespace` (if any) is prepended, tokens are joined with `_`, and a leading digit gets
///    a `_` prefix.
fn prometheus_name(name: &str, unit: &str, kind: Kind, namespace: &str) -> String {
    let mut tokens = fields(name);
    let mut parts = unit.splitn(2, '/');
    let main = parts.next().unwrap_or("").trim();
    if !main.is_empty() && !main.contains(['{', '}']) {
        let word = fields(unit_word(main)).join("_");
        if !word.is_empty() && !tokens.contains(&word) {
            tokens.push(word);
        }
    }
    if let Some(per) = parts.next().map(str::trim).filter(|p| !p.is_empty())
        && !per.contains(['{', '}'])
    {
        let word = fields(per_unit_word(per)).join("_");
        if !word.is_empty() && !tokens.contains(&word) {
            tokens.push("per".into());
            tokens.push(word);
        }
    }
    let suffix = |tokens: &mut Vec<String>, s: &str| {
        tokens.retain(|t| t != s);
        tokens.push(s.to_owned());
    };
    if kind == Kind::Counter {
        suffix(&mut tokens, "total");
    }
    if unit == "1" && kind == Kind::Gauge {
        suffix(&mut tokens, "ratio");
    }
    if !namespace.is_empty() {
        tokens.insert(0, namespace.to_owned());
    }
    let joined = tokens.join("_");
    if joined.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{joined}")
    } else {
        joined
    }
}

/// Every series name a PromQL query can select for that metric: a classic histogram is
/// served as `_bucket`, `_sum` and `_count`, a summary as the name (quantiles), `_sum` and
/// `_count`; an exponential histogram becomes a native histogram under the bare name.
fn prometheus_series(name: &str, unit: &str, kind: Kind, namespace: &str) -> Vec<String> {
    let base = prometheus_name(name, unit, kind, namespace);
    match kind {
        Kind::Histogram => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{base}{s}"))
            .collect(),
        Kind::Summary => vec![base.clone(), format!("{base}_sum"), format!("{base}_count")],
        _ => vec![base],
    }
}

/// The exporter's `namespace` in deploy/otel-collector.yaml; panics when the config turns
/// metric suffixes off (the translation above assumes them on).
fn collector_namespace() -> String {
    let text = std::fs::read_to_string(workspace_root().join(COLLECTOR)).expect(COLLECTOR);
    let config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("collector YAML");
    let exporter = &config["exporters"]["prometheus"];
    assert!(
        exporter.is_mapping(),
        "{COLLECTOR} has no exporters.prometheus: the kit reads what it serves"
    );
    assert_ne!(
        exporter["add_metric_suffixes"].as_bool(),
        Some(false),
        "{COLLECTOR} turns metric suffixes off: update prometheus_name and the kit"
    );
    exporter["namespace"].as_str().unwrap_or("").to_owned()
}

#[test]
fn translation_follows_the_collector_rules() {
    // The examples of the translator's README, and this project's cases.
    let n = |name, unit, kind| prometheus_name(name, unit, kind, "");
    assert_eq!(
        n("system.filesystem.usage", "By", Kind::Gauge),
        "system_filesystem_usage_bytes"
    );
    assert_eq!(
        n("system.network.dropped", "{packets}", Kind::Gauge),
        "system_network_dropped"
    );
    assert_eq!(
        n("system.network.dropped", "packets", Kind::Gauge),
        "system_network_dropped_packets"
    );
    assert_eq!(
        n("system.memory.utilization", "1", Kind::Gauge),
        "system_memory_utilization_ratio"
    );
    assert_eq!(
        n("(lambda).function.executions(#)", "", Kind::Gauge),
        "lambda_function_executions"
    );
    assert_eq!(n("speed", "m/s", Kind::Gauge), "speed_meters_per_second");
    assert_eq!(
        n("http.duration", "ms", Kind::Gauge),
        "http_duration_milliseconds"
    );
    assert_eq!(n("requests.total", "1", Kind::Counter), "requests_total");
    assert_eq!(n("queue.depth", "1", Kind::UpDownSum), "queue_depth");
    assert_eq!(
        n("voxpool.scheduler.acquires", "{acquire}", Kind::Counter),
        "voxpool_scheduler_acquires_total"
    );
    assert_eq!(
        n("voxpool.key.in_flight", "{lease}", Kind::Gauge),
        "voxpool_key_in_flight"
    );
    assert_eq!(
        prometheus_series(
            "voxpool.synthesis.first_audio.duration",
            "s",
            Kind::Histogram,
            ""
        ),
        [
            "voxpool_synthesis_first_audio_duration_seconds_bucket",
            "voxpool_synthesis_first_audio_duration_seconds_sum",
            "voxpool_synthesis_first_audio_duration_seconds_count"
        ]
    );
    assert_eq!(prometheus_name("up", "", Kind::Gauge, "vp"), "vp_up");
}

// ---------------------------------------------------------------------------------------
// Metric names in PromQL
// ---------------------------------------------------------------------------------------

/// PromQL keywords that look like identifiers but are not metric names.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "atan2",
];
/// Keywords followed by a parenthesised list of label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Index just past the bracket that closes the one at `open` (`chars[open]`), skipping
/// quoted strings inside.
fn skip_group(chars: &[char], open: usize, close: char) -> usize {
    let opener = chars[open];
    let mut depth = 0;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = skip_string(chars, i) - 1,
            c if c == opener => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

/// Index just past the string literal starting at `start`.
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        if chars[i] == '\\' && quote != '`' {
            i += 2;
            continue;
        }
        if chars[i] == quote {
            return i + 1;
        }
        i += 1;
    }
    chars.len()
}

/// The metric names a PromQL expression selects: identifiers not followed by `(` or by
/// `by` / `without` (functions and aggregations are), not keywords, outside string literals, label matchers `{...}`,
/// ranges `[...]`, grouping lists (`by (...)`, `on (...)`, ...), numbers / durations and
/// Grafana variables (`$pool`, `${x}`). `#` starts a comment.
fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '{' {
            i = skip_group(&chars, i, '}');
        } else if c == '[' {
            i = skip_group(&chars, i, ']');
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '$' {
            i += 1;
            if chars.get(i) == Some(&'{') {
                i = skip_group(&chars, i, '}');
            } else {
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // 0.95, 1e3, 5m, 0x1f: one token.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if ident_start(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            // `sum (...)`, and an aggregation with its grouping first: `sum by (...) (...)`.
            let rest: String = chars[next..].iter().take(8).collect();
            let call = chars.get(next) == Some(&'(')
                || ["by", "without"].iter().any(|g| {
                    rest.strip_prefix(g)
                        .is_some_and(|r| r.starts_with(|c: char| c == '(' || c.is_whitespace()))
                });
            if GROUPING.contains(&word.as_str()) {
                if call {
                    i = skip_group(&chars, next, ')');
                }
            } else if !call && !KEYWORDS.contains(&word.as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The metric names of a Grafana Prometheus variable query: `label_values(SELECTOR, label)`
/// reads SELECTOR's metrics, `label_values(label)` none, `query_result(EXPR)` EXPR's.
fn variable_metric_names(query: &str) -> BTreeSet<String> {
    let q = query.trim();
    if let Some(inner) = q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return match inner.rfind(',') {
            Some(comma) => promql_metric_names(&inner[..comma]),
            None => BTreeSet::new(),
        };
    }
    if let Some(inner) = q
        .strip_prefix("query_result(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return promql_metric_names(inner);
    }
    if q.starts_with("label_names(") || q.starts_with("metrics(") {
        return BTreeSet::new();
    }
    promql_metric_names(q)
}

/// Names used by `uses` (where -> names) that `exported` lacks, as `where: name` lines.
fn missing(uses: &BTreeMap<String, BTreeSet<String>>, exported: &BTreeSet<String>) -> Vec<String> {
    uses.iter()
        .flat_map(|(place, names)| {
            names
                .iter()
                .filter(|n| !exported.contains(*n))
                .map(move |n| format!("{place}: {n}"))
        })
        .collect()
}

#[test]
fn metric_names_are_read_out_of_promql() {
    let names = |e: &str| promql_metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.95, sum by (le, pool) (rate(a_seconds_bucket{pool=~"$pool", x="y}z"}[$__rate_interval])))"#
        ),
        ["a_seconds_bucket"]
    );
    assert_eq!(
        names("sum without (key) (b_total) / ignoring (x) group_left (y) c offset 5m > bool 1e3"),
        ["b_total", "c"]
    );
    assert_eq!(
        names("(x_ratio > 0.9) unless on (pool) (max by (pool) (y{state=\"a\"}) == 0) # z"),
        ["x_ratio", "y"]
    );
    assert_eq!(names(r#"absent(up{job="j"}) and vector(1)"#), ["up"]);
    assert_eq!(
        variable_metric_names("label_values(voxpool_pool_capacity{job=\"s\"}, pool)"),
        BTreeSet::from(["voxpool_pool_capacity".to_owned()])
    );
    assert!(variable_metric_names("label_values(pool)").is_empty());
    // A name the services do not export is reported.
    let uses = BTreeMap::from([(
        "panel \"x\"".to_owned(),
        promql_metric_names("rate(voxpool_bogus_total[5m]) / rate(known_total[5m])"),
    )]);
    let exported = BTreeSet::from(["known_total".to_owned()]);
    assert_eq!(
        missing(&uses, &exported),
        ["panel \"x\": voxpool_bogus_total"]
    );
}

// ---------------------------------------------------------------------------------------
// The kit's expressions
// ---------------------------------------------------------------------------------------

/// Every `expr` of the dashboard's panels (rows' nested panels too), by panel title.
fn dashboard_exprs(v: &serde_json::Value, title: &str, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(map) => {
            let title = map
                .get("title")
                .and_then(|t| t.as_str())
                .unwrap_or(title)
                .to_owned();
            for (k, child) in map {
                match (k.as_str(), child) {
                    ("expr", serde_json::Value::String(e)) => {
                        out.push((format!("dashboard panel {title:?}"), e.clone()));
                    }
                    ("templating", _) => {}
                    _ => dashboard_exprs(child, &title, out),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                dashboard_exprs(item, title, out);
            }
        }
        _ => {}
    }
}

fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(workspace_root().join(DASHBOARD)).expect(DASHBOARD);
    serde_json::from_str(&text).expect("dashboard JSON")
}

/// The dashboard's query variables: (name, query).
fn dashboard_variables(d: &serde_json::Value) -> Vec<(String, String)> {
    d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let q = v["query"]
                .get("query")
                .and_then(|q| q.as_str())
                .or_else(|| v["query"].as_str())
                .or_else(|| v["definition"].as_str())
                .expect("a variable query");
            (v["name"].as_str().unwrap_or("?").to_owned(), q.to_owned())
        })
        .collect()
}

/// The rule file's alerts / recording rules: (name, expr).
fn rule_exprs() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(workspace_root().join(RULES)).expect(RULES);
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("rules YAML");
    let mut out = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"]
                .as_str()
                .or_else(|| rule["record"].as_str())
                .expect("alert or record");
            let expr = rule["expr"].as_str().expect("expr");
            out.push((format!("rule {name}"), expr.to_owned()));
        }
    }
    out
}

/// Where each metric name is used: "dashboard panel ..." / "dashboard variable ..." /
/// "rule ..." -> names. Panics when an expression yields no metric name (the extraction
/// would then prove nothing about it).
fn kit_metric_uses() -> BTreeMap<String, BTreeSet<String>> {
    let d = dashboard();
    let mut exprs = Vec::new();
    dashboard_exprs(&d["panels"], "", &mut exprs);
    assert!(exprs.len() >= 10, "the dashboard has its panels: {exprs:?}");
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |place: String, expr: &str, names: BTreeSet<String>| {
        assert!(!names.is_empty(), "{place}: no metric name in {expr:?}");
        uses.entry(place).or_default().extend(names);
    };
    for (place, expr) in exprs.iter().chain(rule_exprs().iter()) {
        add(place.clone(), expr, promql_metric_names(expr));
    }
    let variables = dashboard_variables(&d);
    assert!(
        variables.iter().any(|(n, _)| n == "pool"),
        "the dashboard has a `pool` variable"
    );
    for (name, query) in variables {
        add(
            format!("dashboard variable ${name}"),
            &query,
            variable_metric_names(&query),
        );
    }
    uses
}

/// Every `job="..."` value the kit's expressions match on (job = the OTel service.name).
fn kit_jobs() -> BTreeSet<String> {
    let d = dashboard();
    let mut exprs = Vec::new();
    dashboard_exprs(&d["panels"], "", &mut exprs);
    exprs
        .into_iter()
        .chain(rule_exprs())
        .flat_map(|(_, e)| {
            e.match_indices("job=\"")
                .filter_map(|(at, m)| {
                    let rest = &e[at + m.len()..];
                    rest.find('"').map(|end| rest[..end].to_owned())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// promtool
// ---------------------------------------------------------------------------------------

/// Runs promtool with `args` in `dir`; panics with the install hint when it is missing.
fn promtool(dir: &Path, args: &[&str]) -> std::process::Output {
    match Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "promtool is not on PATH: install the Debian package `prometheus` \
             (`apt-get install prometheus`; .ci/run does) to check deploy/prometheus/"
        ),
        Err(e) => panic!("promtool: {e}"),
    }
}

fn assert_success(what: &str, out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rules_parse_and_their_unit_tests_pass() {
    let root = workspace_root();
    let out = promtool(&root, &["check", "rules", RULES]);
    assert_success("promtool check rules", &out);
    let out = promtool(&root, &["test", "rules", RULE_TESTS]);
    assert_success("promtool test rules", &out);

    // The dashboard's queries parse too: as recording rules, Grafana's variables filled in.
    let d = dashboard();
    let mut exprs = Vec::new();
    dashboard_exprs(&d["panels"], "", &mut exprs);
    let rules: Vec<serde_json::Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, (_, e))| {
            let e = e
                .replace("$__rate_interval", "5m")
                .replace("$__interval", "1m")
                .replace("$pool", ".*");
            serde_json::json!({ "record": format!("voxpool_dashboard:expr_{i}"), "expr": e })
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dashboard-exprs.yaml");
    // JSON is YAML.
    let doc = serde_json::json!({ "groups": [{ "name": "dashboard", "rules": rules }] });
    std::fs::write(&file, doc.to_string()).expect("write");
    let out = promtool(dir.path(), &["check", "rules", "dashboard-exprs.yaml"]);
    assert_success("promtool check rules (the dashboard's expressions)", &out);
}

// ---------------------------------------------------------------------------------------
// The services' exported names
// ---------------------------------------------------------------------------------------

/// Pool `openai-fake` at the fake vendor: keys `u/k0` (with a character quota) and `u/k1`,
/// capacity 2 each, whose credential files hold their own names.
fn write_config(dir: &Path, base_url: &str) -> PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n"
    );
    for (k, quota) in [
        ("k0", "quota = { characters = 1000000, per = \"month\" }\n"),
        ("k1", ""),
    ] {
        let credential = dir.join(k);
        std::fs::write(&credential, format!("{k}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"{k}\"\ncapacity = 2\n{quota}credential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    // A budget, so the scheduler exports its budget gauge (voxpool.budget.used).
    t.push_str(
        "[[budgets]]\nid = \"kit\"\ntenants = [\"kit\"]\ncharacters = 1000000\nper = \"month\"\n",
    );
    t.push_str("[scheduler]\nrecovery_window_ms = 0\nwait_poll_ms = 10\n");
    t.push_str(voxpool_e2e::CLIENT_TOKENS_TOML);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

/// `cmd` exporting OTLP to `endpoint` every 200 ms, under its default service name.
fn exporting(mut cmd: Command, endpoint: &str) -> Service {
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES");
    start(cmd)
}

/// Prometheus series names of everything received so far, and the service names seen.
fn exported(received: &otlp::Received, namespace: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut names = BTreeSet::new();
    let mut services = BTreeSet::new();
    for m in received.metrics() {
        services.insert(m.service.clone());
        if let Some(kind) = Kind::of(&m.metric) {
            names.extend(prometheus_series(
                &m.metric.name,
                &m.metric.unit,
                kind,
                namespace,
            ));
        }
    }
    (names, services)
}

/// Waits (polling GetPoolStatus) until every key of the pool is AVAILABLE again.
async fn until_keys_available(scheduler: &Service) {
    let mut client = voxpool_e2e::scheduler_client(&scheduler.addr).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let status = client
            .get_pool_status(spb::GetPoolStatusRequest { pool: POOL.into() })
            .await
            .expect("pool status")
            .into_inner();
        if status
            .keys
            .iter()
            .all(|k| k.state == spb::KeyState::Available as i32)
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cooled keys never came back: {:?}",
            status.keys
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_rules_use_is_exported() {
    let uses = kit_metric_uses();
    let needed: BTreeSet<String> = uses.values().flatten().cloned().collect();
    let namespace = collector_namespace();

    let (endpoint, received) = otlp::start().await;
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi))
        .await
        .expect("fake vendor");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &fake.base_url());
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"]);
    let scheduler = exporting(cmd, &endpoint);
    let mut cmd = Command::new(binary("voxpool-synthesis"));
    cmd.arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--scheduler", &format!("http://{}", scheduler.addr)])
        .args(["--catalog", "http://127.0.0.1:1"]);
    let synthesis = exporting(cmd, &endpoint);
    let mut client = voxpool_e2e::synthesis_client(&synthesis.addr).await;
    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    assert_eq!(voice.tts_model_id, POOL);
    let request = |text: &str| pb::SynthesizeRequest {
        voice: Some(Voice::Snapshot(voice.to_pb())),
        text: text.into(),
        format: pb::AudioFormat::Pcm as i32,
        ..Default::default()
    };

    // 1. Both keys answer 429 (Retry-After 1 s): a refusal on each, a failover, both keys
    //    cooled, and the request exhausted: its 600 ms deadline cannot wait out a cooldown.
    let refused = || {
        Step::Fail(Fault::RateLimited {
            retry_after_secs: Some(1),
        })
    };
    fake.script([refused(), refused()]);
    let mut twice = tonic::Request::new(request("Refused twice."));
    twice.set_timeout(Duration::from_millis(600));
    let err = client
        .synthesize(twice)
        .await
        .expect_err("both keys refused");
    assert!(
        matches!(
            err.code(),
            tonic::Code::ResourceExhausted | tonic::Code::Unavailable
        ),
        "{err:?}"
    );
    // 2. Once the keys are back: a unary success (characters, quota use) and a stream (its
    //    first audio).
    until_keys_available(&scheduler).await;
    let resp = client
        .synthesize(request("Counted against the quota."))
        .await
        .expect("unary synthesis")
        .into_inner();
    assert!(!resp.audio.is_empty());
    let mut stream = client
        .synthesize_stream(request("A stream's first audio."))
        .await
        .expect("stream")
        .into_inner();
    let mut chunks = 0;
    while let Some(chunk) = stream.next().await {
        chunk.expect("stream chunk");
        chunks += 1;
    }
    assert!(chunks > 0, "the stream sent audio");

    // 3. Poll the receiver until every name the kit uses has arrived, or the deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (names, services) = loop {
        let (names, services) = exported(&received, &namespace);
        if needed.is_subset(&names) {
            break (names, services);
        }
        if tokio::time::Instant::now() >= deadline {
            break (names, services);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let missing = missing(&uses, &names);
    assert!(
        missing.is_empty(),
        "the operator's kit uses metrics the services do not export (as the collector names \
         them):\n  {}\nexported: {names:#?}",
        missing.join("\n  ")
    );
    // `job` is the exporter's label for service.name: the kit matches real ones.
    for job in kit_jobs() {
        assert!(
            services.contains(&job),
            "the kit matches job=\"{job}\", but the services are named {services:?}"
        );
    }
    let unused: Vec<&String> = names.difference(&needed).collect();
    eprintln!("exported, not used by the kit: {unused:?}");
}
