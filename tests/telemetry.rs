//! Telemetry reaches a real OTLP receiver: metric names, units and plausible values, and
//! spans with the service names.

use std::{process::Command, time::Duration};

use voxpool_e2e::{binary, otlp, start_with_stderr, workspace_root};

/// Starts `cmd` at the default log level (spans are exported only for what the filter lets
/// through), its log lines dropped: what this file checks arrives over OTLP.
fn start(mut cmd: Command) -> voxpool_e2e::Service {
    cmd.env("RUST_LOG", "info");
    start_with_stderr(cmd, std::process::Stdio::null())
}
use voxpool_proto::scheduler::v1 as pb;

/// A scheduler on the example config (plus `extra` flags) exporting traces and metrics to
/// `endpoint` often.
fn scheduler_exporting_to(endpoint: &str, extra: &[&str]) -> voxpool_e2e::Service {
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.current_dir(workspace_root())
        .args([
            "--config",
            "deploy/config/example.toml",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        // As `make run` starts it: no recovery window on a fresh dev store.
        .env("VOXPOOL_SCHEDULER__RECOVERY_WINDOW_MS", "0")
        .env_remove("OTEL_SERVICE_NAME");
    start(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_exports_pool_metrics_and_spans_over_otlp() {
    let (endpoint, received) = otlp::start().await;
    let scheduler = scheduler_exporting_to(&endpoint, &[]);
    let mut client = voxpool_e2e::scheduler_client(&scheduler.addr).await;
    let lease = client
        .acquire(pb::AcquireRequest {
            pool: "volc-standard".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // Poll the receiver (a readiness signal) until a gauge shows the held lease.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = received.metrics();
        let held = metrics.iter().any(|m| {
            m.metric.name == "voxpool.key.in_flight"
                && otlp::points(&m.metric).iter().any(|(v, attrs)| {
                    *v == 1.0
                        && attrs.contains(&format!("key={}", lease.key_id))
                        && attrs.contains(&"pool=volc-standard".to_owned())
                })
        });
        if held {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no in-flight gauge of 1 arrived; got {:?}",
            metrics.iter().map(|m| &m.metric.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = received.metrics();
    let unit = |name: &str| {
        metrics
            .iter()
            .find(|m| m.metric.name == name)
            .map(|m| m.metric.unit.clone())
    };
    assert_eq!(unit("voxpool.key.in_flight").as_deref(), Some("{lease}"));
    assert_eq!(unit("voxpool.key.capacity").as_deref(), Some("{lease}"));
    assert_eq!(unit("voxpool.key.utilization").as_deref(), Some("1"));
    assert_eq!(unit("voxpool.pool.utilization").as_deref(), Some("1"));
    assert_eq!(
        unit("voxpool.scheduler.acquires").as_deref(),
        Some("{acquire}")
    );
    assert_eq!(
        unit("voxpool.scheduler.acquire.duration").as_deref(),
        Some("s")
    );
    assert!(metrics.iter().all(|m| m.service == "voxpool-scheduler"));
    let util = metrics
        .iter()
        .rev()
        .find(|m| m.metric.name == "voxpool.pool.utilization")
        .map(|m| otlp::points(&m.metric))
        .unwrap();
    let (v, _) = util
        .iter()
        .find(|(_, a)| a.contains(&"pool=volc-standard".to_owned()))
        .unwrap();
    assert!(
        (v - 1.0 / 30.0).abs() < 1e-9,
        "1 lease over 30 slots, got {v}"
    );
    // No metric attribute ever carries a credential reference's value or the admin token.
    for m in &metrics {
        for (_, attrs) in otlp::points(&m.metric) {
            assert!(attrs.iter().all(|a| !a.contains("VOLC_TOKEN")), "{attrs:?}");
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !received
        .spans()
        .iter()
        .any(|(svc, s)| svc == "voxpool-scheduler" && s.name.contains("Acquire"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Acquire span arrived: {:?}",
            received
                .spans()
                .iter()
                .map(|(_, s)| s.name.clone())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_spans_synthesis_and_scheduler_and_synthesis_metrics_arrive() {
    use voxpool_proto::synthesis::v1::{SynthesizeRequest, synthesize_request::Voice};
    let (endpoint, received) = otlp::start().await;
    let otel = |cmd: &mut Command| {
        cmd.current_dir(workspace_root())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .env_remove("OTEL_SERVICE_NAME");
    };
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.args([
        "--config",
        "deploy/config/example.toml",
        "--listen",
        "127.0.0.1:0",
    ]);
    otel(&mut cmd);
    let scheduler = start(cmd);
    let mut cmd = Command::new(binary("voxpool-synthesis"));
    cmd.args([
        "--config",
        "deploy/config/example.toml",
        "--listen",
        "127.0.0.1:0",
        "--scheduler",
    ])
    .arg(format!("http://{}", scheduler.addr));
    otel(&mut cmd);
    let synthesis = start(cmd);
    let mut client = voxpool_e2e::synthesis_client(&synthesis.addr).await;
    let snap = voxpool_e2e::voice::snapshot("espeak", "espeak-ng", "en-us", "espeak-local");
    let resp = client
        .synthesize(SynthesizeRequest {
            voice: Some(Voice::Snapshot(snap.to_pb())),
            text: "Tracing across services.".into(),
            ..Default::default()
        })
        .await
        .expect("espeak synthesis")
        .into_inner();
    assert!(!resp.audio.is_empty());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let spans = received.spans();
        let synth_traces: std::collections::HashSet<Vec<u8>> = spans
            .iter()
            .filter(|(svc, _)| svc == "voxpool-synthesis")
            .map(|(_, s)| s.trace_id.clone())
            .collect();
        let shared = spans.iter().any(|(svc, s)| {
            svc == "voxpool-scheduler"
                && s.name.contains("Acquire")
                && synth_traces.contains(&s.trace_id)
        });
        let metrics = received.metrics();
        let has = |name: &str, unit: &str| {
            metrics.iter().any(|m| {
                m.service == "voxpool-synthesis" && m.metric.name == name && m.metric.unit == unit
            })
        };
        if shared
            && has("voxpool.synthesis.requests", "{request}")
            && has("voxpool.vendor.responses", "{response}")
            && has("voxpool.synthesis.characters", "{character}")
            && has("voxpool.synthesis.request.duration", "s")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no shared trace or synthesis metrics: spans {:?}, metrics {:?}",
            spans
                .iter()
                .map(|(svc, s)| format!("{svc}:{}", s.name))
                .collect::<Vec<_>>(),
            metrics
                .iter()
                .map(|m| format!("{}:{}", m.service, m.metric.name))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Resident memory of process `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_pool_names_never_become_metric_series_or_memory() {
    let (endpoint, received) = otlp::start().await;
    let scheduler = scheduler_exporting_to(&endpoint, &[]);
    let mut client = voxpool_e2e::scheduler_client(&scheduler.addr).await;
    let unknown = |i: usize| format!("{i:05}-{}", "x".repeat(64 * 1024));
    let mut send = async |range: std::ops::Range<usize>| {
        for i in range {
            let err = client
                .acquire(pb::AcquireRequest {
                    pool: unknown(i),
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert_eq!(err.code(), tonic::Code::NotFound);
            assert!(err.message().len() < 512, "a short NOT_FOUND");
        }
    };
    // Wait (a readiness signal: the exported counter) until `n` are counted under `unknown`.
    let exported = async |n: usize| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let counted: f64 = received
                .metrics()
                .iter()
                .rev()
                .find(|m| m.metric.name == "voxpool.scheduler.acquires")
                .map(|m| otlp::points(&m.metric))
                .unwrap_or_default()
                .iter()
                .filter(|(_, a)| a.contains(&"pool=unknown".to_owned()))
                .map(|(v, _)| *v)
                .sum();
            if counted >= n as f64 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the {n} unknown-pool Acquires were never exported under pool=unknown ({counted})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // 300 distinct names warm the process up (buffers, allocator pages, exports)...
    send(0..300).await;
    exported(300).await;
    let before = rss_kib(scheduler.child.id());
    // ...then 600 more: kept anywhere (labels, series, spans) they would add 37.5 MiB.
    send(300..900).await;
    exported(900).await;
    let after = rss_kib(scheduler.child.id());
    assert!(
        after.saturating_sub(before) < 16 * 1024,
        "resident memory grew from {before} KiB to {after} KiB over 600 unknown 64 KiB names"
    );
    let pools: std::collections::BTreeSet<String> = received
        .metrics()
        .iter()
        .flat_map(|m| otlp::points(&m.metric))
        .flat_map(|(_, attrs)| attrs)
        .filter_map(|a| a.strip_prefix("pool=").map(str::to_owned))
        .collect();
    assert!(
        pools.iter().all(|p| !p.contains("xxxxxxxx")),
        "only configured pools (and `unknown`) label series: {:?}",
        pools
            .iter()
            .map(|p| &p[..p.len().min(20)])
            .collect::<Vec<_>>()
    );
    assert!(pools.contains("unknown"), "{pools:?}");
    // The example config's pools and `unknown`.
    let configured =
        voxpool_config::Config::from_toml_str(include_str!("../deploy/config/example.toml"))
            .expect("example config")
            .pools
            .len();
    assert!(
        pools.len() <= configured + 1,
        "bounded series: {} pool values for {configured} configured pools",
        pools.len()
    );
    let spans = received.spans();
    assert!(
        spans.iter().all(|(_, s)| s
            .attributes
            .iter()
            .all(|kv| { format!("{:?}", kv.value).len() < 4096 })),
        "no span attribute carries a 64 KiB name"
    );
}

/// The latest `voxpool.health.serving` point of `service` with `dependency`, if one arrived.
fn serving_point(received: &otlp::Received, service: &str, dependency: &str) -> Option<f64> {
    received
        .metrics()
        .iter()
        .rev()
        .filter(|m| m.service == service && m.metric.name == "voxpool.health.serving")
        .flat_map(|m| otlp::points(&m.metric))
        .find(|(_, attrs)| attrs.contains(&format!("dependency={dependency}")))
        .map(|(v, _)| v)
}

/// Polls the receiver (the readiness signal) until `service`'s health gauge reads `want`.
async fn wait_serving(received: &otlp::Received, service: &str, dependency: &str, want: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while serving_point(received, service, dependency) != Some(want) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{service}'s voxpool.health.serving never read {want}; last {:?}",
            serving_point(received, service, dependency)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_exported_one_while_serving_and_zero_while_the_store_is_down() {
    let (endpoint, received) = otlp::start().await;
    let mut redis = voxpool_testkit::RedisServer::start();
    let url = redis.url();
    let _scheduler = scheduler_exporting_to(&endpoint, &["--store", &url]);
    wait_serving(&received, "voxpool-scheduler", "lease store", 1.0).await;
    redis.kill();
    wait_serving(&received, "voxpool-scheduler", "lease store", 0.0).await;
    redis.restart_empty();
    wait_serving(&received, "voxpool-scheduler", "lease store", 1.0).await;
    let unit = received
        .metrics()
        .iter()
        .find(|m| m.metric.name == "voxpool.health.serving")
        .map(|m| m.metric.unit.clone());
    assert_eq!(
        unit.as_deref(),
        Some(""),
        "a 0/1 flag: no unit, no _ratio suffix"
    );
}
