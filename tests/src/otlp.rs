//! A real OTLP/gRPC receiver for tests: the official OpenTelemetry collector protos
//! (`opentelemetry-proto`'s generated MetricsService and TraceService servers) on
//! 127.0.0.1:0, keeping everything it receives.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::{
    collector::{
        metrics::v1::{
            ExportMetricsServiceRequest, ExportMetricsServiceResponse,
            metrics_service_server::{MetricsService, MetricsServiceServer},
        },
        trace::v1::{
            ExportTraceServiceRequest, ExportTraceServiceResponse,
            trace_service_server::{TraceService, TraceServiceServer},
        },
    },
    metrics::v1::{Metric, metric::Data, number_data_point::Value},
    trace::v1::Span,
};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

/// Everything received so far.
#[derive(Clone, Default)]
pub struct Received {
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
    traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

#[tonic::async_trait]
impl MetricsService for Received {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        self.metrics
            .lock()
            .expect("lock")
            .push(request.into_inner());
        Ok(Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        self.traces.lock().expect("lock").push(request.into_inner());
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// One received metric with the service that sent it.
#[derive(Clone, Debug)]
pub struct ReceivedMetric {
    /// `service.name` resource attribute.
    pub service: String,
    /// The metric.
    pub metric: Metric,
}

fn service_name(resource: Option<&opentelemetry_proto::tonic::resource::v1::Resource>) -> String {
    resource
        .into_iter()
        .flat_map(|r| r.attributes.iter())
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => {
                Some(s.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

impl Received {
    /// Every metric received, newest export last.
    pub fn metrics(&self) -> Vec<ReceivedMetric> {
        let mut out = Vec::new();
        for req in self.metrics.lock().expect("lock").iter() {
            for rm in &req.resource_metrics {
                let service = service_name(rm.resource.as_ref());
                for sm in &rm.scope_metrics {
                    for m in &sm.metrics {
                        out.push(ReceivedMetric {
                            service: service.clone(),
                            metric: m.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    /// Every span received, with its service name.
    pub fn spans(&self) -> Vec<(String, Span)> {
        let mut out = Vec::new();
        for req in self.traces.lock().expect("lock").iter() {
            for rs in &req.resource_spans {
                let service = service_name(rs.resource.as_ref());
                for ss in &rs.scope_spans {
                    out.extend(ss.spans.iter().map(|s| (service.clone(), s.clone())));
                }
            }
        }
        out
    }
}

/// Numeric gauge / sum points of a metric as (value, attributes as `k=v` strings).
pub fn points(m: &Metric) -> Vec<(f64, Vec<String>)> {
    let dps = match &m.data {
        Some(Data::Gauge(g)) => &g.data_points,
        Some(Data::Sum(s)) => &s.data_points,
        _ => return Vec::new(),
    };
    dps.iter()
        .map(|p| {
            let v = match p.value {
                Some(Value::AsDouble(d)) => d,
                Some(Value::AsInt(i)) => i as f64,
                None => f64::NAN,
            };
            let attrs = p
                .attributes
                .iter()
                .map(|kv| {
                    let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(
                            opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                                s,
                            ),
                        ) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    format!("{}={v}", kv.key)
                })
                .collect();
            (v, attrs)
        })
        .collect()
}

/// Starts the receiver; returns its `http://127.0.0.1:PORT` endpoint and the store.
pub async fn start() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind otlp");
    let addr = listener.local_addr().expect("addr");
    let received = Received::default();
    let server = tonic::transport::Server::builder()
        .add_service(MetricsServiceServer::new(received.clone()))
        .add_service(TraceServiceServer::new(received.clone()));
    tokio::spawn(server.serve_with_incoming(TcpListenerStream::new(listener)));
    (format!("http://{addr}"), received)
}
