//! Client-side balancing over the replicas of one voxpool service: a flag such as synthesis's
//! `--scheduler` or voxctl's `--synthesis` takes `URL[,URL...]`, and an `http://` URL whose
//! host is a DNS name stands for every address it resolves to (re-resolved, so a Kubernetes
//! headless Service's pods come and go). Calls are balanced over the healthy
//! endpoints by tonic's balancing channel (tower's power-of-two-choices over a discovery
//! stream); this module only feeds that stream.
//!
//! Every [`PROBE_INTERVAL`], or at once when a call failed with UNAVAILABLE ([`Endpoints::
//! kick`]), each candidate endpoint's `grpc.health.v1` is checked: one that is not SERVING
//! (down, draining, its store unreachable) is taken out of the balancer, and put back when it
//! answers SERVING again. When no endpoint is healthy they all stay in, so calls fail fast with
//! the transport's error instead of waiting for one to appear.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use tokio::sync::{Notify, mpsc::Sender};
use tonic::transport::{Channel, Endpoint, channel::Change};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// Time between health probes of the endpoints.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// Longest a probe (connect + health check) may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// One entry of `--scheduler`.
#[derive(Clone, Debug)]
enum Target {
    /// A URL used as it is (an IP address, or `https://`, whose certificate names the host).
    Fixed(String),
    /// `http://name:port`: every address `name` resolves to.
    Resolved {
        /// `name:port`, for the resolver.
        authority: String,
    },
}

/// The balanced channel over a service's endpoints, and the handle that makes the prober look
/// again at once.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// Balances calls over the endpoints currently in.
    pub channel: Channel,
    kick: Arc<Notify>,
    heard: Arc<Heard>,
}

/// When an endpoint last answered its health check SERVING (ms since `start`).
#[derive(Debug)]
struct Heard {
    start: tokio::time::Instant,
    last_ms: std::sync::atomic::AtomicU64,
}

impl Heard {
    fn mark(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Endpoints {
    /// Parses `spec` (`URL[,URL...]`, named `flag` in errors) and starts the prober. Needs a
    /// Tokio runtime. Errors: an empty list or a malformed URL, as a one-line reason.
    pub fn start(flag: &str, spec: &str) -> Result<Self, String> {
        Self::start_probing(flag, spec, PROBE_INTERVAL)
    }

    /// [`Endpoints::start`], the endpoints probed every `every` instead of every
    /// [`PROBE_INTERVAL`].
    pub fn start_probing(flag: &str, spec: &str, every: Duration) -> Result<Self, String> {
        let mut targets = Vec::new();
        for url in spec.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            // Validates the URL (and the TLS set-up for https) once, up front.
            crate::limits::client_endpoint(flag, url)?;
            let uri: http::Uri = url
                .parse()
                .map_err(|e| format!("{flag} {url:?} is not a URL: {e}"))?;
            let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
            let path_ok = matches!(uri.path(), "" | "/") && uri.query().is_none();
            if !scheme_ok || uri.host().is_none() || !path_ok {
                return Err(format!(
                    "{flag} {url:?} is not a service URL: expected http://host:port or https://host:port (no path)"
                ));
            }
            let host = uri.host().unwrap_or_default();
            let is_ip = host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok();
            targets.push(if uri.scheme_str() == Some("http") && !is_ip {
                Target::Resolved {
                    authority: format!("{host}:{}", uri.port_u16().unwrap_or(80)),
                }
            } else {
                Target::Fixed(url.to_owned())
            });
        }
        if targets.is_empty() {
            return Err(format!(
                "{flag} needs at least one URL, e.g. http://127.0.0.1:50051"
            ));
        }
        let (channel, changes) = Channel::balance_channel::<String>(64);
        let kick = Arc::new(Notify::new());
        let heard = Arc::new(Heard {
            start: tokio::time::Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
        });
        let prober = Prober {
            every,
            heard: heard.clone(),
            flag: flag.to_owned(),
            targets,
            changes,
            kick: kick.clone(),
            inserted: BTreeSet::new(),
            probes: BTreeMap::new(),
        };
        tokio::spawn(prober.run());
        Ok(Self {
            channel,
            kick,
            heard,
        })
    }

    /// How long no endpoint has answered its health check SERVING (since start-up when none
    /// ever did). Probes run every [`PROBE_INTERVAL`], so a service back up shows within one.
    pub fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(
            self.heard
                .last_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        self.heard.start.elapsed().saturating_sub(last)
    }

    /// An endpoint answered a call: the service is up, whatever the last probe said (a probe
    /// can time out on a busy client's own runtime while its calls are answered).
    pub fn answered(&self) {
        self.heard.mark();
    }

    /// Asks the prober to check every endpoint now (a call just failed with UNAVAILABLE).
    pub fn kick(&self) {
        self.kick.notify_one();
    }
}

/// The task that keeps the balancer's endpoint set equal to the healthy endpoints.
struct Prober {
    /// Time between probes.
    every: Duration,
    heard: Arc<Heard>,
    flag: String,
    targets: Vec<Target>,
    changes: Sender<Change<String, Endpoint>>,
    kick: Arc<Notify>,
    inserted: BTreeSet<String>,
    probes: BTreeMap<String, HealthClient<Channel>>,
}

impl Prober {
    async fn run(mut self) {
        loop {
            if self.changes.is_closed() {
                return; // every clone of the channel is gone
            }
            let candidates = self.candidates().await;
            let mut healthy = BTreeSet::new();
            for url in &candidates {
                if self.serving(url).await {
                    healthy.insert(url.clone());
                }
            }
            if !healthy.is_empty() {
                self.heard.mark();
            }
            // No healthy endpoint: keep every candidate in, so calls fail fast and visibly.
            let wanted = if healthy.is_empty() {
                candidates
            } else {
                healthy
            };
            if !self.apply(&wanted).await {
                return; // the channel is gone: nothing left to balance for
            }
            tokio::select! {
                () = tokio::time::sleep(self.every) => {}
                () = self.kick.notified() => {}
            }
        }
    }

