//! Logs, traces and metrics, set up the same way by every binary.
//!
//! - Logs: `tracing` to stderr with an `EnvFilter` (`RUST_LOG`, default `info`), pretty or
//!   JSON by `VOXPOOL_LOG_FORMAT` (`pretty` | `json`). stdout stays free for command output.
//!   The `redis` crate's warnings come at most once per 10 s, with a count of the rest
//!   (`voxpool_redis::log_limit`).
//! - Traces and metrics: OTLP over gRPC (`opentelemetry-otlp` + `tracing-opentelemetry`), on
//!   only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the `_TRACES_` / `_METRICS_` variant) is set.
//!   The exporters read the standard `OTEL_EXPORTER_OTLP_*` variables, the service name comes
//!   from `OTEL_SERVICE_NAME` (default: the binary's name) and the metric export interval from
//!   `OTEL_METRIC_EXPORT_INTERVAL` (ms, default 60000). Batching runs on the Tokio runtime.
//! - Trace context crosses our own gRPC hops as W3C `traceparent` metadata: clients add
//!   [`TraceContextInterceptor`], servers start each RPC's span with [`server_span`].
//!
//! [`Telemetry::shutdown`] flushes and awaits both exporters; call it after the server drained.

use opentelemetry::{
    Context, global,
    propagation::{Extractor, Injector},
    trace::TracerProvider as _,
};
use opentelemetry_otlp::{MetricExporter, SpanExporter};
use opentelemetry_sdk::{
    Resource,
    metrics::{SdkMeterProvider, periodic_reader_with_async_runtime::PeriodicReader},
    propagation::TraceContextPropagator,
    runtime,
    trace::{SdkTracerProvider, span_processor_with_async_runtime::BatchSpanProcessor},
};
use tonic::metadata::{KeyRef, MetadataKey, MetadataMap};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global log subscriber only (no OTLP), for one-shot commands. Safe to call
/// more than once; a server calls [`Telemetry::init`] instead (only the first install wins).
pub fn init_logging() {
    let _ = install(None);
}

fn install(tracer: Option<opentelemetry_sdk::trace::Tracer>) -> bool {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("VOXPOOL_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let otel = tracer.map(|t| tracing_opentelemetry::layer().with_tracer(t));
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(voxpool_redis::log_limit::layer())
        .with(otel);
    if json {
        registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init()
            .is_ok()
    } else {
        // Colours only on a terminal: redirected logs stay plain text.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        registry
            .with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr))
            .try_init()
            .is_ok()
    }
}

/// True when an OTLP endpoint is configured in the environment.
pub fn otlp_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// The exporters to flush at shutdown (empty when OTLP is off).
#[derive(Debug, Default)]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Sets up logs, and traces + metrics when an OTLP endpoint is configured. Must run inside
    /// a Tokio runtime (the exporters batch on it). `service_name` is the default for
    /// `OTEL_SERVICE_NAME`. Errors: the OTLP exporters could not be built (bad endpoint URL).
    pub fn init(service_name: &str) -> Result<Self, String> {
        global::set_text_map_propagator(TraceContextPropagator::new());
        if !otlp_configured() {
            install(None);
            return Ok(Self::default());
        }
        let name = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| service_name.to_owned());
        let resource = Resource::builder().with_service_name(name).build();
        let spans = SpanExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| format!("OTLP span exporter: {e}"))?;
        let tracer = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(spans, runtime::Tokio).build())
            .with_resource(resource.clone())
            .build();
        let metrics = MetricExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| format!("OTLP metric exporter: {e}"))?;
        let meter = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics, runtime::Tokio).build())
            .with_resource(resource)
            .build();
        global::set_tracer_provider(tracer.clone());
        global::set_meter_provider(meter.clone());
        install(Some(tracer.tracer("voxpool")));
        Ok(Self {
            tracer: Some(tracer),
            meter: Some(meter),
        })
    }

    /// Flushes and shuts down the exporters, awaiting the flush.
    pub async fn shutdown(self) {
        if self.tracer.is_none() && self.meter.is_none() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(Err(e)) = self.meter.map(|m| m.shutdown()) {
                eprintln!("metrics flush at shutdown failed: {e}");
            }
            if let Some(Err(e)) = self.tracer.map(|t| t.shutdown()) {
                eprintln!("trace flush at shutdown failed: {e}");
            }
        })
        .await;
    }
}

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (MetadataKey::from_bytes(key.as_bytes()), value.parse()) {
            self.0.insert(k, v);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct MetadataExtractor<'a>(&'a MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                KeyRef::Ascii(k) => Some(k.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// Client interceptor adding the current span's W3C `traceparent` to every outgoing call.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceContextInterceptor;

impl tonic::service::Interceptor for TraceContextInterceptor {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let cx = tracing::Span::current().context();
        global::get_text_map_propagator(|p| {
            p.inject_context(&cx, &mut MetadataInjector(request.metadata_mut()));
        });
        Ok(request)
    }
}

/// The span of one incoming RPC (`rpc.method` = the gRPC path), child of the caller's trace
/// when the request carries `traceparent`. Use with `Server::builder().trace_fn(server_span)`.
/// `caller` is filled in by [`crate::auth::Authenticated`] once the caller is known
/// (`token:synthesis`, `mtls:CN=…`; never a secret); `cached_chunks` by synthesis (how many
/// of the request's text chunks came from its audio cache).
pub fn server_span(request: &http::Request<()>) -> tracing::Span {
    let path = request.uri().path();
    let span = tracing::info_span!("grpc.server", otel.name = %path, otel.kind = "server", rpc.system = "grpc", rpc.method = %path, caller = tracing::field::Empty, cached_chunks = tracing::field::Empty);
    let parent: Context =
        global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(request.headers())));
    let _ = span.set_parent(parent);
    span
}

/// The span of one incoming HTTP request (synthesis's OpenAI-compatible front): named
/// `<METHOD> <route>` with `http.request.method` and `http.route` (the route's template, never
/// the raw path), child of the caller's trace when the request carries `traceparent`.
/// `tenant`, `pool`, `cached_chunks` and `http.response.status_code` are filled in as they
/// become known.
pub fn http_server_span(
    method: &str,
    route: &'static str,
    headers: &http::HeaderMap,
) -> tracing::Span {
    let span = tracing::info_span!("http.server", otel.name = %format!("{method} {route}"), otel.kind = "server",
        http.request.method = %method, http.route = route, tenant = tracing::field::Empty, pool = tracing::field::Empty,
        cached_chunks = tracing::field::Empty, http.response.status_code = tracing::field::Empty);
    let parent: Context = global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    let _ = span.set_parent(parent);
    span
}

/// The remote parent carried in `metadata` (for code that has a `tonic::Request`).
pub fn remote_context(metadata: &MetadataMap) -> Context {
    global::get_text_map_propagator(|p| p.extract(&MetadataExtractor(metadata)))
}
