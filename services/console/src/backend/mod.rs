//! The one facade every page goes through: the four services' public gRPC APIs, nothing
//! else (never their stores). Each method converts at this edge (`convert`) into the
//! console's view types ([`crate::view`]), and every failure becomes a [`BackendError`] that
//! names the service and says what a person can do about it.
//!
//! Data-plane calls carry the console's client token (`VOXPOOL_CLIENT_TOKEN`); admin calls
//! carry the admin token the console was started with, added per call (the client token
//! interceptor leaves a call's own `authorization` alone). A page calls an admin method only
//! for an admin session (`crate::session`): the read-only role never reaches one.

pub mod catalog;
mod convert;
mod jobs;
pub mod pools;
mod synthesis;

use std::time::Duration;

use tonic::{
    Code, Request, Status,
    metadata::{Ascii, MetadataValue},
    service::interceptor::InterceptedService,
    transport::Channel,
};
use tonic_types::StatusExt;
use voxpool_domain::secret::Secret;
use voxpool_proto::{
    catalog::v1::{
        voice_catalog_admin_client::VoiceCatalogAdminClient,
        voice_catalog_client::VoiceCatalogClient,
    },
    jobs::v1::jobs_client::JobsClient,
    scheduler::v1::pool_scheduler_client::PoolSchedulerClient,
    synthesis::v1::{
        synthesis_admin_client::SynthesisAdminClient, synthesis_client::SynthesisClient,
    },
};
use voxpool_runtime::auth::ClientToken;

pub use self::jobs::JobArchive;

/// A channel whose calls carry the client token.
type Authed = InterceptedService<Channel, ClientToken>;

/// Longest a page waits for one service's answer before it shows that service as down.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest answer accepted (an audition's WAV, a job item's audio).
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// One of the four services, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// PoolScheduler.
    Scheduler,
    /// VoiceCatalog (and its admin side).
    Catalog,
    /// Synthesis (and its admin side).
    Synthesis,
    /// Jobs.
    Jobs,
}

impl Service {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scheduler => "scheduler",
            Self::Catalog => "catalog",
            Self::Synthesis => "synthesis",
            Self::Jobs => "jobs",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Self::Scheduler => "--scheduler",
            Self::Catalog => "--catalog",
            Self::Synthesis => "--synthesis",
            Self::Jobs => "--jobs",
        }
    }
}

/// A service's refusal or absence, as a page shows it.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{}", self.summary())]
pub struct BackendError {
    /// Which service.
    pub service: Service,
    /// Its gRPC code (UNAVAILABLE when it does not answer).
    pub code: Code,
    /// Its message, as it wrote it (it names the field, pool or pack).
    pub message: String,
    /// Field violations (`google.rpc.BadRequest`): field name and description, shown next to
    /// the form field of that name.
    pub fields: Vec<(String, String)>,
}