    /// Every endpoint URL the targets stand for now (DNS names resolved).
    async fn candidates(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for target in &self.targets {
            match target {
                Target::Fixed(url) => {
                    out.insert(url.clone());
                }
                Target::Resolved { authority } => {
                    match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::lookup_host(authority))
                        .await
                    {
                        Ok(Ok(addrs)) => out.extend(addrs.map(|a| format!("http://{a}"))),
                        Ok(Err(e)) => {
                            tracing::warn!(flag = %self.flag, name = %authority, error = %e, "cannot resolve a service name");
                        }
                        Err(_) => {
                            tracing::warn!(flag = %self.flag, name = %authority, "resolving a service name timed out");
                        }
                    }
                }
            }
        }
        out
    }

    /// True when `url` answers its health check with SERVING within [`PROBE_TIMEOUT`].
    async fn serving(&mut self, url: &str) -> bool {
        let health = match self.probes.get(url) {
            Some(h) => h.clone(),
            None => {
                let Ok(endpoint) = crate::limits::client_endpoint(&self.flag, url) else {
                    return false;
                };
                let h = HealthClient::new(endpoint.connect_timeout(PROBE_TIMEOUT).connect_lazy());
                self.probes.insert(url.to_owned(), h.clone());
                h
            }
        };
        let mut health = health;
        let check = health.check(HealthCheckRequest {
            service: String::new(),
        });
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, check).await,
            Ok(Ok(r)) if r.get_ref().status == ServingStatus::Serving as i32
        )
    }

    /// Inserts and removes endpoints so the balancer holds exactly `wanted`. False when the
    /// balancer is gone.
    async fn apply(&mut self, wanted: &BTreeSet<String>) -> bool {
        for url in self
            .inserted
            .difference(wanted)
            .cloned()
            .collect::<Vec<_>>()
        {
            tracing::info!(flag = %self.flag, endpoint = %url, "endpoint taken out of rotation");
            if self
                .changes
                .send(Change::Remove(url.clone()))
                .await
                .is_err()
            {
                return false;
            }
            self.inserted.remove(&url);
        }
        for url in wanted
            .difference(&self.inserted)
            .cloned()
            .collect::<Vec<_>>()
        {
            let Ok(endpoint) = crate::limits::client_endpoint(&self.flag, &url) else {
                continue;
            };
            let endpoint = endpoint
                .connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true);
            tracing::debug!(flag = %self.flag, endpoint = %url, "endpoint in rotation");
            if self
                .changes
                .send(Change::Insert(url.clone(), endpoint))
                .await
                .is_err()
            {
                return false;
            }
            self.inserted.insert(url);
        }
        // Probe clients of endpoints no longer resolved are dropped.
        self.probes
            .retain(|url, _| wanted.contains(url) || self.inserted.contains(url));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_answered_call_counts_as_hearing_from_the_service() {
        // Nothing listens on port 9 of localhost: no probe is ever answered.
        let endpoints = Endpoints::start("--scheduler", "http://127.0.0.1:9").unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(endpoints.silent_for() >= Duration::from_secs(10));
        endpoints.answered();
        assert!(endpoints.silent_for() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn every_entry_must_be_an_http_or_https_url_without_a_path() {
        for bad in [
            "notaurl",
            "ftp://h:1",
            "127.0.0.1:50051",
            "http://h:1/path",
            "http://a:1,",
            "",
        ] {
            let result = Endpoints::start("--scheduler", bad);
            if bad == "http://a:1," {
                assert!(result.is_ok(), "an empty trailing entry is ignored");
                continue;
            }
            let err = result.expect_err(bad);
            assert!(err.contains("--scheduler"), "{bad}: {err}");
        }
        assert!(Endpoints::start("--scheduler", "http://127.0.0.1:1, https://localhost:2").is_ok());
    }
}