impl BackendError {
    fn from_status(service: Service, status: &Status) -> Self {
        let fields = status
            .get_details_bad_request()
            .map(|b| {
                b.field_violations
                    .into_iter()
                    .map(|v| (v.field, v.description))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            service,
            code: status.code(),
            message: status.message().to_owned(),
            fields,
        }
    }

    /// A service this console was started without (`--jobs` is optional).
    pub fn not_configured(service: Service) -> Self {
        Self {
            service,
            code: Code::FailedPrecondition,
            message: format!(
                "the console was started without {}: start it with {} URL to see this page",
                service.flag(),
                service.flag()
            ),
            fields: Vec::new(),
        }
    }

    /// One line a person can act on.
    pub fn summary(&self) -> String {
        let name = self.service.name();
        match self.code {
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => format!(
                "the {name} service does not answer ({}); check that it runs and that {} names it",
                self.message,
                self.service.flag()
            ),
            Code::Unauthenticated | Code::PermissionDenied => format!(
                "the {name} service refused the console's credentials ({}); start the console with the same VOXPOOL_ADMIN_TOKEN and VOXPOOL_CLIENT_TOKEN the services accept",
                self.message
            ),
            code => format!("the {name} service answered {code:?}: {}", self.message),
        }
    }

    /// The messages the service gave for form field `name` (`voice_pack.locales[1]` and
    /// `voice_pack.params.rate` are the form's `locales` and `rate`), joined; empty when none.
    pub fn field(&self, name: &str) -> String {
        self.fields
            .iter()
            .filter(|(f, _)| {
                let base = f.split('[').next().unwrap_or(f);
                base == name || base.ends_with(&format!(".{name}"))
            })
            .map(|(_, d)| d.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The console's view of the four services.
#[derive(Clone, Debug)]
pub struct Backend {
    scheduler: PoolSchedulerClient<Authed>,
    catalog: VoiceCatalogClient<Authed>,
    catalog_admin: VoiceCatalogAdminClient<Authed>,
    synthesis: SynthesisClient<Authed>,
    synthesis_admin: SynthesisAdminClient<Authed>,
    jobs: Option<JobsClient<Authed>>,
    admin: Option<MetadataValue<Ascii>>,
}

/// Where the four services are, and the console's credentials for them.
#[derive(Debug)]
pub struct Endpoints {
    /// `--scheduler`.
    pub scheduler: String,
    /// `--catalog`.
    pub catalog: String,
    /// `--synthesis`.
    pub synthesis: String,
    /// `--jobs`, if given.
    pub jobs: Option<String>,
    /// The client token sent on data-plane calls.
    pub client_token: ClientToken,
    /// The admin token sent on admin calls (also the admin's sign-in token).
    pub admin_token: Option<Secret>,
}

fn channel(flag: &str, spec: &str, token: &ClientToken) -> Result<Authed, String> {
    let channel = voxpool_runtime::endpoints::Endpoints::start(flag, spec)
        .map_err(|reason| format!("{flag} {spec:?}: {reason}"))?
        .channel;
    Ok(InterceptedService::new(channel, token.clone()))
}

impl Backend {
    /// Clients of the services at `endpoints`; channels connect lazily, so a service down at
    /// start-up shows on its pages, not as a refusal to start. Errors: a malformed URL.
    pub fn connect(endpoints: &Endpoints) -> Result<Self, String> {
        let t = &endpoints.client_token;
        let scheduler = channel("--scheduler", &endpoints.scheduler, t)?;
        let catalog = channel("--catalog", &endpoints.catalog, t)?;
        let synthesis = channel("--synthesis", &endpoints.synthesis, t)?;
        let jobs = match &endpoints.jobs {
            Some(spec) => Some(
                JobsClient::new(channel("--jobs", spec, t)?)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
            None => None,
        };
        let admin = match &endpoints.admin_token {
            Some(token) => {
                let mut value: MetadataValue<Ascii> = format!("Bearer {}", token.expose())
                    .parse()
                    .map_err(|_| "VOXPOOL_ADMIN_TOKEN holds characters not allowed in a header")?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        Ok(Self {
            scheduler: PoolSchedulerClient::new(scheduler),
            catalog: VoiceCatalogClient::new(catalog.clone()),
            catalog_admin: VoiceCatalogAdminClient::new(catalog)
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            synthesis: SynthesisClient::new(synthesis.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            synthesis_admin: SynthesisAdminClient::new(synthesis),
            jobs,
            admin,
        })
    }

    /// A data-plane request with the console's deadline.
    fn request<T>(message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(CALL_TIMEOUT);
        request
    }

    /// An admin request: the admin token in `authorization`.
    fn admin_request<T>(&self, message: T) -> Request<T> {
        let mut request = Self::request(message);
        if let Some(value) = &self.admin {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        request
    }
}

/// Maps a status of `service` into a [`BackendError`], logging it with the service named
/// (the message is quoted: services may echo caller input).
fn failed(service: Service) -> impl Fn(Status) -> BackendError {
    move |status| {
        let e = BackendError::from_status(service, &status);
        tracing::warn!(
            service = service.name(),
            code = ?e.code,
            message = %voxpool_domain::untrusted::quote(&e.message),
            "a service call failed"
        );
        e
    }
}
